import { charsetRefusal, charsetsOf, utf8Text } from '../../src/http/body';

describe('charsetsOf: the charset parameters of a Content-Type', () => {
  it.each([
    ['application/json', []],
    ['application/json; charset=utf-8', ['utf-8']],
    ['application/json;charset=UTF-8 ', ['UTF-8']],
    ['application/json; charset="utf-8"', ['utf-8']],
    ['application/json; CHARSET="a\\"b"', ['a"b']],
    ['application/json; x="; charset=latin1"', []],
    ['application/json; x="; charset=latin1"; charset=utf8', ['utf8']],
    ['application/json; charset=utf-8; charset=latin1', ['utf-8', 'latin1']],
    ['application/json; charset=', ['']],
    ['application/json; charset', []],
    ['application/json; mycharset=latin1', []],
  ])('%s → %j', (ct, expected) => {
    expect(charsetsOf(ct)).toEqual(expected);
  });
});

describe('charsetRefusal: 415 for any charset but UTF-8', () => {
  it.each([
    undefined,
    'application/json',
    'application/json; charset=utf-8',
    'application/json; charset=UTF-8',
    'application/json; charset="Utf-8"',
    'application/json; charset=utf8',
  ])('takes %s', (ct) => expect(charsetRefusal(ct)).toBeUndefined());
  it.each([
    ['application/json; charset=latin1', 'latin1'],
    ['application/json; charset=iso-8859-1', 'iso-8859-1'],
    ['application/json; charset="utf-16"', 'utf-16'],
    ['application/json; charset=utf-8; charset=latin1', 'latin1'],
    ['application/json; charset=', ''],
  ])('refuses %s naming %j', (ct, named) =>
    expect(charsetRefusal(ct)).toBe(
      `the body must be UTF-8; charset ${JSON.stringify(named)} is not supported`,
    ),
  );
});

describe('utf8Text: strict, never lossy', () => {
  it.each([
    ['c328', 'a lead byte without its continuation'],
    ['fffe', 'bytes that never occur'],
    ['eda080', 'an encoded surrogate'],
    ['c080', 'an overlong encoding'],
    ['f4908080', 'a code point past U+10FFFF'],
    ['7b22e2', 'a sequence cut short at the end'],
  ])('refuses %s (%s)', (hex) => expect(utf8Text(Buffer.from(hex, 'hex'))).toBeUndefined());
  it('keeps valid text exactly, escapes of lone surrogates and a BOM included', () => {
    const text = '\uFEFF{"a":"\\ud800 é 🙂"}';
    expect(utf8Text(Buffer.from(text, 'utf8'))).toBe(text);
  });
});
