/**
 * judgeAddress against a reference classifier written from the contract's CIDR lists (§4) with plain
 * BigInt arithmetic, sharing no code with the guard (and not using ipaddr.js).
 */
import fc from 'fast-check';
import { compilePolicy, judgeAddress } from '../../src/outbound/guard';

type Family = 4 | 6;
interface Addr {
  family: Family;
  value: bigint;
}
interface RefCidr extends Addr {
  bits: number;
}
type Verdict = 'denied_cidr' | 'private_address' | null;

const MASK32 = (1n << 32n) - 1n;
const WIDTH: Record<Family, bigint> = { 4: 32n, 6: 128n };

function parseV4(s: string): bigint {
  return s.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

// Only the fully written-out and the `a::b` forms, enough for the contract's list.
function parseV6(s: string): bigint {
  const [head = '', tail] = s.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function cidr(s: string): RefCidr {
  const [a = '', b = ''] = s.split('/');
  const family: Family = a.includes(':') ? 6 : 4;
  return { family, value: family === 4 ? parseV4(a) : parseV6(a), bits: Number(b) };
}

function inCidr(addr: Addr, c: RefCidr): boolean {
  if (addr.family !== c.family) return false;
  const shift = WIDTH[c.family] - BigInt(c.bits);
  return addr.value >> shift === c.value >> shift;
}

// Contract §4, copied from the text.
const V4_NOT_PUBLIC = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.88.99.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4',
  '240.0.0.0/4',
  '255.255.255.255/32',
].map(cidr);
const V6_GLOBAL = cidr('2000::/3');
const V6_NOT_PUBLIC = ['2001:db8::/32', '2001::/32', '2002::/16', '64:ff9b::/96', '64:ff9b:1::/48'].map(cidr);

/** The address as the contract judges it: mapped ::ffff:0:0/96 and compatible ::/96 (not ::, ::1) → IPv4. */
function judgedForm(a: Addr): Addr {
  if (a.family === 6) {
    const high = a.value >> 32n;
    if (high === 0xffffn || (high === 0n && a.value > 1n)) return { family: 4, value: a.value & MASK32 };
  }
  return a;
}

function referencePublic(a: Addr): boolean {
  const j = judgedForm(a);
  if (j.family === 4) return !V4_NOT_PUBLIC.some((c) => inCidr(j, c));
  return inCidr(j, V6_GLOBAL) && !V6_NOT_PUBLIC.some((c) => inCidr(j, c));
}

function reference(a: Addr, allow: RefCidr[], deny: RefCidr[]): Verdict {
  const j = judgedForm(a);
  if (deny.some((c) => inCidr(a, c) || inCidr(j, c))) return 'denied_cidr';
  if (allow.some((c) => inCidr(j, c))) return null;
  return referencePublic(a) ? null : 'private_address';
}

// ---- spelling addresses

function v4String(v: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => ((v >> s) & 0xffn).toString()).join('.');
}

function groups(v: bigint): string[] {
  return [112n, 96n, 80n, 64n, 48n, 32n, 16n, 0n].map((s) => ((v >> s) & 0xffffn).toString(16));
}

function compress(gs: string[]): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < gs.length;) {
    if (gs[i] !== '0') {
      i += 1;
      continue;
    }
    let j = i;
    while (j < gs.length && gs[j] === '0') j += 1;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best === -1) return gs.join(':');
  return `${gs.slice(0, best).join(':')}::${gs.slice(best + bestLen).join(':')}`;
}

type Spelling = 'full' | 'compressed' | 'mixed' | 'upper';
function v6String(v: bigint, spelling: Spelling): string {
  const gs = groups(v);
  switch (spelling) {
    case 'full':
      return gs.join(':');
    case 'compressed':
      return compress(gs);
    case 'upper':
      return compress(gs).toUpperCase();
    case 'mixed':
      return `${gs.slice(0, 6).join(':')}:${v4String(v & MASK32)}`;
  }
}

function spell(a: Addr, spelling: Spelling): string {
  return a.family === 4 ? v4String(a.value) : v6String(a.value, spelling);
}

// ---- generators, biased towards the interesting ranges and their edges

const INTERESTING_V6 = [
  ...V6_NOT_PUBLIC,
  V6_GLOBAL,
  cidr('::/96'),
  cidr('::ffff:0:0/96'),
  cidr('::/127'),
  cidr('fc00::/7'),
  cidr('fe80::/10'),
  cidr('ff00::/8'),
  cidr('2001::/16'),
  cidr('::ffff:0:0:0/96'),
];

const bitsOf = (n: number): bigint => (1n << BigInt(n)) - 1n;
const randomIn = (c: RefCidr): fc.Arbitrary<bigint> => {
  const hostBits = Number(WIDTH[c.family]) - c.bits;
  const base = (c.value >> BigInt(hostBits)) << BigInt(hostBits);
  return fc.oneof(
    fc.bigInt({ min: 0n, max: bitsOf(hostBits) }).map((h) => base | h),
    // just outside on either side
    fc.constant(base === 0n ? 0n : base - 1n),
    fc.constant((base + (1n << BigInt(hostBits))) & bitsOf(Number(WIDTH[c.family]))),
  );
};

const v4Arb: fc.Arbitrary<Addr> = fc
  .oneof(fc.bigInt({ min: 0n, max: MASK32 }), fc.constantFrom(...V4_NOT_PUBLIC).chain(randomIn))
  .map((value) => ({ family: 4 as const, value }));

const v6Arb: fc.Arbitrary<Addr> = fc
  .oneof(fc.bigInt({ min: 0n, max: bitsOf(128) }), fc.constantFrom(...INTERESTING_V6).chain(randomIn))
  .map((value) => ({ family: 6 as const, value }));

