import { Pool } from 'undici';
import { benchStreamResponse, pool, sleep } from './util';

/** A keep-alive client for the API under test, with the bench's key. */
export class ApiClient {
  readonly pool: Pool;
  constructor(
    readonly url: string,
    private readonly key: string,
    connections = 64,
  ) {
    this.pool = new Pool(url, { connections, pipelining: 1 });
  }

  async call(
    method: 'POST' | 'GET',
    path: string,
    body?: unknown,
  ): Promise<{ status: number; json: unknown; retryAfterS?: number }> {
    const r = await this.pool.request({
      method,
      path,
      headers: {
        authorization: `Bearer ${this.key}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await r.body.text();
    const retryAfter = Number(r.headers['retry-after']);
    return {
      status: r.statusCode,
      json: text ? (JSON.parse(text) as unknown) : undefined,
      ...(Number.isFinite(retryAfter) ? { retryAfterS: retryAfter } : {}),
    };
  }

  /** One push config per (task, k) to the receiver, with a Bearer credential. */
  async createConfigs(tasks: string[], perTask: number, targetUrl: string, concurrency = 16): Promise<void> {
    const jobs = tasks.flatMap((t) => Array.from({ length: perTask }, (_, k) => ({ t, k })));
    await pool(jobs, concurrency, async ({ t, k }) => {
      const r = await this.call('POST', `/v1/tasks/${t}/pushNotificationConfigs`, {
        id: `cfg-${k}`,
        url: `${targetUrl}/hook/${t}/${k}`,
        authentication: { scheme: 'Bearer', credentials: 'bench-credential' },
      });
      if (r.status !== 201) throw new Error(`create config ${t}/${k}: ${r.status} ${JSON.stringify(r.json)}`);
    });
  }

  /** POST /v1/tasks/{taskId}/events with the benchmark body; throws unless 202. */
  async postEvent(taskId: string, id: string): Promise<void> {
    const r = await this.call('POST', `/v1/tasks/${taskId}/events`, {
      streamResponse: benchStreamResponse(taskId, id),
    });
    if (r.status !== 202) throw new Error(`event ${id}: ${r.status} ${JSON.stringify(r.json)}`);
  }

  /**
   * postEvent as a client should: a 503 (nothing stored; its Retry-After says when to come back) is
   * tried again after that delay, `attempts` in all. Answers how many 503s it took; throws on any
   * other answer, or when the last attempt is refused too.
   */
  async postEventRetrying(taskId: string, id: string, attempts = 5): Promise<number> {
    for (let refused = 0; ; refused++) {
      const r = await this.call('POST', `/v1/tasks/${taskId}/events`, {
        streamResponse: benchStreamResponse(taskId, id),
      });
      if (r.status === 202) return refused;
      if (r.status !== 503 || refused + 1 >= attempts)
        throw new Error(`event ${id}: ${r.status} ${JSON.stringify(r.json)}`);
      await sleep((r.retryAfterS ?? 1) * 1000);
    }
  }

  close() {
    return this.pool.close();
  }
}

/** n events spread round-robin over the tasks: event i goes to task i mod tasks. */
export const eventPlan = (n: number, tasks: string[], prefix: string) =>
  Array.from({ length: n }, (_, i) => ({ taskId: tasks[i % tasks.length]!, id: `${prefix}-${i}` }));
