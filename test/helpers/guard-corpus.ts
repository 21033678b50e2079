/**
 * The address-guard corpus (contract §4), shared by the guard's unit tests and the API tests that
 * push the same inputs through the public endpoints.
 *
 * kind 'url': `input` is judged as given. kind 'dns': `input` is an https URL with a host name that
 * passes the static checks, and `answers` is what a fake resolver returns for it. `allow`/`deny` are
 * OUTBOUND_ALLOW_CIDRS / OUTBOUND_DENY_CIDRS for the case ('' when absent).
 *
 * Nothing here is ever connected to: the ALLOWED entries are judged by verdict only.
 */
import type { GuardRule } from '../../src/outbound/guard';

export interface GuardCase {
  input: string;
  kind: 'url' | 'dns';
  answers?: string[];
  allow?: string;
  deny?: string;
  /** what the case is about, used as the test name */
  note: string;
}

export type RefusedCase = GuardCase & { rule: GuardRule };

const url = (input: string, rule: GuardRule, note: string, policy: Partial<GuardCase> = {}): RefusedCase => ({
  input,
  kind: 'url',
  rule,
  note,
  ...policy,
});
const dns = (
  answers: string[],
  rule: GuardRule,
  note: string,
  policy: Partial<GuardCase> = {},
  input = 'https://hooks.example.com/a2a',
): RefusedCase => ({ input, kind: 'dns', answers, rule, note, ...policy });

