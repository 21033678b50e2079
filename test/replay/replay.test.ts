/**
 * Saved histories (test/replay/histories, made by `npm run record:histories` on a real dev server, one
 * per delivery and registration outcome) replayed with the production workflow code and interceptors:
 * a change that makes the workflows take another path through the same history fails here.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from '@temporalio/worker';
import { quietTemporal } from '../helpers/harness';
import {
  defaultWorkflowSource,
  WORKFLOW_INTERCEPTOR_MODULES,
  workflowTracing,
} from '../../src/worker/worker';
import { shutdownTracing, startTracing } from '../../src/tracing';
import { decodedPayloads, historyFromObject } from './history-payloads';

jest.setTimeout(120_000);

const DIR = path.join(__dirname, 'histories');
const files = fs
  .readdirSync(DIR)
  .filter((f) => f.endsWith('.json'))
  .sort();
const load = (f: string) => JSON.parse(fs.readFileSync(path.join(DIR, f), 'utf8')) as Record<string, unknown>;
const eventsOf = (f: string) => (load(f) as { events: Array<Record<string, unknown>> }).events;
/** For each activity a history schedules: whether on the slow lane's queue. */
const slowLaneFlags = (events: Array<Record<string, unknown>>) =>
  events.flatMap((e) => {
    const a = e.activityTaskScheduledEventAttributes as { taskQueue: { name: string } } | undefined;
    return a ? [a.taskQueue.name.endsWith('-slow')] : [];
  });

it('holds one history per outcome of both workflows', () => {
  expect(files.map((f) => f.replace(/\.json$/, ''))).toEqual(
    expect.arrayContaining([
      'delivery-delivered',
      'delivery-delivered-after-retry',
      'delivery-exhausted',
      'delivery-expired',
      'delivery-auth-failed',
      'delivery-stopped',
      'delivery-failed',
      'delivery-redirect',
      'delivery-cancelled',
      'delivery-superseded',
      'delivery-order-wait',
      // Written behind an unfinished job of its config: started knowing so, no attempt call until woken.
      'delivery-order-behind',
      'delivery-first-contact',
      // The same after the dispatcher's lane hint: started in the slow lane, no fast-lane call first.
      'delivery-first-contact-hinted',
      // The lean type (DELIVERY_WORKFLOW=lean, issue 21): the fast-lane attempt a local activity.
      'delivery-lean-delivered',
      'delivery-lean-delivered-after-retry',
      'delivery-lean-order-wait',
      'delivery-lean-order-behind',
      'delivery-lean-slot-wait',
      'delivery-lean-slow-lane',
      // A first contact: the fast lane's call answered `slow` untried, the attempt ran in the slow lane.
      'delivery-lean-first-contact',
      'delivery-lean-first-contact-hinted',
      'registration-separate-resolved',
      'registration-embedded-resolved',
      'registration-failed-not-found',
      'registration-deleted',
      'registration-polled-no-push',
    ]),
  );
});

it("the lean type's histories are of its own workflow type, a first-try delivery in 7 events", () => {
  const typeOf = (f: string) =>
    (
      load(f) as {
        events: Array<{ workflowExecutionStartedEventAttributes?: { workflowType: { name: string } } }>;
      }
    ).events[0]!.workflowExecutionStartedEventAttributes!.workflowType.name;
  for (const f of files.filter((x) => x.startsWith('delivery-')))
    expect({ f, type: typeOf(f) }).toEqual({
      f,
      type: f.startsWith('delivery-lean-') ? 'deliveryWorkflowLean' : 'deliveryWorkflow',
    });
  expect((load('delivery-lean-delivered.json') as { events: unknown[] }).events).toHaveLength(7);
  // A first contact (lean): the untried local call's marker, then the attempt in the slow lane.
  const first = eventsOf('delivery-lean-first-contact.json');
  expect(first.filter((e) => e.markerRecordedEventAttributes)).toHaveLength(1);
  expect(slowLaneFlags(first)).toEqual([true]);
});

it('a hinted first contact (both types) starts with `lane: "slow"` and makes no fast-lane call: one activity, in the slow lane', () => {
  for (const f of ['delivery-first-contact-hinted.json', 'delivery-lean-first-contact-hinted.json']) {
    const events = eventsOf(f);
    const started = events[0]!.workflowExecutionStartedEventAttributes as {
      input: { payloads: Array<{ data: string }> };
    };
    expect(JSON.parse(Buffer.from(started.input.payloads[0]!.data, 'base64').toString())).toMatchObject({
      lane: 'slow',
    });
    expect(events.filter((e) => e.markerRecordedEventAttributes)).toHaveLength(0);
    expect(slowLaneFlags(events)).toEqual([true]);
  }
});

it('no saved history carries a credential, an Authorization header or an event body', () => {
  for (const f of files) {
    const h = load(f);
    const text = [JSON.stringify(h), ...decodedPayloads(h)].join('\n');
    for (const bad of [
      'credentials',
      'Bearer ',
      'authorization',
      'streamResponse',
      'statusUpdate',
      'push-credential-',
      'agent-token-',
    ])
      expect({ file: f, holds: text.includes(bad) ? bad : undefined }).toEqual({ file: f, holds: undefined });
  }
});

it('every saved history replays without a nondeterminism error', async () => {
  quietTemporal();
  const histories = files.map((f) => ({
    workflowId: f.replace(/\.json$/, ''),
    history: historyFromObject(load(f)),
  }));
  const results: Array<{ workflowId: string; error?: string }> = [];
  for await (const r of Worker.runReplayHistories(
    {
      ...defaultWorkflowSource(),
      interceptors: { workflowModules: WORKFLOW_INTERCEPTOR_MODULES },
    },
    histories,
  ))
    results.push({
      workflowId: r.workflowId,
      ...(r.error ? { error: `${r.error.name}: ${r.error.message}` } : {}),
    });
  expect(results).toEqual(histories.map((h) => ({ workflowId: h.workflowId })));
});

it("every saved history also replays with Temporal's OpenTelemetry workflow interceptors (tracing turned on later)", async () => {
  quietTemporal();
  // Replay calls no sink, so nothing is exported to this address where nothing listens.
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:9';
  expect(startTracing('a2a-push-replay')).toBe(true);
  try {
    const wf = workflowTracing();
    expect(wf.workflowModules.some((m) => m.includes('interceptors-opentelemetry'))).toBe(true);
    const histories = files.map((f) => ({
      workflowId: f.replace(/\.json$/, ''),
      history: historyFromObject(load(f)),
    }));
    const results: Array<{ workflowId: string; error?: string }> = [];
    for await (const r of Worker.runReplayHistories(
      { ...defaultWorkflowSource(), interceptors: { workflowModules: wf.workflowModules }, sinks: wf.sinks },
      histories,
    ))
      results.push({
        workflowId: r.workflowId,
        ...(r.error ? { error: `${r.error.name}: ${r.error.message}` } : {}),
      });
    expect(results).toEqual(histories.map((h) => ({ workflowId: h.workflowId })));
  } finally {
    await shutdownTracing();
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  }
});
