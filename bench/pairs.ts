/**
 * Side by side: two commits' benchmarks as interleaved pairs on one machine in one sitting.
 *
 *   npm run bench:pairs -- --refs=b562803,HEAD [--rounds=3] [--only=delivery,idle-latency,order,isolation]
 *                          [--quick] [--npm-test]
 *
 * Each ref gets a detached worktree beside the system's temp dir (`a2a-push-pairs/<sha>`), its own
 * `npm ci` (the Temporal binaries of this checkout's .tools are linked in when it has them), then the
 * rounds run old, new, old, new, … each `npm run bench -- --only=…` in its own tree, and `--npm-test`
 * times each tree's `npm test` once per round. Every run's results JSON is copied to
 * `bench/results/pairs-<date>/`, and one table prints the medians per ref with the checks:
 * benchmark 1 per_config ÷ floor and benchmark 10 per_config ÷ none not lower by more than 5 %,
 * benchmark 7's idle p50 not higher by more than 10 %, benchmark 10 and benchmark 1 per_config 0 out of
 * order, every benchmark 9 target met in every run, `npm test` no longer.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

interface Figure {
  label: string;
  value: number;
  baseline?: { label: string; value: number };
  ratio?: number;
  target?: string;
  met?: boolean;
}
interface Results {
  results: Array<{ name: string; figures: Figure[] }>;
}

const args = new Map(
  process.argv.slice(2).map((a) => {
    const [k, v] = a.replace(/^--/, '').split('=');
    return [k!, v ?? 'true'] as const;
  }),
);
const repo = path.resolve(__dirname, '..');
const refs = (args.get('refs') ?? 'b562803,HEAD').split(',');
const rounds = Number(args.get('rounds') ?? 3);
const only = args.get('only') ?? 'delivery,idle-latency,order,isolation';
const quick = args.has('quick');
const npmTest = args.has('npm-test');
const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19);
const out = path.join(repo, 'bench', 'results', `pairs-${stamp}`);

const git = (...a: string[]) => execFileSync('git', ['-C', repo, ...a], { encoding: 'utf8' }).trim();

/** A worktree of `ref`, installed. */
function treeOf(ref: string): { ref: string; sha: string; dir: string } {
  const sha = git('rev-parse', `${ref}^{commit}`);
  const dir = path.join(os.tmpdir(), 'a2a-push-pairs', sha.slice(0, 12));
  if (!fs.existsSync(path.join(dir, 'package.json'))) {
    fs.mkdirSync(path.dirname(dir), { recursive: true });
    git('worktree', 'add', '--detach', '--force', dir, sha);
  }
  const tools = path.join(repo, '.tools');
  if (fs.existsSync(tools) && !fs.existsSync(path.join(dir, '.tools')))
    fs.symlinkSync(tools, path.join(dir, '.tools'));
  if (!fs.existsSync(path.join(dir, 'node_modules'))) run(dir, 'npm', ['ci', '--no-audit', '--no-fund']);
  return { ref, sha, dir };
}

function run(cwd: string, cmd: string, a: string[]): number {
  const t0 = Date.now();
  const r = spawnSync(cmd, a, { cwd, stdio: 'inherit', env: { ...process.env, FORCE_COLOR: '0' } });
  if (r.status !== 0) throw new Error(`${cmd} ${a.join(' ')} in ${cwd} exited ${r.status}`);
  return (Date.now() - t0) / 1000;
}

/** The newest results JSON a bench run in `dir` wrote after `since`. */
function newestResults(dir: string, since: number): string {
  const d = path.join(dir, 'bench', 'results');
  const files = fs
    .readdirSync(d)
    .filter((f) => f.endsWith('.json'))
    .map((f) => path.join(d, f))
    .filter((f) => fs.statSync(f).mtimeMs >= since);
  files.sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
  if (!files[0]) throw new Error(`no results JSON in ${d}`);
  return files[0];
}

interface Row {
  floorRatio?: number;
  perConfig?: number;
  outOfOrder1?: number;
  idleP50?: number;
  orderRatio?: number;
  outOfOrder10?: number;
  isolationMet?: boolean;
  isolationMissed?: string[];
  isolationD?: number;
  npmTestS?: number;
}

function rowOf(r: Results): Row {
  const bench = (name: string) => r.results.find((x) => x.name === name)?.figures ?? [];
  const fig = (figs: Figure[], label: string, baseline?: RegExp) =>
    figs.find((f) => f.label === label && (!baseline || baseline.test(f.baseline?.label ?? '')));
  const row: Row = {};
  const b1 = bench('delivery');
  if (b1.length > 0) {
    row.floorRatio = fig(b1, 'ours (per_config) deliveries/s', /^\(d\) floor/)?.ratio;
    row.perConfig = fig(b1, 'ours (per_config) deliveries/s')?.value;
    row.outOfOrder1 = fig(b1, 'ours (per_config) arrivals out of order')?.value;
  }
  const b7 = bench('idle-latency');
  if (b7.length > 0) row.idleP50 = fig(b7, 'ours event → POST p50')?.value;
  const b10 = bench('order');
  if (b10.length > 0) {
    row.orderRatio = fig(b10, 'per_config deliveries/s')?.ratio;
    row.outOfOrder10 = fig(b10, 'per_config arrivals out of order')?.value;
  }
  const b9 = bench('isolation');
  if (b9.length > 0) {
    const judged = b9.filter((f) => f.met !== undefined && f.met !== null);
    row.isolationMet = judged.every((f) => f.met);
    row.isolationMissed = judged.filter((f) => !f.met).map((f) => f.label);
    row.isolationD = fig(b9, "(d) tenant B p50 during A's burst, fairness on")?.ratio;
  }
  return row;
}