// IPv4 addresses written as mapped (::ffff:a.b.c.d) or compatible (::a.b.c.d) IPv6.
const embeddedArb: fc.Arbitrary<Addr> = fc
  .tuple(v4Arb, fc.boolean())
  .map(([v4, mapped]) => ({ family: 6 as const, value: (mapped ? 0xffffn << 32n : 0n) | v4.value }));

const anyAddr = fc.oneof(v4Arb, v6Arb, embeddedArb);
const spellingArb = fc.constantFrom<Spelling>('full', 'compressed', 'mixed', 'upper');

const empty = compilePolicy('', '');

describe('judgeAddress matches the reference classifier', () => {
  it('for random IPv4 addresses', () => {
    fc.assert(
      fc.property(v4Arb, (a) => {
        expect(judgeAddress(spell(a, 'full'), empty)).toBe(reference(a, [], []));
      }),
      { numRuns: 3000 },
    );
  });

  it('for random IPv6 addresses in every spelling', () => {
    fc.assert(
      fc.property(v6Arb, spellingArb, (a, s) => {
        expect(judgeAddress(spell(a, s), empty)).toBe(reference(a, [], []));
      }),
      { numRuns: 3000 },
    );
  });

  it('for IPv4-mapped and IPv4-compatible addresses in every spelling', () => {
    fc.assert(
      fc.property(embeddedArb, spellingArb, (a, s) => {
        expect(judgeAddress(spell(a, s), empty)).toBe(reference(a, [], []));
      }),
      { numRuns: 3000 },
    );
  });

  it('ignores an IPv6 zone id', () => {
    fc.assert(
      fc.property(fc.oneof(v6Arb, embeddedArb), fc.constantFrom('eth0', 'lo', '1'), (a, zone) => {
        expect(judgeAddress(`${spell(a, 'compressed')}%${zone}`, empty)).toBe(reference(a, [], []));
      }),
      { numRuns: 1000 },
    );
  });
});

// ---- allow and deny lists

const cidrArb: fc.Arbitrary<RefCidr> = fc.oneof(
  fc.tuple(v4Arb, fc.integer({ min: 0, max: 32 })).map(([a, bits]) => ({ ...a, bits })),
  fc
    .tuple(fc.oneof(v6Arb, embeddedArb), fc.integer({ min: 0, max: 128 }))
    .map(([a, bits]) => ({ ...a, bits })),
);

function cidrString(c: RefCidr): string {
  return `${c.family === 4 ? v4String(c.value) : v6String(c.value, 'full')}/${c.bits}`;
}

const policyCase = fc
  .record({
    allow: fc.array(cidrArb, { maxLength: 4 }),
    deny: fc.array(cidrArb, { maxLength: 3 }),
  })
  .chain(({ allow, deny }) => {
    const listed = [...allow, ...deny];
    // Addresses inside listed ranges (or their IPv4 inside a mapped spelling) make the lists matter.
    const inside =
      listed.length === 0
        ? anyAddr
        : fc
            .constantFrom(...listed)
            .chain((c) => randomIn(c).map((value): Addr => ({ family: c.family, value })));
    const listedV4 = listed.filter((c) => c.family === 4);
    const mappedInside =
      listedV4.length === 0
        ? embeddedArb
        : fc
            .constantFrom(...listedV4)
            .chain(randomIn)
            .map((value): Addr => ({ family: 6, value: (0xffffn << 32n) | value }));
    return fc.record({
      allow: fc.constant(allow),
      deny: fc.constant(deny),
      addr: fc.oneof(anyAddr, inside, mappedInside),
      spelling: spellingArb,
    });
  });

describe('judgeAddress with allow and deny lists matches the reference', () => {
  it('deny wins, allow lifts the judged form, otherwise the public rule', () => {
    fc.assert(
      fc.property(policyCase, ({ allow, deny, addr, spelling }) => {
        const policy = compilePolicy(allow.map(cidrString).join(','), deny.map(cidrString).join(', '));
        expect(judgeAddress(spell(addr, spelling), policy)).toBe(reference(addr, allow, deny));
      }),
      { numRuns: 3000 },
    );
  });

  it('an allow list never lifts an address that the deny list holds', () => {
    // The same range on both lists: denied when the address (or the IPv4 it embeds) is inside it,
    // judged as if neither list existed otherwise. Half the addresses are drawn from inside the range.
    const sameListCase = cidrArb.chain((c) =>
      fc.record({
        c: fc.constant(c),
        a: fc.oneof(
          anyAddr,
          randomIn(c).map((value): Addr => ({ family: c.family, value })),
          c.family === 4
            ? randomIn(c).map((value): Addr => ({ family: 6, value: (0xffffn << 32n) | value }))
            : anyAddr,
        ),
      }),
    );
    let denied = 0;
    let notDenied = 0;
    fc.assert(
      fc.property(sameListCase, ({ c, a }) => {
        const list = cidrString(c);
        const verdict = judgeAddress(spell(a, 'compressed'), compilePolicy(list, list));
        const inside = inCidr(a, c) || inCidr(judgedForm(a), c);
        if (inside) {
          denied += 1;
          expect(verdict).toBe('denied_cidr');
        } else {
          notDenied += 1;
          expect(verdict).toBe(reference(a, [], []));
        }
      }),
      { numRuns: 1000 },
    );
    // Both sides of the property were exercised.
    expect(denied).toBeGreaterThan(100);
    expect(notDenied).toBeGreaterThan(100);
  });
});
