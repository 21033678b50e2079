/**
 * The shared StreamResponse validator (§2, §6) on arbitrary JSON: it never throws, and it accepts
 * exactly the four shapes — one top-level key of task, message, statusUpdate, artifactUpdate whose
 * value is an object (with a string task id when it names one).
 */
import fc from 'fast-check';
import { STREAM_RESPONSE_KINDS, validateStreamResponse } from '../../src/stream-response';

const KINDS: readonly string[] = STREAM_RESPONSE_KINDS;
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The four shapes, from the contract's words. */
function shapeOf(v: unknown): { kind: string; taskId?: string } | undefined {
  if (!isObject(v)) return undefined;
  const keys = Object.keys(v);
  if (keys.length !== 1 || !KINDS.includes(keys[0]!)) return undefined;
  const kind = keys[0]!;
  const inner = v[kind];
  if (!isObject(inner)) return undefined;
  const id = inner[kind === 'task' ? 'id' : 'taskId'];
  if (id === undefined) return { kind };
  return typeof id === 'string' ? { kind, taskId: id } : undefined;
}

// JSON as JSON.parse makes it, with keys that are often the interesting ones.
const key = fc.oneof(
  fc.constantFrom(...KINDS, 'id', 'taskId', '__proto__', 'constructor', 'result'),
  fc.string(),
);
const json = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.constant(null),
    fc.boolean(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.string(),
    fc.array(tie('value'), { maxLength: 4 }),
    tie('object'),
  ),
  object: fc.dictionary(key, tie('value'), { maxKeys: 4 }),
})).value;

// Values built to sit near the accepted shapes: one kind key, object or not, a task id of any type.
const nearShape = fc
  .tuple(
    fc.constantFrom(...KINDS),
    fc.oneof(fc.dictionary(key, json, { maxKeys: 3 }), json),
    fc.option(json, { nil: undefined }),
    fc.option(fc.dictionary(key, json, { maxKeys: 2 }), { nil: undefined }),
  )
  .map(([kind, inner, id, extra]) => {
    const body =
      isObject(inner) && id !== undefined ? { ...inner, [kind === 'task' ? 'id' : 'taskId']: id } : inner;
    return { [kind]: body, ...(extra ?? {}) };
  });

// Parsed back from text, as the API and the inbox see it (so "__proto__" is an own key).
const parsed = (v: unknown) => JSON.parse(JSON.stringify(v) ?? 'null') as unknown;

describe('validateStreamResponse (properties)', () => {
  it('never throws on arbitrary JSON and accepts exactly the four shapes', () => {
    fc.assert(
      fc.property(fc.oneof(json, nearShape).map(parsed), (v) => {
        let r: ReturnType<typeof validateStreamResponse> | undefined;
        expect(() => (r = validateStreamResponse(v, 'streamResponse'))).not.toThrow();
        const want = shapeOf(v);
        if (want === undefined) {
          expect(r!.ok).toBe(false);
          if (!r!.ok) {
            expect(r!.errors.length).toBeGreaterThan(0);
            for (const e of r!.errors) expect(e.path.startsWith('streamResponse')).toBe(true);
          }
        } else expect(r).toEqual({ ok: true, ...want });
      }),
      { numRuns: 5000 },
    );
  });

  it('an accepted value names the task id it carries, and only a string one', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...KINDS),
        fc.string(),
        fc.dictionary(key, json, { maxKeys: 3 }),
        (kind, id, rest) => {
          const field = kind === 'task' ? 'id' : 'taskId';
          const v = parsed({ [kind]: { ...rest, [field]: id } });
          expect(validateStreamResponse(v)).toEqual({ ok: true, kind, taskId: id });
        },
      ),
    );
  });
});
