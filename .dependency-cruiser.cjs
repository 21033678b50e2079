/**
 * The rooms of src/ and which way their imports may run (docs/architecture.md, "Rooms"). `npm run
 * deps` (part of `npm test`) fails on any import that breaks one of these rules. Type imports count:
 * a circle closed by a type import is a circle all the same.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'src/ has no import circle: every room can be read before the rooms that use it.',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'activities-start-nothing',
      severity: 'error',
      comment:
        'Activities load, attempt and record: they import neither the worker nor the starting code (src/starts); the jobs they make due go to the relay through an injected handoff.',
      from: { path: '^src/activities/' },
      to: { path: '^src/(worker|starts)/' },
    },
    {
      name: 'db-without-temporal',
      severity: 'error',
      comment: 'The database modules know nothing of Temporal.',
      from: { path: '^src/db/' },
      to: { path: ['^src/temporal\\.ts$', '^src/starts/', '^src/workflows/', '^src/worker/'] },
    },
    {
      name: 'listeners-not-from-api',
      severity: 'error',
      comment:
        'The inbox and the worker take their shared listener plumbing from src/http, never from the management API.',
      from: { path: '^src/(inbox|worker)/' },
      to: { path: '^src/api/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    includeOnly: '^src/',
    // Type-only imports are dependencies too (a circle of types is still a circle).
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
