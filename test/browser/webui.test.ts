/**
 * What an operator sees: Debian's chromium (driven by playwright-core) opens the dev server's Web UI,
 * filters the workflow list by TaskId, finds the delivery workflow and reads its summary, and finds a
 * lean fast-lane attempt (a local activity) in the event history with its summary.
 * Screenshots land in test-output/webui/. Run with `npx jest -c jest.browser.config.js`.
 */
import { freePort } from '../helpers/test-services-port';
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { startDevServer } from '../../src/embedded/temporal';
import { makeDeliveryWorkflowId } from '../../src/ids';
import {
  createConfig,
  deliveryResult,
  eventually,
  jobRow,
  markTargetAnswered,
  quietTemporal,
  startStack,
  writeEvent,
  type Stack,
} from '../helpers/harness';
import { startReceiver, type Receiver } from '../helpers/receiver';

jest.setTimeout(90_000);

// Debian's chromium; CHROMIUM_PATH overrides it. A missing browser fails the check, never skips it:
// scripts/ci-browser.sh installs it, so a green browser step always means the check ran.
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

// Without the background-networking flags chromium keeps reaching outside (refused here).
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

// WEBUI_TEMPORAL=cluster: the same check on a real Temporal server and the ui-server of `npm run cluster`.
const ON_CLUSTER = process.env.WEBUI_TEMPORAL === 'cluster';
const OUT = ON_CLUSTER ? 'webui-cluster' : 'webui';
const MISSING = `${CHROMIUM} is missing (apt-get install -y chromium, or run scripts/ci-browser.sh)`;
const OUT_DIR = path.resolve(__dirname, '..', '..', 'test-output', OUT);
const hasChromium = fs.existsSync(CHROMIUM);

