import fs from 'node:fs';
import path from 'node:path';
import { generateTypes, TYPES_FILE } from '../../scripts/typescript-client';

describe('the TypeScript client types (test/clients/a2a-push-api.ts)', () => {
  it('are what openapi-typescript makes from the served document today', async () => {
    const checkedIn = fs.readFileSync(TYPES_FILE, 'utf8');
    const fresh = await generateTypes();
    expect(
      checkedIn === fresh
        ? 'up to date'
        : `${path.relative(process.cwd(), TYPES_FILE)} is stale: run npm run clients:typescript`,
    ).toBe('up to date');
    // Every named schema of the document is a type of its own (the integration test imports them).
    expect(fresh).toMatch(/^export type PushConfig = components\['schemas'\]\['PushConfig'\];$/m);
  });
});
