/**
 * docker-compose.yml and the Dockerfile cannot be run on the build machine (no Docker engine), so
 * this file checks them against the service itself: the services the contract needs, the ports, every
 * variable given to api/inbox/worker against the settings schema, the search attributes, the command.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import {
  loadSettings,
  requireSettings,
  SETTING_NAMES,
  settingsSchema,
  type Settings,
} from '../../src/config';
import { SEARCH_ATTRIBUTES } from '../../src/workflows/search-attributes';
import { OTEL_SETTING_NAMES, tracingRequested } from '../../src/tracing';
import { GOTOOLCHAIN, TEMPORAL_SERVER_VERSION } from '../../scripts/cluster/cluster';

const ROOT = path.resolve(__dirname, '..', '..');
const COMPOSE_TEXT = fs.readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8');
const DOCKERFILE = fs.readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');

interface ComposeService {
  image?: string;
  build?: string | { context?: string; args?: Record<string, string> };
  command?: string | string[];
  entrypoint?: string | string[];
  environment?: Record<string, string | number | boolean | null> | string[];
  ports?: Array<string | number | { target: number; published?: string | number; host_ip?: string }>;
  depends_on?: string[] | Record<string, { condition?: string }>;
  healthcheck?: { test?: string | string[] };
}
interface Compose {
  services: Record<string, ComposeService>;
}

const compose = parse(COMPOSE_TEXT, { merge: true }) as Compose;
const services = compose.services;

/** Sample values for the variables the file requires with `${VAR:?...}`. */
const SAMPLES: Record<string, string> = {
  SEAL_KEYS: `k1:${Buffer.alloc(32, 7).toString('base64')}`,
  SEAL_ACTIVE_KEY: 'k1',
  PUBLIC_BASE_URL: 'https://push.example.com',
  A2A_PUSH_DB_PASSWORD: 'sample-password',
  TEMPORAL_DB_PASSWORD: 'sample-password',
};

/** Compose's interpolation: $$, $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}. */
function interpolate(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(
    /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (whole, name: string | undefined, op: string | undefined, arg: string | undefined, bare?: string) => {
      if (whole === '$$') return '$';
      const key = (name ?? bare) as string;
      const v = vars[key];
      const unset = op?.startsWith(':') ? v === undefined || v === '' : v === undefined;
      if (op === ':-' || op === '-') return unset ? (arg ?? '') : (v as string);
      if (op === ':?' || op === '?') {
        if (unset) throw new Error(`required variable ${key} is missing: ${arg}`);
        return v as string;
      }
      return v ?? '';
    },
  );
}

const envOf = (svc: ComposeService): Record<string, string> => {
  const env = svc.environment ?? {};
  if (Array.isArray(env))
    return Object.fromEntries(
      env.map((e) => {
        const i = e.indexOf('=');
        return i < 0 ? [e, ''] : [e.slice(0, i), e.slice(i + 1)];
      }),
    );
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v === null ? '' : String(v)]));
};

const argv = (v: string | string[] | undefined): string[] =>
  v === undefined ? [] : Array.isArray(v) ? v.map(String) : v.split(/\s+/).filter(Boolean);

const scriptOf = (svc: ComposeService) => [...argv(svc.entrypoint), ...argv(svc.command)].join('\n');

/** Container ports a service publishes. */
function containerPorts(svc: ComposeService): number[] {
  return (svc.ports ?? []).map((p) => {
    if (typeof p === 'object') return Number(p.target);
    const parts = String(p).split('/')[0]!.split(':');
    return Number(parts.at(-1));
  });
}

const dependsOn = (svc: ComposeService): Record<string, string | undefined> =>
  Array.isArray(svc.depends_on)
    ? Object.fromEntries(svc.depends_on.map((d) => [d, undefined]))
    : Object.fromEntries(Object.entries(svc.depends_on ?? {}).map(([k, v]) => [k, v?.condition]));

