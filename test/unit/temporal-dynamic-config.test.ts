/**
 * Every Temporal server the project starts or configures runs with tenant fairness on: the dev
 * server's command line (npm start, the tests, the benchmarks) and the real servers' dynamic config
 * file (npm run cluster, npm run test:cluster, docker-compose.yml) say the same.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { DEV_SERVER_DYNAMIC_CONFIG, devServerDynamicConfig } from '../../src/embedded/temporal';

const fileConfig = parse(
  fs.readFileSync(path.join(__dirname, '..', '..', 'deploy', 'temporal', 'dynamicconfig.yaml'), 'utf8'),
) as Record<string, Array<{ value: unknown; constraints: unknown }>>;

const devConfig = Object.fromEntries(
  DEV_SERVER_DYNAMIC_CONFIG.map((dc) => [
    dc.slice(0, dc.indexOf('=')),
    JSON.parse(dc.slice(dc.indexOf('=') + 1)),
  ]),
);

describe('Temporal dynamic config', () => {
  it('turns fairness on in the dev server and the real servers alike', () => {
    expect(devConfig['matching.enableFairness']).toBe(true);
    expect(fileConfig['matching.enableFairness']).toEqual([{ value: true, constraints: {} }]);
  });

  it("gives every dev-server setting the real servers' value (unconstrained)", () => {
    for (const [key, value] of Object.entries(devConfig))
      expect([key, fileConfig[key]]).toEqual([key, [{ value, constraints: {} }]]);
  });

  it("lets a caller's entry replace a default of the same key, and keeps the others", () => {
    const args = devServerDynamicConfig([
      'matching.enableFairness=false',
      'limit.historyCount.suggestContinueAsNew=40',
    ]);
    expect(args).toContain('matching.enableFairness=false');
    expect(args).not.toContain('matching.enableFairness=true');
    expect(args).toContain('limit.historyCount.suggestContinueAsNew=40');
    expect(args).toHaveLength(DEV_SERVER_DYNAMIC_CONFIG.length + 1);
  });
});
