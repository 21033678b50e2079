import type { Benchmark } from './lib/context';
export const inboxBenchmark: Benchmark = {
  name: 'inbox',
  title: '4-inbox',
  run() {
    return Promise.reject(new Error('not yet'));
  },
};
