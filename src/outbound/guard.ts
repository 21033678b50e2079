/**
 * The address guard (contract §4): decides, without any I/O, whether a URL or an IP address may be
 * contacted. The HTTP client in ./http.ts is the only code that acts on its verdicts.
 */
import { promises as dns } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { Counter } from 'prom-client';

export const GUARD_RULES = [
  'url_too_long',
  'url_invalid',
  'scheme',
  'userinfo',
  'forbidden_host',
  'denied_cidr',
  'private_address',
] as const;
export type GuardRule = (typeof GUARD_RULES)[number];

export const MAX_URL_LENGTH = 2048;

type Address = ipaddr.IPv4 | ipaddr.IPv6;
type Cidr = [Address, number];

/** Compiled allow/deny lists. Build it with compilePolicy; the fields are not part of the API. */
export interface AddressPolicy {
  readonly allow: readonly Cidr[];
  readonly deny: readonly Cidr[];
}

/**
 * Parses a comma-separated CIDR list ('' = none). Stricter than ipaddr.js on purpose: an address part
 * must be what net.isIP accepts (dotted quads without leading zeros, no zone id), so a setting cannot
 * mean one range to us and another to the person who wrote `010.0.0.0/8`.
 */
export function parseCidrList(value: string): Array<[ipaddr.IPv4 | ipaddr.IPv6, number]> {
  const out: Cidr[] = [];
  for (const rawEntry of value.split(',')) {
    const entry = rawEntry.trim();
    if (entry === '') continue;
    const bad = (why: string): Error =>
      new Error(
        `invalid CIDR "${entry}": ${why} (expected e.g. 10.0.0.0/8, 2001:db8::/32 or a bare address)`,
      );
    const slash = entry.indexOf('/');
    const addrPart = slash === -1 ? entry : entry.slice(0, slash);
    const family = addrPart.includes('%') ? 0 : isIP(addrPart);
    if (family === 0) throw bad('not an IP address');
    const maxBits = family === 4 ? 32 : 128;
    let bits = maxBits;
    if (slash !== -1) {
      const lenPart = entry.slice(slash + 1);
      if (!/^\d{1,3}$/.test(lenPart) || Number(lenPart) > maxBits) {
        throw bad(`prefix length must be 0-${maxBits}`);
      }
      bits = Number(lenPart);
    }
    out.push([ipaddr.parse(addrPart), bits]);
  }
  return out;
}

export function compilePolicy(allowCidrs: string, denyCidrs: string): AddressPolicy {
  return { allow: parseCidrList(allowCidrs), deny: parseCidrList(denyCidrs) };
}

function cidrs(list: string[]): Cidr[] {
  return list.map((c) => ipaddr.parseCIDR(c));
}

// The contract's lists, spelled out: ipaddr.js range() names are not the contract (it calls ::7f00:1
// and ::2 'unicast').
const IPV4_NOT_PUBLIC = cidrs([
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
]);
const IPV6_GLOBAL_UNICAST = cidrs(['2000::/3']);
const IPV6_NOT_PUBLIC = cidrs(['2001:db8::/32', '2001::/32', '2002::/16', '64:ff9b::/96', '64:ff9b:1::/48']);

function inAny(addr: Address, list: readonly Cidr[]): boolean {
  for (const [range, bits] of list) {
    if (range.kind() === addr.kind() && addr.match(range, bits)) return true;
  }
  return false;
}

/** Accepts what net.isIP accepts, with optional brackets and an IPv6 zone id; anything else is null. */
function parseAddress(ip: string): Address | null {
  let s = ip.trim();
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const pct = s.indexOf('%');
  if (pct !== -1) {
    // A zone id only scopes a link-local-style address to an interface; the address is what is judged.
    if (pct === s.length - 1) return null;
    s = s.slice(0, pct);
    if (isIP(s) !== 6) return null;
  }
  const family = isIP(s);
  if (family === 4) return ipaddr.IPv4.parse(s);
  if (family === 6) return ipaddr.IPv6.parse(s);
  return null;
}

/** IPv4-mapped (::ffff:0:0/96) and IPv4-compatible (::/96 but :: and ::1) addresses reach IPv4 space. */
function embeddedIPv4(addr: ipaddr.IPv6): ipaddr.IPv4 | null {
  if (addr.isIPv4MappedAddress()) return addr.toIPv4Address();
  const p = addr.parts;
  if (p[0] === 0 && p[1] === 0 && p[2] === 0 && p[3] === 0 && p[4] === 0 && p[5] === 0) {
    const hi = p[6] ?? 0;
    const lo = p[7] ?? 0;
    if (hi === 0 && (lo === 0 || lo === 1)) return null;
    return new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
  }
  return null;
}

function isPublicUnicast(addr: Address): boolean {
  if (addr.kind() === 'ipv4') return !inAny(addr, IPV4_NOT_PUBLIC);
  return inAny(addr, IPV6_GLOBAL_UNICAST) && !inAny(addr, IPV6_NOT_PUBLIC);
}