const median = (xs: Array<number | undefined>): number | undefined => {
  const v = xs.filter((x): x is number => typeof x === 'number').sort((a, b) => a - b);
  if (v.length === 0) return undefined;
  const m = Math.floor(v.length / 2);
  return v.length % 2 ? v[m] : (v[m - 1]! + v[m]!) / 2;
};
const fmt = (x: number | undefined, d = 2) => (x === undefined ? '—' : x.toFixed(d));

function main(): void {
  const trees = refs.map(treeOf);
  fs.mkdirSync(out, { recursive: true });
  const rows = new Map<string, Row[]>(trees.map((t) => [t.sha, []]));
  for (let round = 1; round <= rounds; round++) {
    for (const t of trees) {
      process.stdout.write(`\n=== round ${round}: ${t.ref} (${t.sha.slice(0, 9)}) ===\n`);
      const since = Date.now();
      run(t.dir, 'npm', ['run', 'bench', '--', `--only=${only}`, ...(quick ? ['--quick'] : [])]);
      const file = newestResults(t.dir, since);
      fs.copyFileSync(file, path.join(out, `${round}-${t.sha.slice(0, 9)}-${path.basename(file)}`));
      const row = rowOf(JSON.parse(fs.readFileSync(file, 'utf8')) as Results);
      if (npmTest) row.npmTestS = run(t.dir, 'npm', ['test']);
      rows.get(t.sha)!.push(row);
    }
  }
  const [old, neu] = trees;
  const lines: string[] = [];
  const col = (t: (typeof trees)[number], f: (r: Row) => number | undefined, d = 2) =>
    rows
      .get(t.sha)!
      .map((r) => fmt(f(r), d))
      .join(', ') + ` (median ${fmt(median(rows.get(t.sha)!.map(f)), d)})`;
  const fields: Array<[string, (r: Row) => number | undefined, number]> = [
    ['1. per_config deliveries/s', (r) => r.perConfig, 1],
    ['1. per_config ÷ floor', (r) => r.floorRatio, 2],
    ['1. per_config arrivals out of order', (r) => r.outOfOrder1, 0],
    ['7. idle event → POST p50 (ms)', (r) => r.idleP50, 0],
    ['10. per_config ÷ none', (r) => r.orderRatio, 2],
    ['10. per_config arrivals out of order', (r) => r.outOfOrder10, 0],
    ['9 (d). B p50 ÷ idle, fairness on', (r) => r.isolationD, 2],
    ['npm test (s)', (r) => r.npmTestS, 0],
  ];
  lines.push(`| figure | ${old!.ref} (${old!.sha.slice(0, 9)}) | ${neu!.ref} (${neu!.sha.slice(0, 9)}) |`);
  lines.push('|---|---|---|');
  for (const [label, f, d] of fields)
    if (trees.some((t) => rows.get(t.sha)!.some((r) => f(r) !== undefined)))
      lines.push(`| ${label} | ${col(old!, f, d)} | ${col(neu!, f, d)} |`);
  const nine = (t: (typeof trees)[number]) =>
    rows.get(t.sha)!.some((r) => r.isolationMet !== undefined)
      ? rows
          .get(t.sha)!
          .map((r) => (r.isolationMet ? 'met' : `MISSED: ${r.isolationMissed!.join('; ')}`))
          .join(', ')
      : undefined;
  if (nine(old!) ?? nine(neu!))
    lines.push(`| 9 (a)-(d) targets | ${nine(old!) ?? '—'} | ${nine(neu!) ?? '—'} |`);

  const m = (t: (typeof trees)[number], f: (r: Row) => number | undefined) => median(rows.get(t.sha)!.map(f));
  const checks: Array<[string, boolean | undefined]> = [];
  const cmp = (label: string, f: (r: Row) => number | undefined, ok: (o: number, n: number) => boolean) => {
    const o = m(old!, f);
    const n = m(neu!, f);
    checks.push([label, o === undefined || n === undefined ? undefined : ok(o, n)]);
  };
  cmp(
    'benchmark 1 per_config ÷ floor not lower by more than 5 %',
    (r) => r.floorRatio,
    (o, n) => n >= o * 0.95,
  );
  cmp(
    'benchmark 10 per_config ÷ none not lower by more than 5 %',
    (r) => r.orderRatio,
    (o, n) => n >= o * 0.95,
  );
  cmp(
    'benchmark 7 idle p50 not higher by more than 10 %',
    (r) => r.idleP50,
    (o, n) => n <= o * 1.1,
  );
  cmp(
    'npm test no longer',
    (r) => r.npmTestS,
    (o, n) => n <= o,
  );
  const zero = rows.get(neu!.sha)!.every((r) => (r.outOfOrder10 ?? 0) === 0 && (r.outOfOrder1 ?? 0) === 0);
  checks.push(['0 out of order (benchmarks 1 and 10, per_config)', zero]);
  const isoNew = rows.get(neu!.sha)!.filter((r) => r.isolationMet !== undefined);
  checks.push([
    'benchmark 9 (a)-(d) targets met in every run',
    isoNew.length ? isoNew.every((r) => r.isolationMet) : undefined,
  ]);
  lines.push('');
  for (const [label, ok] of checks)
    lines.push(`- ${label}: ${ok === undefined ? 'not measured' : ok ? 'yes' : 'NO'}`);
  const text = lines.join('\n');
  fs.writeFileSync(path.join(out, 'table.md'), `${text}\n`);
  process.stdout.write(`\n${text}\n\n(${path.relative(repo, out)})\n`);
}

main();
