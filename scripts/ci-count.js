#!/usr/bin/env node
// Closing line of .ci/run: adds up what its steps counted in the log it wrote. Jest prints
// "Tests:       858 passed, 858 total" (with "N failed, " before it when some failed); the schemathesis
// step prints "schemathesis: N passed, N failed", the clients step "clients: N passed, N failed".
// Prints "ci: N passed, N failed" and exits 1 when anything failed or nothing was counted.
'use strict';
const fs = require('node:fs');

const text = fs.readFileSync(process.argv[2], 'utf8');
let passed = 0;
let failed = 0;
let runs = 0;
for (const line of text.split('\n')) {
  const jest = /^Tests:\s+(.*) total$/.exec(line.trim());
  const st = /^(?:schemathesis|clients): (\d+) passed, (\d+) failed$/.exec(line.trim());
  if (jest) {
    runs += 1;
    passed += Number(/(\d+) passed/.exec(jest[1])?.[1] ?? 0);
    failed += Number(/(\d+) failed/.exec(jest[1])?.[1] ?? 0);
  } else if (st) {
    runs += 1;
    passed += Number(st[1]);
    failed += Number(st[2]);
  }
}
process.stdout.write(`ci: ${runs} test runs\n`);
process.stdout.write(`ci: ${passed} passed, ${failed} failed\n`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
