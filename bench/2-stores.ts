import type { Benchmark } from './lib/context';
export const storesBenchmark: Benchmark = {
  name: 'stores',
  title: '2-stores',
  run() {
    return Promise.reject(new Error('not yet'));
  },
};
