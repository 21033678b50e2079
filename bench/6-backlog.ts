import type { Benchmark } from './lib/context';
export const backlogBenchmark: Benchmark = {
  name: 'backlog',
  title: '6-backlog',
  run() {
    return Promise.reject(new Error('not yet'));
  },
};
