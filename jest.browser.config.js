/**
 * The browser check of the Temporal Web UI (test/browser), kept out of `npm test`: it needs
 * Debian's chromium at /usr/bin/chromium (scripts/ci-browser.sh installs it).
 * Run with `npx jest -c jest.browser.config.js`.
 */
const base = require('./jest.config.js');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  roots: ['<rootDir>/test/browser'],
  testMatch: ['**/*.test.ts'],
  // The default config ignores test/browser; this one runs only that.
  testPathIgnorePatterns: ['/node_modules/'],
  maxWorkers: 1,
};
