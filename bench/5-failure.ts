import type { Benchmark } from './lib/context';
export const failureBenchmark: Benchmark = {
  name: 'failure',
  title: '5-failure',
  run() {
    return Promise.reject(new Error('not yet'));
  },
};
