/**
 * A throwaway CA and a server certificate signed by it, made with the openssl CLI (no extra npm
 * dependency). Cached per process: openssl takes a noticeable fraction of a second per key.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestTls {
  caPem: string;
  certPem: string;
  keyPem: string;
  caFile: string;
}

const BASE_NAMES = [
  'DNS:localhost',
  'DNS:*.example.com',
  'DNS:example.com',
  'DNS:*.example.test',
  'DNS:receiver.test',
  'IP:127.0.0.1',
  'IP:127.0.0.2',
  'IP:::1',
];

const OPENSSL = process.env.OPENSSL ?? 'openssl';
const DAYS = '10';

let ca: { dir: string; caPem: string; caFile: string; caKey: string } | undefined;
const servers = new Map<string, TestTls>();

function openssl(args: string[], cwd: string): void {
  execFileSync(OPENSSL, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

function ensureCa(): NonNullable<typeof ca> {
  if (ca) return ca;
  const dir = mkdtempSync(join(tmpdir(), 'a2a-push-tls-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'ca.key'], dir);
  openssl(
    [
      'req',
      '-x509',
      '-new',
      '-key',
      'ca.key',
      '-sha256',
      '-days',
      DAYS,
      '-subj',
      '/CN=a2a-push test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
      '-out',
      'ca.pem',
    ],
    dir,
  );
  const caFile = join(dir, 'ca.pem');
  ca = { dir, caFile, caPem: readFileSync(caFile, 'utf8'), caKey: join(dir, 'ca.key') };
  return ca;
}

function subjectAltName(name: string): string {
  if (/^(DNS|IP):/.test(name)) return name;
  return /^[\d.]+$/.test(name) || name.includes(':') ? `IP:${name}` : `DNS:${name}`;
}

/** names: extra SANs, as `host`, `1.2.3.4`, or already prefixed (`DNS:x`, `IP:y`). */
export function makeTestTls(opts: { names?: string[] } = {}): TestTls {
  const sans = [...BASE_NAMES, ...(opts.names ?? []).map(subjectAltName)];
  const key = [...new Set(sans)].sort().join(',');
  const cached = servers.get(key);
  if (cached) return cached;

  const authority = ensureCa();
  const id = String(servers.size);
  const dir = authority.dir;
  openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `server${id}.key`], dir);
  openssl(
    ['req', '-new', '-key', `server${id}.key`, '-subj', '/CN=receiver.test', '-out', `server${id}.csr`],
    dir,
  );
  writeFileSync(
    join(dir, `server${id}.ext`),
    [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=serverAuth',
      `subjectAltName=${[...new Set(sans)].join(',')}`,
      '',
    ].join('\n'),
  );
  openssl(
    [
      'x509',
      '-req',
      '-in',
      `server${id}.csr`,
      '-CA',
      authority.caFile,
      '-CAkey',
      authority.caKey,
      '-set_serial',
      `0x${Date.now().toString(16)}${id}`,
      '-sha256',
      '-days',
      DAYS,
      '-extfile',
      `server${id}.ext`,
      '-out',
      `server${id}.pem`,
    ],
    dir,
  );
  const tls: TestTls = {
    caPem: authority.caPem,
    caFile: authority.caFile,
    certPem: readFileSync(join(dir, `server${id}.pem`), 'utf8'),
    keyPem: readFileSync(join(dir, `server${id}.key`), 'utf8'),
  };
  servers.set(key, tls);
  return tls;
}
