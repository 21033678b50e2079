import { rawMemberText } from '../../src/json-span';
import { validateStreamResponse } from '../../src/stream-response';

describe('validateStreamResponse', () => {
  it.each([
    [{ task: { id: 't1', status: {} } }, 'task', 't1'],
    [{ message: { messageId: 'm' } }, 'message', undefined],
    [{ message: { taskId: 't2' } }, 'message', 't2'],
    [{ statusUpdate: { taskId: 't3' } }, 'statusUpdate', 't3'],
    [{ artifactUpdate: { taskId: 't4' } }, 'artifactUpdate', 't4'],
  ])('accepts %j', (v, kind, taskId) => {
    const r = validateStreamResponse(v);
    expect(r).toEqual(taskId === undefined ? { ok: true, kind } : { ok: true, kind, taskId });
  });
  it.each([
    [null],
    [[]],
    ['task'],
    [{}],
    [{ task: {}, message: {} }],
    [{ task: 'x' }],
    [{ task: [] }],
    [{ task: null }],
    [{ result: {} }],
    [{ task: {}, extra: 1 }],
    [{ task: { id: 5 } }],
    [{ statusUpdate: { taskId: 'a\u0000b' } }],
  ])('refuses %j', (v) => {
    const r = validateStreamResponse(v, 'streamResponse');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors[0]!.path.startsWith('streamResponse')).toBe(true);
  });
});

describe('rawMemberText keeps the value byte for byte', () => {
  it('keeps spacing, key order and number spelling', () => {
    const inner = '{ "task" : {"z":1, "a" : [1.50, "x\\"}"], "10": true, "2": null } }';
    const text = `{"streamResponse": ${inner} , "other":{"streamResponse":1}}`;
    expect(rawMemberText(text, 'streamResponse')).toBe(inner);
  });
  it('takes the last of duplicate keys, as JSON.parse does', () => {
    expect(rawMemberText('{"a":1,"a":{"b":2}}', 'a')).toBe('{"b":2}');
  });
  it('handles escaped keys and strings with braces', () => {
    const text = '{"x":"}{][","stream\\u0052esponse":{"k":"\\\\"}}';
    expect(rawMemberText(text, 'streamResponse')).toBe('{"k":"\\\\"}');
  });
  it('answers undefined for a missing key or a non-object', () => {
    expect(rawMemberText('{"a":1}', 'b')).toBeUndefined();
    expect(rawMemberText('[1]', 'a')).toBeUndefined();
  });
});