const PROCESSES = ['api', 'inbox', 'worker'] as const;
type Process = (typeof PROCESSES)[number];
const PORT_SETTING: Record<Process, 'API_PORT' | 'INBOX_PORT' | 'WORKER_PORT'> = {
  api: 'API_PORT',
  inbox: 'INBOX_PORT',
  worker: 'WORKER_PORT',
};
/** What each per-process start requires beyond the schema (src/runtime.ts, services.ts, worker.ts). */
const REQUIRED: Record<Process, Array<keyof Settings>> = {
  api: ['DATABASE_URL', 'TEMPORAL_ADDRESS', 'SEAL_KEYS', 'SEAL_ACTIVE_KEY', 'PUBLIC_BASE_URL'],
  inbox: ['DATABASE_URL', 'TEMPORAL_ADDRESS', 'SEAL_KEYS', 'SEAL_ACTIVE_KEY'],
  worker: ['DATABASE_URL', 'TEMPORAL_ADDRESS', 'SEAL_KEYS', 'SEAL_ACTIVE_KEY', 'PUBLIC_BASE_URL'],
};

const processEnv = (name: Process, vars: Record<string, string | undefined> = SAMPLES) =>
  Object.fromEntries(Object.entries(envOf(services[name]!)).map(([k, v]) => [k, interpolate(v, vars)]));

/** A service's image without its tag. */
const imageName = (svc: ComposeService | undefined) =>
  interpolate(svc?.image ?? '', {}).replace(/:[^/:]*$/, '');

const buildContext = (svc: ComposeService | undefined) => {
  const b = svc?.build as string | { context?: string } | undefined;
  return typeof b === 'string' ? b : b?.context;
};

const serviceWithImage = (image: string) =>
  Object.entries(services).filter(([, s]) => imageName(s) === image || imageName(s) === `docker.io/${image}`);

