/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  // The Web UI browser check runs on its own (npm run test:browser), with chromium installed for it.
  // The fault suite runs on its own too (npm run test:faults, jest.faults.config.js): it kills processes.
  testPathIgnorePatterns: ['/node_modules/', '/test/browser/', '/test/faults/'],
  transform: {
    '^.+\\.[tj]sx?$': ['ts-jest', { tsconfig: { allowJs: true, isolatedModules: true } }],
  },
  // @a2a-js/sdk's CommonJS build requires jose 6, which is ESM-only: transform it too.
  transformIgnorePatterns: ['/node_modules/(?!jose/)'],
  globalSetup: '<rootDir>/test/helpers/global-setup.ts',
  globalTeardown: '<rootDir>/test/helpers/global-teardown.ts',
  testTimeout: 60000,
  maxWorkers: 2,
};