/**
 * deny list (denied_cidr) > allow list (lifts) > public unicast (private_address). An address that
 * embeds IPv4 is judged as that IPv4 address; the deny list is matched against both spellings so
 * that a denied IPv6 range cannot be escaped by it, while the allow list only lifts the judged form.
 */
export function judgeAddress(ip: string, policy: AddressPolicy): 'denied_cidr' | 'private_address' | null {
  const raw = parseAddress(ip);
  if (raw === null) return 'private_address';
  const judged = raw.kind() === 'ipv6' ? (embeddedIPv4(raw as ipaddr.IPv6) ?? raw) : raw;
  if (inAny(raw, policy.deny) || (judged !== raw && inAny(judged, policy.deny))) return 'denied_cidr';
  if (inAny(judged, policy.allow)) return null;
  return isPublicUnicast(judged) ? null : 'private_address';
}

/**
 * Judges every answer of one resolution. Any refused answer refuses the name: a caller cannot know
 * which answer the connection would use. denied_cidr is named before private_address, the
 * contract's rule order.
 */
export function judgeAnswers(
  addresses: readonly string[],
  policy: AddressPolicy,
): { rule: 'denied_cidr' | 'private_address'; address: string } | null {
  let privateHit: string | null = null;
  for (const address of addresses) {
    const verdict = judgeAddress(address, policy);
    if (verdict === 'denied_cidr') return { rule: verdict, address };
    if (verdict === 'private_address' && privateHit === null) privateHit = address;
  }
  return privateHit === null ? null : { rule: 'private_address', address: privateHit };
}

export type StaticVerdict =
  | { ok: true; url: URL; hostname: string; literal: boolean }
  | { ok: false; rule: GuardRule; message: string };

function isForbiddenHost(hostname: string): boolean {
  return (
    hostname === 'localhost' ||
    hostname === 'metadata' ||
    hostname === 'metadata.google.internal' ||
    hostname.endsWith('.localhost') ||
    hostname.endsWith('.local') ||
    hostname.endsWith('.internal')
  );
}

function refuse(rule: GuardRule, message: string): StaticVerdict {
  return { ok: false, rule, message };
}

/**
 * Everything that can be judged without resolving. Messages name the host, never the whole URL: a
 * URL may carry a token in its query.
 */
export function checkUrlStatic(raw: string, policy: AddressPolicy): StaticVerdict {
  if (raw.length > MAX_URL_LENGTH) {
    return refuse('url_too_long', `URL is ${raw.length} characters, more than ${MAX_URL_LENGTH}`);
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return refuse('url_invalid', 'not a valid absolute URL');
  }
  // What WHATWG parses is judged by its scheme first: `javascript:x` and `file:///x` parse (with no
  // host) and are `scheme`.
  if (url.protocol !== 'https:')
    return refuse('scheme', `scheme ${url.protocol} is not allowed, only https:`);
  let hostname = url.hostname;
  if (hostname.startsWith('[') && hostname.endsWith(']')) hostname = hostname.slice(1, -1);
  // WHATWG keeps trailing dots on names; DNS treats `localhost.` as `localhost`.
  hostname = hostname.replace(/\.+$/, '');
  // An https: URL always has a host once parsed; one of dots alone (`https://./`) is none. Before
  // userinfo, as the rules' order says: `https://u:p@./` is `url_invalid`.
  if (hostname === '') return refuse('url_invalid', 'URL has no host');
  if (url.username !== '' || url.password !== '') {
    return refuse('userinfo', 'credentials in the URL (user:password@) are not allowed');
  }
  if (isForbiddenHost(hostname)) return refuse('forbidden_host', `host ${hostname} is not allowed`);
  // WHATWG has already turned every numeric IPv4 spelling into a dotted quad and kept IPv6 in brackets,
  // so isIP sees exactly the address a connection would use.
  const literal = isIP(hostname) !== 0;
  if (literal) {
    const rule = judgeAddress(hostname, policy);
    if (rule === 'denied_cidr') return refuse(rule, `address ${hostname} is in a denied range`);
    if (rule === 'private_address')
      return refuse(rule, `address ${hostname} is not a public unicast address`);
  }
  return { ok: true, url, hostname, literal };
}

export type Resolver = (hostname: string) => Promise<Array<{ address: string; family: number }>>;

/** Resolves the way the system does, so /etc/hosts counts; verbatim keeps the system's answer order. */
export const systemResolver: Resolver = (hostname) => dns.lookup(hostname, { all: true, verbatim: true });

export class GuardRefusedError extends Error {
  readonly rule: GuardRule;
  constructor(rule: GuardRule, message: string) {
    super(message);
    this.name = 'GuardRefusedError';
    this.rule = rule;
  }
}

// registers: [] because each process (api, worker, inbox) owns its registry and adds this to it.
export const guardRefusals = new Counter<'rule'>({
  name: 'a2a_push_guard_refusals_total',
  help: 'Outbound URLs or addresses refused by the address guard, by rule',
  labelNames: ['rule'],
  registers: [],
});

export function countRefusal(rule: GuardRule): void {
  guardRefusals.inc({ rule });
}