describe('docker-compose.yml', () => {
  it('says at the top that it is untested here and validated by this test', () => {
    const header = COMPOSE_TEXT.split('\n').slice(0, 10).join('\n');
    expect(header).toMatch(/untested/i);
    expect(header).toContain('test/unit/compose.test.ts');
  });

  it('has every service the contract needs', () => {
    for (const name of ['temporal', 'temporal-ui', 'postgres', 'temporal-admin-tools', ...PROCESSES])
      expect(Object.keys(services)).toContain(name);
    // Temporal is built from deploy/temporal (see the describe block below), not pulled.
    expect(buildContext(services.temporal)).toBe('deploy/temporal');
    expect(imageName(services['temporal-ui'])).toBe('temporalio/ui');
    expect(services['temporal-ui']!.ports).toContainEqual('8233:8080');
    expect(imageName(services.postgres)).toBe('postgres');
    // Temporal has a Postgres of its own, not the service's.
    expect(envOf(services.temporal!).POSTGRES_SEEDS).not.toBe('postgres');
    expect(serviceWithImage('postgres').length).toBeGreaterThanOrEqual(2);
    for (const p of PROCESSES) expect(services[p]!.build).toBeDefined();
  });

  it('names only services that exist in depends_on', () => {
    for (const [name, svc] of Object.entries(services))
      for (const dep of Object.keys(dependsOn(svc)))
        expect([name, dep, Object.keys(services).includes(dep)]).toEqual([name, dep, true]);
  });

  it('starts api, inbox and worker after their dependencies are ready', () => {
    expect(dependsOn(services.api!)).toMatchObject({
      postgres: 'service_healthy',
      'temporal-admin-tools': 'service_completed_successfully',
    });
    // Only the api migrates the database: the others wait for it.
    for (const p of ['inbox', 'worker'] as const)
      expect(dependsOn(services[p]!)).toMatchObject({
        api: 'service_healthy',
        'temporal-admin-tools': 'service_completed_successfully',
      });
    expect(dependsOn(services['temporal-admin-tools']!)).toMatchObject({ temporal: 'service_healthy' });
  });

  it.each(PROCESSES)('%s publishes its port and checks /healthz on it', (p) => {
    const settings = loadSettings(processEnv(p));
    const port = settings[PORT_SETTING[p]];
    expect(containerPorts(services[p]!)).toEqual([port]);
    const test = argv(services[p]!.healthcheck?.test).join(' ');
    expect(test).toContain(`http://127.0.0.1:${port}/healthz`);
  });

  it.each(PROCESSES)('%s gets only names of the settings schema', (p) => {
    const unknown = Object.keys(envOf(services[p]!)).filter((k) => !(SETTING_NAMES as string[]).includes(k));
    expect(unknown).toEqual([]);
  });

  it.each(PROCESSES)('%s: its environment, with sample values, passes the settings and its start', (p) => {
    const env = processEnv(p);
    const settings = loadSettings(env);
    expect(() => requireSettings(settings, REQUIRED[p])).not.toThrow();
    // The api service runs a worker too.
    if (p === 'api') expect(() => requireSettings(settings, REQUIRED.worker)).not.toThrow();
    expect(settings.SEAL_KEYS).toBe(SAMPLES.SEAL_KEYS);
    expect(settings.SEAL_ACTIVE_KEY).toBe(SAMPLES.SEAL_ACTIVE_KEY);
    expect(settings.PUBLIC_BASE_URL).toBe(SAMPLES.PUBLIC_BASE_URL);
    // Wired to the services of this file.
    const db = new URL(settings.DATABASE_URL!);
    expect(db.hostname).toBe('postgres');
    expect(db.pathname).toBe(`/${envOf(services.postgres!).POSTGRES_DB}`);
    expect(db.username).toBe(envOf(services.postgres!).POSTGRES_USER);
    expect(settings.TEMPORAL_ADDRESS).toBe('temporal:7233');
  });

  it.each(PROCESSES)('%s: a required variable left unset stops `docker compose up`', (p) => {
    for (const name of ['SEAL_KEYS', 'SEAL_ACTIVE_KEY', 'PUBLIC_BASE_URL']) {
      const vars: Record<string, string | undefined> = { ...SAMPLES, [name]: undefined };
      expect(() => processEnv(p, vars)).toThrow(new RegExp(`required variable ${name}`));
    }
  });

  it.each(PROCESSES)('%s: the defaults written in the file are the schema defaults', (p) => {
    const raw = envOf(services[p]!);
    const defaults = settingsSchema.parse({});
    // OTEL_* defaults wire the processes to this file's trace backend (the next test), where the
    // schema's default is no tracing at all.
    const withDefault = Object.entries(raw).filter(
      ([k, v]) => !k.startsWith('OTEL_') && /^\$\{[A-Z0-9_]+:?-[^}]*\}$/.test(v),
    );
    expect(withDefault.length).toBeGreaterThan(0);
    const settings = loadSettings(processEnv(p));
    for (const [k] of withDefault)
      expect([k, settings[k as keyof Settings]]).toEqual([k, defaults[k as keyof Settings]]);
  });

  it.each(PROCESSES)(
    '%s exports traces to the jaeger service, under its own service name, with only the OTEL_* names src/tracing.ts knows',
    (p) => {
      const otel = Object.keys(envOf(services[p]!)).filter((k) => k.startsWith('OTEL_'));
      expect(otel.filter((k) => !(OTEL_SETTING_NAMES as readonly string[]).includes(k))).toEqual([]);
      const env = processEnv(p);
      expect(tracingRequested(env)).toBe(true);
      const s = loadSettings(env);
      const endpoint = new URL(s.OTEL_EXPORTER_OTLP_ENDPOINT!);
      expect([endpoint.hostname, endpoint.port]).toEqual(['jaeger', '4318']);
      expect(s.OTEL_EXPORTER_OTLP_PROTOCOL).toBe('http/protobuf');
      expect(s.OTEL_SERVICE_NAME).toBe(`a2a-push-${p}`);
      // Turned off from the environment of `docker compose`.
      expect(tracingRequested(processEnv(p, { ...SAMPLES, OTEL_SDK_DISABLED: 'true' }))).toBe(false);
    },
  );

  it('runs a Jaeger that receives OTLP over HTTP and serves its UI', () => {
    expect(imageName(services.jaeger)).toBe('jaegertracing/jaeger');
    expect(services.jaeger!.ports).toContainEqual('16686:16686');
  });

  it('passes every other setting through from the environment of `docker compose`', () => {
    const env = processEnv('worker', { ...SAMPLES, RETENTION: '7d', LOG_LEVEL: 'warn', TASK_QUEUE: 'q2' });
    const s = loadSettings(env);
    expect([s.RETENTION, s.LOG_LEVEL, s.TASK_QUEUE]).toEqual([7 * 86_400_000, 'warn', 'q2']);
  });

  it('registers all five search attributes as Keyword', () => {
    const script = interpolate(scriptOf(services['temporal-admin-tools']!), {});
    expect(script).toContain('temporal operator search-attribute create');
    const registered = new Set<string>();
    for (const m of script.matchAll(/--name\s+"?([A-Za-z]+)"?\s+--type\s+Keyword/g)) registered.add(m[1]!);
    // `for sa in A B C; do ... --name "$sa" --type Keyword`
    for (const m of script.matchAll(/for\s+(\w+)\s+in\s+([^;\n]+);\s*do([\s\S]*?)\bdone\b/g))
      if (new RegExp(`--name\\s+"?\\$\\{?${m[1]}\\}?"?\\s+--type\\s+Keyword`).test(m[3]!))
        for (const n of m[2]!.trim().split(/\s+/)) registered.add(n);
    expect([...registered].sort()).toEqual(SEARCH_ATTRIBUTES.map((a) => a.name).sort());
    expect(SEARCH_ATTRIBUTES.every((a) => a.type === 'KEYWORD')).toBe(true);
    expect(script).toMatch(/namespace create/);
  });

  it('runs `node dist/src/main.js api,worker|inbox|worker` from the image (the api beside a worker)', () => {
    const entrypoint = dockerfileArray('ENTRYPOINT');
    const cmd = dockerfileArray('CMD');
    for (const p of PROCESSES) {
      const svc = services[p]!;
      const full = [
        ...(svc.entrypoint ? argv(svc.entrypoint) : entrypoint),
        ...(svc.command ? argv(svc.command) : cmd),
      ];
      expect(full).toEqual(['node', 'dist/src/main.js', p === 'api' ? 'api,worker' : p]);
    }
  });
});

