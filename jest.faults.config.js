/** The fault suite (npm run test:faults): slow tests that kill and restart real processes. */
const base = require('./jest.config');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  testPathIgnorePatterns: ['/node_modules/'],
  testMatch: ['<rootDir>/test/faults/**/*.test.ts'],
  testTimeout: 600000,
  // One at a time: they measure recovery on a small, shared machine.
  maxWorkers: 1,
  // In band, a child process or socket a failed test left behind would keep jest (and CI) waiting.
  forceExit: true,
};