export const REFUSED: RefusedCase[] = [
  // url_too_long / url_invalid
  url(`https://example.com/${'a'.repeat(2029)}`, 'url_too_long', '2,049 characters'),
  url(`http://${'a'.repeat(3000)}`, 'url_too_long', 'length is judged before the scheme'),
  url('https://', 'url_invalid', 'no host'),
  url('not a url', 'url_invalid', 'not a URL at all'),
  url('https://exa mple.com/', 'url_invalid', 'space in host'),
  url('https://[::1/', 'url_invalid', 'unclosed IPv6 bracket'),
  url('https://999.1.1.1/', 'url_invalid', 'IPv4 octet out of range'),
  url('https://1.2.3.4.5/', 'url_invalid', 'five-part IPv4'),
  url('https://[fe80::1%25eth0]/', 'url_invalid', 'WHATWG rejects IPv6 zone ids in URLs'),
  url('https://xn--localhost/', 'url_invalid', 'invalid punycode'),
  url('https://./', 'url_invalid', 'host is only a dot'),
  url('https://u:p@./', 'url_invalid', 'no host wins over userinfo (the order of the rules)'),
  // scheme
  url('http://example.com/hook', 'scheme', 'http'),
  url('ftp://example.com/', 'scheme', 'ftp'),
  url('wss://example.com/', 'scheme', 'wss'),
  url('javascript:alert(1)', 'scheme', 'WHATWG parses it (no host): judged by its scheme'),
  url('file:///etc/passwd', 'scheme', 'WHATWG parses it (empty host): judged by its scheme'),
  url('data:application/json,{}', 'scheme', 'data:'),
  url('http://127.0.0.1/', 'scheme', 'scheme is never lifted by the allow list', { allow: '127.0.0.0/8' }),
  // userinfo
  url('https://user:pass@example.com/', 'userinfo', 'user and password'),
  url('https://user@example.com/', 'userinfo', 'user only'),
  url('https://:secret@example.com/', 'userinfo', 'password only'),
  url('https://example.com@127.0.0.1/', 'userinfo', 'host-looking userinfo'),
  // forbidden_host
  url('https://localhost/', 'forbidden_host', 'localhost'),
  url('https://localhost./', 'forbidden_host', 'localhost with trailing dot'),
  url('https://LOCALHOST:8443/', 'forbidden_host', 'upper-case localhost'),
  url('https://api.localhost/', 'forbidden_host', '*.localhost'),
  url('https://a.b.localhost./', 'forbidden_host', '*.localhost with trailing dot'),
  url('https://printer.local/', 'forbidden_host', '*.local'),
  url('https://db.internal/', 'forbidden_host', '*.internal'),
  url('https://metadata.google.internal/computeMetadata/v1/', 'forbidden_host', 'GCP metadata name'),
  url('https://metadata.google.internal./', 'forbidden_host', 'GCP metadata name, trailing dot'),
  url('https://metadata/', 'forbidden_host', 'metadata'),
  url('https://metadata./', 'forbidden_host', 'metadata, trailing dot'),
  url('https://%6c%6f%63%61%6c%68%6f%73%74/', 'forbidden_host', 'percent-encoded localhost'),
  url(
    'https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/',
    'forbidden_host',
    'full-width localhost',
  ),
  url(
    'https://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3/',
    'forbidden_host',
    'circled-letter localhost',
  ),
  url('https://local\u00adhost/', 'forbidden_host', 'soft hyphen removed by IDNA'),
  url('https://localhost%E3%80%82/', 'forbidden_host', 'ideographic full stop as trailing dot'),
  url('https://api\uff0elocalhost/', 'forbidden_host', 'full-width full stop before localhost'),
  url('https://b\u00fccher.local/', 'forbidden_host', 'IDNA name under .local'),
  url('https://localhost/', 'forbidden_host', 'host names are never lifted by the allow list', {
    allow: '127.0.0.0/8',
  }),
  // literal IPv4, every spelling WHATWG accepts
  url('https://127.0.0.1/', 'private_address', 'loopback'),
  url('https://127.0.0.1./', 'private_address', 'loopback, trailing dot'),
  url('https://127.0.0.1%2E/', 'private_address', 'loopback, percent-encoded trailing dot'),
  url('https://2130706433/', 'private_address', 'decimal 127.0.0.1'),
  url('https://0177.0.0.1/', 'private_address', 'octal 127.0.0.1'),
  url('https://017700000001/', 'private_address', 'octal 32-bit 127.0.0.1'),
  url('https://0x7f.1/', 'private_address', 'hex short 127.0.0.1'),
  url('https://0x7f000001/', 'private_address', 'hex 32-bit 127.0.0.1'),
  url('https://127.1/', 'private_address', 'short 127.0.0.1'),
  url('https://%31%32%37.0.0.1/', 'private_address', 'percent-encoded 127.0.0.1'),
  url('https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/', 'private_address', 'full-width digits 127.0.0.1'),
  url('https://127.255.255.254:8443/x', 'private_address', 'top of 127/8'),
  url('https://10.0.0.1/', 'private_address', 'RFC 1918 10/8'),
  url('https://172.16.0.1/', 'private_address', 'RFC 1918 172.16/12 low'),
  url('https://172.31.255.255/', 'private_address', 'RFC 1918 172.16/12 high'),
  url('https://192.168.1.1/', 'private_address', 'RFC 1918 192.168/16'),
  url('https://100.64.0.1/', 'private_address', 'CGNAT low'),
  url('https://100.127.255.254/', 'private_address', 'CGNAT high'),
  url('https://169.254.169.254/latest/meta-data/', 'private_address', 'cloud metadata'),
  url('https://0xa9fea9fe/', 'private_address', 'cloud metadata in hex'),
  url('https://169.254.0.1/', 'private_address', 'link-local'),
  url('https://0.0.0.0/', 'private_address', '0.0.0.0'),
  url('https://0/', 'private_address', '0 (= 0.0.0.0)'),
  url('https://0.1.2.3/', 'private_address', '0/8'),
  url('https://255.255.255.255/', 'private_address', 'broadcast'),
  url('https://224.0.0.1/', 'private_address', 'multicast low'),
  url('https://239.255.255.250/', 'private_address', 'multicast SSDP'),
  url('https://240.0.0.1/', 'private_address', 'reserved 240/4'),
  url('https://192.0.0.8/', 'private_address', 'IETF protocol assignments 192.0.0/24'),
  url('https://192.0.2.10/', 'private_address', 'documentation TEST-NET-1'),
  url('https://198.51.100.7/', 'private_address', 'documentation TEST-NET-2'),
  url('https://203.0.113.9/', 'private_address', 'documentation TEST-NET-3'),
  url('https://198.18.0.1/', 'private_address', 'benchmarking 198.18/15 low'),
  url('https://198.19.255.1/', 'private_address', 'benchmarking 198.18/15 high'),
  url('https://192.88.99.1/', 'private_address', '6to4 relay anycast'),
  // literal IPv6
  url('https://[::1]/', 'private_address', 'IPv6 loopback'),
  url('https://[0:0:0:0:0:0:0:1]:8443/', 'private_address', 'IPv6 loopback, expanded'),
  url('https://[::]/', 'private_address', 'IPv6 unspecified'),
  url('https://[::ffff:127.0.0.1]/', 'private_address', 'IPv4-mapped loopback, dotted'),
  url('https://[::ffff:7f00:1]/', 'private_address', 'IPv4-mapped loopback, hex'),
  url('https://[0:0:0:0:0:ffff:a00:1]/', 'private_address', 'IPv4-mapped 10.0.0.1, expanded'),
  url('https://[::ffff:169.254.169.254]/', 'private_address', 'IPv4-mapped cloud metadata'),
  url('https://[::7f00:1]/', 'private_address', 'IPv4-compatible 127.0.0.1'),
  url('https://[::127.0.0.1]/', 'private_address', 'IPv4-compatible 127.0.0.1, dotted'),
  url('https://[::2]/', 'private_address', 'IPv4-compatible 0.0.0.2'),
  url('https://[::ffff:0:7f00:1]/', 'private_address', 'IPv4-translated (outside 2000::/3)'),
  url('https://[fd00:ec2::254]/', 'private_address', 'AWS IPv6 metadata'),
  url('https://[fc00::1]/', 'private_address', 'unique local fc00::/7'),
  url('https://[fe80::1]/', 'private_address', 'link-local'),
  url('https://[fec0::1]/', 'private_address', 'deprecated site-local'),
  url('https://[ff02::1]/', 'private_address', 'multicast'),
  url('https://[2001:db8::1]/', 'private_address', 'documentation 2001:db8::/32'),
  url('https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/', 'private_address', 'Teredo 2001::/32'),
  url('https://[2002:7f00:1::]/', 'private_address', '6to4 2002::/16'),
  url('https://[64:ff9b::7f00:1]/', 'private_address', 'NAT64 64:ff9b::/96'),
  url('https://[64:ff9b:1::a00:1]/', 'private_address', 'local NAT64 64:ff9b:1::/48'),
  url('https://[100::1]/', 'private_address', 'discard-only 100::/64 (outside 2000::/3)'),
  // denied_cidr: deny wins over allow and over the public rule
  url('https://8.8.8.8/', 'denied_cidr', 'public address in the deny list', { deny: '8.8.8.0/24' }),
  url('https://134744072/', 'denied_cidr', 'decimal spelling of a denied address', { deny: '8.8.8.8' }),
  url('https://[::ffff:8.8.8.8]/', 'denied_cidr', 'IPv4-mapped spelling of a denied IPv4 address', {
    deny: '8.8.8.8/32',
  }),
  url('https://10.1.2.3/', 'denied_cidr', 'deny wins over allow', {
    allow: '10.0.0.0/8',
    deny: '10.1.0.0/16',
  }),
  url('https://127.0.0.1/', 'denied_cidr', 'denied is named before private', { deny: '127.0.0.1' }),
  url('https://[2606:4700:4700::1111]/', 'denied_cidr', 'public IPv6 in the deny list', {
    deny: '2606:4700::/32',
  }),
  // resolved answers
  dns(['127.0.0.1'], 'private_address', 'name resolving to loopback'),
  dns(['10.0.0.5'], 'private_address', 'name resolving to RFC 1918'),
  dns(['169.254.169.254'], 'private_address', 'name resolving to cloud metadata'),
  dns(['fd00:ec2::254'], 'private_address', 'name resolving to AWS IPv6 metadata'),
  dns(['::1'], 'private_address', 'name resolving to ::1'),
  dns(['::ffff:127.0.0.1'], 'private_address', 'name resolving to IPv4-mapped loopback'),
  dns(['::7f00:1'], 'private_address', 'name resolving to IPv4-compatible loopback'),
  dns(['fe80::1%eth0'], 'private_address', 'name resolving to link-local with a zone id'),
  dns(['0.0.0.0'], 'private_address', 'name resolving to 0.0.0.0'),
  dns(['100.64.1.1'], 'private_address', 'name resolving to CGNAT'),
  dns(['64:ff9b::808:808'], 'private_address', 'name resolving to NAT64'),
  dns(['2002:c000:204::1'], 'private_address', 'name resolving to 6to4'),
  dns(['not-an-address'], 'private_address', 'unparseable answer'),
  dns(['0177.0.0.1'], 'private_address', 'non-canonical answer spelling is not trusted'),
  dns(['8.8.8.8', '10.0.0.1'], 'private_address', 'public then private answer'),
  dns(['10.0.0.1', '8.8.8.8'], 'private_address', 'private then public answer'),
  dns(['2606:4700:4700::1111', 'fc00::1'], 'private_address', 'public then private IPv6 answer'),
  dns(['93.184.215.14', '::ffff:192.168.0.1'], 'private_address', 'public IPv4 and mapped private'),
  dns(
    ['127.0.0.1'],
    'private_address',
    'trailing-dot name resolving to loopback',
    {},
    'https://hooks.example.com./x',
  ),
  dns(
    ['127.0.0.1'],
    'private_address',
    'IDNA name resolving to loopback',
    {},
    'https://b\u00fccher.example/x',
  ),
  dns(['8.8.8.8'], 'denied_cidr', 'answer in the deny list', { deny: '8.8.8.8/32' }),
  dns(['10.0.0.1', '8.8.8.8'], 'denied_cidr', 'denied is named before private across answers', {
    deny: '8.8.8.8',
  }),
  dns(['127.0.0.2', '127.0.0.1'], 'private_address', 'one allowed and one not', { allow: '127.0.0.2/32' }),
];