describe('the Temporal server of docker-compose.yml is the one npm run cluster tests', () => {
  const DEPLOY = path.join(ROOT, 'deploy', 'temporal');
  const TEMPORAL_DOCKERFILE = fs.readFileSync(path.join(DEPLOY, 'Dockerfile'), 'utf8');
  const TEMPLATE = fs.readFileSync(path.join(DEPLOY, 'config.template.yaml'), 'utf8');
  const temporalServices = ['temporal-schema', 'temporal'] as const;
  /** The variables the config template reads (`env "NAME"`). */
  const templateVars = new Set([...TEMPLATE.matchAll(/env "([A-Z0-9_]+)"/g)].map((m) => m[1]!));

  it('builds the server and its sql tool from the Go module version the cluster script builds', () => {
    for (const name of temporalServices) {
      expect(buildContext(services[name])).toBe('deploy/temporal');
      const args = (services[name]!.build as { args?: Record<string, string> }).args ?? {};
      expect(args.TEMPORAL_SERVER_VERSION).toBe(TEMPORAL_SERVER_VERSION);
    }
    expect(TEMPORAL_DOCKERFILE).toContain(`ARG TEMPORAL_SERVER_VERSION=${TEMPORAL_SERVER_VERSION}`);
    expect(TEMPORAL_DOCKERFILE).toContain(`GOTOOLCHAIN=${GOTOOLCHAIN}`);
    expect(TEMPORAL_DOCKERFILE).toContain(
      'go install go.temporal.io/server/cmd/server@${TEMPORAL_SERVER_VERSION}',
    );
    expect(TEMPORAL_DOCKERFILE).toContain(
      'go install go.temporal.io/server/cmd/tools/sql@${TEMPORAL_SERVER_VERSION}',
    );
    expect(TEMPORAL_DOCKERFILE).toContain('schema/postgresql/v12');
    expect(TEMPORAL_DOCKERFILE).toMatch(
      /^COPY config\.template\.yaml dynamicconfig\.yaml setup-schema\.sh start-server\.sh \/etc\/temporal\/$/m,
    );
  });

  it('makes the schemas with the script the cluster script runs, and starts from the same template', () => {
    expect(scriptOf(services['temporal-schema']!)).toBe('sh\n/etc/temporal/setup-schema.sh');
    const start = fs.readFileSync(path.join(DEPLOY, 'start-server.sh'), 'utf8');
    expect(start).toContain('--config-file /etc/temporal/config.template.yaml');
    expect(TEMPORAL_DOCKERFILE).toMatch(/^ENTRYPOINT \["sh", "\/etc\/temporal\/start-server\.sh"\]$/m);
    expect(TEMPLATE.split('\n')[0]).toBe('# enable-template');
    expect(TEMPLATE).toMatch(/pluginName: postgres12/);
  });

  it('gives the server only variables the template reads, and the ones it needs', () => {
    for (const name of temporalServices) {
      const env = envOf(services[name]!);
      const unknown = Object.keys(env).filter(
        (k) => !templateVars.has(k) && !['SQL_TOOL', 'SCHEMA_DIR', 'DBNAME', 'VISIBILITY_DBNAME'].includes(k),
      );
      expect([name, unknown]).toEqual([name, []]);
      for (const k of ['POSTGRES_SEEDS', 'DB_PORT', 'POSTGRES_USER', 'POSTGRES_PWD'])
        expect([name, k, env[k] !== undefined]).toEqual([name, k, true]);
      // Its own Postgres, not the service's.
      expect(env.POSTGRES_SEEDS).toBe('temporal-postgres');
    }
    expect(interpolate(envOf(services.temporal!).NUM_HISTORY_SHARDS!, {})).toBe('4');
    expect(envOf(services.temporal!).BIND_ON_IP).toBe('0.0.0.0');
  });
});

