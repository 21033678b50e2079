/** The four kinds of a v1.0 StreamResponse: exactly one of these keys, its value an object. */
export const STREAM_RESPONSE_KINDS = ['task', 'message', 'statusUpdate', 'artifactUpdate'] as const;
export type StreamResponseKind = (typeof STREAM_RESPONSE_KINDS)[number];

export type StreamResponseVerdict =
  | { ok: true; kind: StreamResponseKind; taskId?: string }
  | { ok: false; errors: Array<{ path: string; message: string }> };

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The one validator the outbox and the inbox share. Inner fields are not validated further; the task
 * id it names is returned (task.id, statusUpdate.taskId, artifactUpdate.taskId, message.taskId).
 */
export function validateStreamResponse(value: unknown, path = ''): StreamResponseVerdict {
  const at = (k: string) => (path ? `${path}.${k}` : k);
  if (!isObject(value))
    return { ok: false, errors: [{ path: path, message: 'must be a StreamResponse object' }] };
  const keys = Object.keys(value);
  const unknown = keys.filter((k) => !(STREAM_RESPONSE_KINDS as readonly string[]).includes(k));
  if (unknown.length > 0)
    return {
      ok: false,
      errors: unknown.map((k) => ({ path: at(k), message: 'is not a StreamResponse field' })),
    };
  if (keys.length !== 1)
    return {
      ok: false,
      errors: [{ path, message: `must have exactly one of ${STREAM_RESPONSE_KINDS.join(', ')}` }],
    };
  const kind = keys[0] as StreamResponseKind;
  const inner = value[kind];
  if (!isObject(inner)) return { ok: false, errors: [{ path: at(kind), message: 'must be an object' }] };
  const idField = kind === 'task' ? 'id' : 'taskId';
  const id = inner[idField];
  if (id !== undefined && typeof id !== 'string')
    return { ok: false, errors: [{ path: at(`${kind}.${idField}`), message: 'must be a string' }] };
  // The id is stored as text, which cannot hold U+0000 (the body is kept as JSON text, where it is escaped).
  if (id?.includes('\u0000'))
    return {
      ok: false,
      errors: [{ path: at(`${kind}.${idField}`), message: 'must not contain U+0000' }],
    };
  return id === undefined ? { ok: true, kind } : { ok: true, kind, taskId: id };
}