export const ALLOWED: GuardCase[] = [
  { input: 'https://8.8.8.8/', kind: 'url', note: 'public IPv4' },
  { input: 'https://1.1.1.1:8443/x?y=1', kind: 'url', note: 'public IPv4 with port and query' },
  { input: 'https://134744072/', kind: 'url', note: 'decimal spelling of a public IPv4' },
  { input: 'https://[2606:4700:4700::1111]/', kind: 'url', note: 'public IPv6' },
  { input: 'https://[2001:4860:4860::8888]/', kind: 'url', note: 'public IPv6 in 2001::/16 outside Teredo' },
  { input: 'https://[::ffff:8.8.8.8]/', kind: 'url', note: 'IPv4-mapped public address' },
  { input: 'https://172.32.0.1/', kind: 'url', note: 'just above 172.16/12' },
  { input: 'https://100.128.0.1/', kind: 'url', note: 'just above CGNAT' },
  { input: 'https://192.0.3.1/', kind: 'url', note: 'just above 192.0.2/24' },
  { input: 'https://[2003::1]/', kind: 'url', note: 'just above 2002::/16' },
  { input: 'https://EXAMPLE.com/hook', kind: 'url', note: 'host name (resolved later, not here)' },
  { input: 'https://b\u00fccher.example/', kind: 'url', note: 'IDNA host name' },
  { input: 'https://127.0.0.1/', kind: 'url', allow: '127.0.0.0/8', note: 'allow list lifts loopback' },
  { input: 'https://[::1]/', kind: 'url', allow: '::1', note: 'allow list lifts ::1' },
  {
    input: 'https://[::ffff:10.0.0.1]/',
    kind: 'url',
    allow: '10.0.0.0/8',
    note: 'IPv4 allow list lifts the mapped form',
  },
  { input: 'https://hooks.example.com/a2a', kind: 'dns', answers: ['93.184.215.14'], note: 'public answer' },
  {
    input: 'https://hooks.example.com./a2a',
    kind: 'dns',
    answers: ['93.184.215.14', '2606:2800:21f:cb07:6820:80da:af6b:8b2c'],
    note: 'public IPv4 and IPv6 answers, trailing dot',
  },
  {
    input: 'https://hooks.example.com/a2a',
    kind: 'dns',
    answers: ['10.1.2.3'],
    allow: '10.0.0.0/8',
    note: 'private answer lifted by the allow list',
  },
];