function dockerfileArray(instruction: 'CMD' | 'ENTRYPOINT'): string[] {
  const lines = DOCKERFILE.split('\n').filter((l) => l.startsWith(`${instruction} `));
  const last = lines.at(-1);
  if (!last) return [];
  return JSON.parse(last.slice(instruction.length + 1)) as string[];
}

describe('Dockerfile', () => {
  const stages = DOCKERFILE.split('\n').filter((l) => /^FROM\s/i.test(l));

  it('builds on node:20-bookworm-slim in stages', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    for (const s of stages) expect(s).toMatch(/^FROM node:20-bookworm-slim\b/);
    expect(DOCKERFILE).toMatch(/RUN npm ci\b/);
    expect(DOCKERFILE).toMatch(/RUN npm run build\b/);
    expect(DOCKERFILE).toMatch(/npm ci --omit=dev/);
  });

  it('names the file tsc writes for src/main.ts', () => {
    const tsconfig = JSON.parse(fs.readFileSync(path.join(ROOT, 'tsconfig.json'), 'utf8')) as {
      compilerOptions: { rootDir: string; outDir: string };
    };
    const { rootDir, outDir } = tsconfig.compilerOptions;
    const main = path.posix.join(outDir, path.posix.relative(rootDir, 'src/main.ts')).replace(/\.ts$/, '.js');
    expect(main).toBe('dist/src/main.js');
    expect([...dockerfileArray('ENTRYPOINT'), ...dockerfileArray('CMD')]).toContain(main);
  });

  it('puts the migrations and package.json where the compiled code reads them', () => {
    // src/db/pool.ts: path.join(__dirname, 'migrations'); src/version.ts: require('../package.json').
    expect(DOCKERFILE).toMatch(/^COPY\s+src\/db\/migrations\s+\.\/dist\/src\/db\/migrations\/?\s*$/m);
    expect(DOCKERFILE).toMatch(/^COPY\s+package\.json\s+\.\/dist\/package\.json\s*$/m);
    expect(fs.readdirSync(path.join(ROOT, 'src', 'db', 'migrations')).some((f) => f.endsWith('.sql'))).toBe(
      true,
    );
  });

  it('runs as a non-root user', () => {
    const users = DOCKERFILE.split('\n').filter((l) => /^USER\s/.test(l));
    expect(users.at(-1)).toMatch(/^USER\s+(?!root\b|0\b)\S+/);
  });

  it('keeps the build context small (.dockerignore)', () => {
    const ignored = fs
      .readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim());
    for (const p of ['node_modules', 'dist', '.data', '.tools', '.git', '.env']) expect(ignored).toContain(p);
    expect(ignored).not.toContain('src');
  });
});
