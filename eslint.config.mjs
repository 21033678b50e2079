import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/**',
      'dist/**',
      '.data/**',
      '.tools/**',
      'coverage/**',
      '.test-tmp/**',
      'bench/.scratch/**',
      'bench/results/**',
      // openapi-typescript's output (npm run clients:typescript)
      'test/clients/a2a-push-api.ts',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        console: 'readonly',
        process: 'readonly',
        require: 'readonly',
        module: 'writable',
        __dirname: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-require-imports': 'off',
    },
  },
  {
    // A file a newcomer can read in one sitting: split by concern past this.
    files: ['src/**/*.ts'],
    rules: { 'max-lines': ['error', { max: 400 }] },
  },
  {
    // The one way out of the process is src/outbound: nothing else opens an outside connection.
    files: ['src/**/*.ts'],
    ignores: ['src/outbound/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            { name: 'undici', message: 'Outbound calls go through src/outbound (the address guard).' },
            { name: 'node:http', importNames: ['request', 'get'], message: 'Use src/outbound.' },
            { name: 'node:https', importNames: ['request', 'get'], message: 'Use src/outbound.' },
            { name: 'http', importNames: ['request', 'get'], message: 'Use src/outbound.' },
            { name: 'https', importNames: ['request', 'get'], message: 'Use src/outbound.' },
            { name: 'node:net', importNames: ['connect', 'createConnection'], message: 'Use src/outbound.' },
            { name: 'node:tls', importNames: ['connect'], message: 'Use src/outbound.' },
          ],
        },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'fetch', message: 'Use the guarded fetch of src/outbound.' },
      ],
    },
  },
);