describe(
  hasChromium
    ? `Temporal Web UI (chromium, ${ON_CLUSTER ? 'real Temporal server' : 'dev server'})`
    : `Temporal Web UI: fails, ${MISSING}`,
  () => {
    let server: { address: string; uiUrl?: string; stop(): Promise<void> };
    let clusterChild: ChildProcess | undefined;
    let connection: Connection;
    let native: NativeConnection;
    let stack: Stack;
    let receiver: Receiver;
    let context: BrowserContext;
    let userDataDir: string;
    const taskId = `webui-${crypto.randomBytes(4).toString('hex')}`;
    const otherTaskId = `${taskId}-other`;

    beforeAll(async () => {
      if (!hasChromium) throw new Error(MISSING);
      quietTemporal();
      const uiPort = await freePort();
      if (ON_CLUSTER) {
        // The Web UI server (ui-server, built by the cluster script) in front of a real Temporal
        // server, started in plain Node in a process of its own, as the test services are.
        clusterChild = spawn(
          process.execPath,
          [
            '-r',
            'ts-node/register/transpile-only',
            path.join(__dirname, '..', 'helpers', 'test-services.ts'),
            '--cluster-ui',
            String(uiPort),
          ],
          { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, TS_NODE_TRANSPILE_ONLY: 'true' } },
        );
        const child = clusterChild;
        const info = JSON.parse(
          await new Promise<string>((resolve, reject) => {
            readline.createInterface({ input: child.stdout! }).once('line', resolve);
            child.once('exit', (code) => reject(new Error(`cluster exited with ${code}`)));
          }),
        ) as { temporalAddress: string; uiUrl: string };
        server = {
          address: info.temporalAddress,
          uiUrl: info.uiUrl,
          stop: () =>
            new Promise<void>((resolve) => {
              if (child.exitCode !== null) return resolve();
              child.once('exit', () => resolve());
              child.stdin?.end();
              setTimeout(() => child.kill('SIGKILL'), 20_000).unref();
            }),
        };
      } else server = await startDevServer({ port: await freePort(), uiPort });
      connection = await Connection.connect({ address: server.address });
      native = await NativeConnection.connect({ address: server.address });
      receiver = await startReceiver({ script: () => ({ status: 200 }) });
      stack = await startStack(
        { client: new Client({ connection }), nativeConnection: native },
        `webui-${crypto.randomBytes(3).toString('hex')}`,
        { env: {} },
      );
      // The gRPC frontend answers before the UI server does.
      await eventually(
        () =>
          fetch(`${server.uiUrl}/`)
            .then((r) => r.status)
            .catch(() => 0),
        (s) => s === 200,
        30_000,
      );
      fs.mkdirSync(OUT_DIR, { recursive: true });
      userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'webui-chromium-'));
      context = await chromium.launchPersistentContext(userDataDir, {
        executablePath: CHROMIUM,
        headless: true,
        args: CHROMIUM_ARGS,
        viewport: { width: 1440, height: 900 },
      });
    });
    afterAll(async () => {
      await context?.close();
      if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
      await stack?.close();
      await receiver?.close();
      await native?.close();
      await connection?.close();
      await server?.stop();
    });

    it('finds the delivery workflow by TaskId and shows its summary', async () => {
      const receiverHost = new URL(receiver.url).host;
      await createConfig(stack, taskId, { id: 'c1', url: receiver.url });
      await createConfig(stack, otherTaskId, { id: 'c1', url: receiver.url });
      const ev = await writeEvent(stack, taskId, { task: { id: taskId } });
      const other = await writeEvent(stack, otherTaskId, { task: { id: otherTaskId } });
      const jobId = ev.deliveries[0]!.id;
      const workflowId = makeDeliveryWorkflowId(jobId);
      const otherWorkflowId = makeDeliveryWorkflowId(other.deliveries[0]!.id);
      for (const id of [jobId, other.deliveries[0]!.id])
        await eventually(
          () => jobRow(stack, id),
          (j) => j.status === 'delivered',
        );

      const page: Page = context.pages()[0] ?? (await context.newPage());
      page.setDefaultTimeout(20_000);

      // The list, filtered by our search attribute: this task's workflow, not the other task's.
      const query = encodeURIComponent(`TaskId="${taskId}"`);
      await page.goto(`${server.uiUrl}/namespaces/default/workflows?query=${query}`);
      const link = page.getByRole('link', { name: workflowId, exact: true });
      await link.waitFor();
      expect(await page.getByText(otherWorkflowId).count()).toBe(0);
      await page.screenshot({ path: path.join(OUT_DIR, 'workflows-list.png'), fullPage: true });

      // The workflow page: the timeline labels the attempt's activity with its summary.
      await link.click();
      await page.getByRole('heading', { name: workflowId }).waitFor();
      await page.getByText('attemptDelivery • attempt 1').first().waitFor();
      await page.screenshot({ path: path.join(OUT_DIR, 'workflow.png'), fullPage: true });

      // UI 2.54 shows the static summary (and the current details) under the "User Metadata" tab,
      // each rendered as markdown in its own iframe.
      await page.getByRole('tab', { name: 'User Metadata' }).click();
      const summary = page
        .frameLocator('#user-metadata-summary')
        .getByText(`push task ${taskId} → host ${receiverHost}`, { exact: true });
      await summary.waitFor();
      expect(await summary.isVisible()).toBe(true);
      await page
        .frameLocator('#user-metadata-current-details')
        .getByText('delivered (http_200) after 1 attempt(s)')
        .waitFor();
      await page.screenshot({ path: path.join(OUT_DIR, 'workflow-user-metadata.png'), fullPage: true });
    });

    it('a fast-lane attempt of the lean type (the default) is a Local Activity event with its summary', async () => {
      // A receiver that answered lately: the delivery's attempt runs in the fast lane, which the lean
      // type runs as a local activity, recorded as one marker event when it ends.
      await markTargetAnswered(stack.tdb.db, receiver.url);
      const ev = await writeEvent(stack, taskId, { task: { id: taskId } });
      const workflowId = makeDeliveryWorkflowId(ev.deliveries[0]!.id);
      // The run's end (the marker is recorded after the job row says delivered).
      expect(await deliveryResult(new Client({ connection }), ev.deliveries[0]!.id)).toMatchObject({
        status: 'delivered',
      });
      const page: Page = context.pages()[0] ?? (await context.newPage());
      page.setDefaultTimeout(20_000);
      await page.goto(`${server.uiUrl}/namespaces/default/workflows/${encodeURIComponent(workflowId)}`);
      await page.getByRole('heading', { name: workflowId }).waitFor();
      await page.getByRole('link', { name: 'deliveryWorkflowLean' }).waitFor();
      // The timeline labels the attempt with its activity type; the event history shows it as a Local
      // Activity with the attempt's summary ("attempt 1"; a retry's: "attempt 2 of 8").
      await page.getByText('attemptDelivery').first().waitFor();
      await page.screenshot({ path: path.join(OUT_DIR, 'workflow-lean.png'), fullPage: true });
      await page.getByRole('tab', { name: /Event History/ }).click();
      const row = page.getByRole('row').filter({ hasText: 'Local Activity' });
      await row.first().waitFor();
      expect(await row.count()).toBe(1);
      await row.getByText('attemptDelivery').waitFor();
      await row.getByText('attempt 1', { exact: true }).waitFor();
      await page.screenshot({ path: path.join(OUT_DIR, 'workflow-lean-history.png'), fullPage: true });
    });
  },
);
