import { Registry } from 'prom-client';
import {
  GUARD_RULES,
  checkUrlStatic,
  compilePolicy,
  countRefusal,
  guardRefusals,
  judgeAddress,
  judgeAnswers,
  parseCidrList,
  type AddressPolicy,
  type GuardRule,
} from '../../src/outbound/guard';
import { ALLOWED, REFUSED, type GuardCase } from '../helpers/guard-corpus';

const none = compilePolicy('', '');

function policyFor(c: GuardCase): AddressPolicy {
  return compilePolicy(c.allow ?? '', c.deny ?? '');
}

/** What the guard decides for a corpus case: the static verdict, then (for names) every answer. */
function verdictFor(c: GuardCase): GuardRule | null {
  const policy = policyFor(c);
  const verdict = checkUrlStatic(c.input, policy);
  if (!verdict.ok) return verdict.rule;
  if (c.kind === 'url') return null;
  if (verdict.literal) throw new Error(`dns case with a literal host: ${c.input}`);
  return judgeAnswers(c.answers ?? [], policy)?.rule ?? null;
}

const label = (c: GuardCase): string =>
  `${c.kind} ${c.input.length > 80 ? `${c.input.slice(0, 40)}…(${c.input.length} chars)` : c.input}` +
  `${c.answers ? ` -> [${c.answers.join(', ')}]` : ''}${c.allow ? ` allow=${c.allow}` : ''}` +
  `${c.deny ? ` deny=${c.deny}` : ''} (${c.note})`;

describe('guard corpus', () => {
  it('has at least 60 refused and 10 allowed cases, covering every rule', () => {
    expect(REFUSED.length).toBeGreaterThanOrEqual(60);
    expect(ALLOWED.length).toBeGreaterThanOrEqual(10);
    expect(new Set(REFUSED.map((c) => c.rule))).toEqual(new Set(GUARD_RULES));
  });

  describe.each(REFUSED.map((c) => [label(c), c] as const))('refuses %s', (_name, c) => {
    it(`with ${c.rule}`, () => {
      expect(verdictFor(c)).toBe(c.rule);
    });
  });

  describe.each(ALLOWED.map((c) => [label(c), c] as const))('allows %s', (_name, c) => {
    it('by verdict', () => {
      expect(verdictFor(c)).toBeNull();
    });
  });
});

describe('checkUrlStatic', () => {
  it('returns the normalised URL, the bare host name and whether it is a literal', () => {
    const v = checkUrlStatic('https://[::ffff:8.8.8.8]:8443/x', none);
    expect(v).toMatchObject({ ok: true, hostname: '::ffff:808:808', literal: true });
    expect(v.ok && v.url.href).toBe('https://[::ffff:808:808]:8443/x');

    const n = checkUrlStatic('https://Hooks.Example.COM./a2a?x=1', none);
    expect(n).toMatchObject({ ok: true, hostname: 'hooks.example.com', literal: false });

    const d = checkUrlStatic('https://0x08.0x08.0x08.0x08/', none);
    expect(d).toMatchObject({ ok: true, hostname: '8.8.8.8', literal: true });
  });

  it('accepts exactly 2,048 characters and refuses 2,049', () => {
    const base = 'https://example.com/';
    expect(checkUrlStatic(base + 'a'.repeat(2048 - base.length), none).ok).toBe(true);
    expect(checkUrlStatic(base + 'a'.repeat(2049 - base.length), none)).toMatchObject({
      rule: 'url_too_long',
    });
  });

  it('names the first matching rule in the contract order', () => {
    expect(checkUrlStatic('http://user@localhost/', none)).toMatchObject({ rule: 'scheme' });
    expect(checkUrlStatic('https://user@localhost/', none)).toMatchObject({ rule: 'userinfo' });
    expect(checkUrlStatic('https://user@127.0.0.1/', none)).toMatchObject({ rule: 'userinfo' });
  });

  it('keeps secrets of the URL out of refusal messages', () => {
    const v = checkUrlStatic('https://127.0.0.1/hook?token=s3cret', none);
    expect(v).toMatchObject({ ok: false, rule: 'private_address' });
    expect(!v.ok && v.message).not.toContain('s3cret');
    const u = checkUrlStatic('https://alice:s3cret@example.com/', none);
    expect(!u.ok && u.message).not.toContain('s3cret');
  });
});

describe('judgeAddress', () => {
  it.each([
    ['fe80::1%eth0', 'private_address'],
    ['fe80::1%25', 'private_address'],
    ['[::1]', 'private_address'],
    ['2606:4700:4700::1111%eth0', null],
    ['fe80::1%', 'private_address'],
    ['8.8.8.8%eth0', 'private_address'],
    ['', 'private_address'],
    ['010.0.0.1', 'private_address'],
    ['::ffff:8.8.8.8', null],
    ['::8.8.8.8', null],
    ['::', 'private_address'],
    ['::1', 'private_address'],
  ] as const)('judges %s as %s', (ip, expected) => {
    expect(judgeAddress(ip, none)).toBe(expected);
  });

  it('unwraps embedded IPv4 for the allow and deny lists', () => {
    const allow = compilePolicy('127.0.0.0/8', '');
    expect(judgeAddress('::ffff:127.0.0.1', allow)).toBeNull();
    expect(judgeAddress('::7f00:1', allow)).toBeNull();
    const deny = compilePolicy('', '8.8.0.0/16');
    expect(judgeAddress('::ffff:8.8.4.4', deny)).toBe('denied_cidr');
    expect(judgeAddress('::808:404', deny)).toBe('denied_cidr');
  });

  it('matches the deny list against the IPv6 spelling too, but lifts only the judged form', () => {
    expect(judgeAddress('::ffff:8.8.8.8', compilePolicy('', '::ffff:0:0/96'))).toBe('denied_cidr');
    expect(judgeAddress('::ffff:10.0.0.1', compilePolicy('::ffff:0:0/96', ''))).toBe('private_address');
  });
});

describe('parseCidrList and compilePolicy', () => {
  it('parses CIDRs and bare addresses, ignoring blanks', () => {
    const list = parseCidrList(' 10.0.0.0/8, ,::1,2001:db8::/32 ,');
    expect(list.map(([a, bits]) => `${a.toString()}/${bits}`)).toEqual([
      '10.0.0.0/8',
      '::1/128',
      '2001:db8::/32',
    ]);
    expect(parseCidrList('')).toEqual([]);
  });

  it.each([
    '10.0.0.0/33',
    '::/129',
    'example.com',
    '10.0.0.0/',
    '10.0.0.0/8/8',
    '010.0.0.0/8',
    'fe80::%eth0/64',
    '1.2.3/8',
  ])('refuses %s with a message naming it', (entry) => {
    expect(() => compilePolicy(`10.0.0.0/8,${entry}`, '')).toThrow(entry);
    expect(() => compilePolicy('', entry)).toThrow(/invalid CIDR/);
  });
});

describe('guardRefusals', () => {
  it('counts refusals by rule into whichever registry registers it', async () => {
    const registry = new Registry();
    registry.registerMetric(guardRefusals);
    const before = (await guardRefusals.get()).values.find((v) => v.labels.rule === 'scheme')?.value ?? 0;
    countRefusal('scheme');
    countRefusal('scheme');
    const text = await registry.metrics();
    expect(text).toContain('a2a_push_guard_refusals_total');
    const after = (await guardRefusals.get()).values.find((v) => v.labels.rule === 'scheme')?.value ?? 0;
    expect(after - before).toBe(2);
  });
});
