#!/usr/bin/env node
// Creates the Python virtual environment of the interop tests in .tools/a2a-py with the reference
// A2A SDK (a2a-sdk[http-server]==1.3.0) and uvicorn from PyPI, pinned in test/interop/requirements.txt,
// and adds schemathesis (test/schemathesis/requirements.txt) for `npm run test:schemathesis`. With the
// argument `clients` it adds only the client generator and the second OpenAPI validator
// (test/clients/requirements.txt) for `npm run test:clients`, which needs them alone.
// Idempotent and quick when present: a stamp file per set records the requirements it was built from.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const venv = path.join(root, '.tools', 'a2a-py');
const requirements = path.join(root, 'test', 'interop', 'requirements.txt');
const stamp = path.join(venv, '.a2a-push-requirements');
const fuzzRequirements = path.join(root, 'test', 'schemathesis', 'requirements.txt');
const fuzzStamp = path.join(venv, '.a2a-push-schemathesis');
const clientRequirements = path.join(root, 'test', 'clients', 'requirements.txt');
const clientStamp = path.join(venv, '.a2a-push-clients');
const python = path.join(venv, 'bin', 'python');
const schemathesis = path.join(venv, 'bin', 'schemathesis');
const openapiGenerator = path.join(venv, 'bin', 'openapi-generator-cli');
const openapiSpecValidator = path.join(venv, 'bin', 'openapi-spec-validator');

const stampedAs = (file, req) => {
  try {
    return fs.existsSync(python) && fs.readFileSync(file, 'utf8') === fs.readFileSync(req, 'utf8');
  } catch {
    return false;
  }
};
const installed = () => stampedAs(stamp, requirements);
const schemathesisInstalled = () => installed() && stampedAs(fuzzStamp, fuzzRequirements);

function install() {
  if (installed()) return;
  const base = process.env.PYTHON || 'python3';
  console.log(
    `a2a-push: creating ${path.relative(root, venv)} with the Python A2A SDK (${path.relative(root, requirements)})`,
  );
  try {
    if (!fs.existsSync(python)) execFileSync(base, ['-m', 'venv', venv], { stdio: 'inherit' });
    execFileSync(
      python,
      ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '-r', requirements],
      { stdio: 'inherit' },
    );
    execFileSync(python, ['-c', 'import a2a.server.tasks, uvicorn, starlette'], { stdio: 'inherit' });
  } catch (err) {
    throw new Error(`a2a-push: could not create the Python A2A SDK environment: ${err.message}`);
  }
  fs.copyFileSync(requirements, stamp);
}

/** Adds schemathesis; both requirement files go to one pip run, so it cannot move the SDK's pins. */
function installSchemathesis() {
  install();
  if (schemathesisInstalled()) return;
  console.log(
    `a2a-push: adding schemathesis to ${path.relative(root, venv)} (${path.relative(root, fuzzRequirements)})`,
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
        '-r',
        requirements,
        '-r',
        fuzzRequirements,
      ],
      { stdio: 'inherit' },
    );
    execFileSync(schemathesis, ['--version'], { stdio: 'inherit' });
    execFileSync(python, ['-c', 'import a2a.server.tasks, uvicorn, starlette'], { stdio: 'inherit' });
  } catch (err) {
    throw new Error(`a2a-push: could not add schemathesis: ${err.message}`);
  }
  fs.copyFileSync(fuzzRequirements, fuzzStamp);
}

/**
 * Adds openapi-generator-cli and openapi-spec-validator. One pip run with every requirement file, so it
 * moves neither the SDK's pins nor schemathesis's (which it may not have installed yet).
 */
function installClientTools() {
  install();
  if (stampedAs(clientStamp, clientRequirements)) return;
  console.log(
    `a2a-push: adding the client tools to ${path.relative(root, venv)} (${path.relative(root, clientRequirements)})`,
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
        '-r',
        requirements,
        '-r',
        fuzzRequirements,
        '-r',
        clientRequirements,
      ],
      { stdio: 'inherit' },
    );
    execFileSync(openapiSpecValidator, ['--help'], { stdio: 'ignore' });
    execFileSync(python, ['-c', 'import a2a.server.tasks, uvicorn, starlette'], { stdio: 'inherit' });
  } catch (err) {
    throw new Error(`a2a-push: could not add the client tools: ${err.message}`);
  }
  fs.copyFileSync(clientRequirements, clientStamp);
}

module.exports = {
  install,
  installed,
  installSchemathesis,
  installClientTools,
  venvPython: python,
  schemathesisBin: schemathesis,
  openapiGeneratorBin: openapiGenerator,
  openapiSpecValidatorBin: openapiSpecValidator,
};
if (require.main === module) {
  try {
    if (process.argv[2] === 'clients') {
      installClientTools();
      process.exit(0);
    }
    install();
    installSchemathesis();
  } catch (err) {
    console.error(err.message);
    process.exit(1);
  }
}
