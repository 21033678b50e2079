/**
 * No way out of the process except src/outbound (contract §4: "every outside URL goes through one
 * guard and one HTTP client").
 *
 * Every source file under src/ (src/outbound/ excepted) is parsed with the TypeScript compiler and
 * checked for anything that can open a connection: imports of undici and other HTTP/socket
 * packages, the client parts of node:http/https/net/tls, node:dgram and node:http2, child_process
 * running curl/wget, the global fetch/WebSocket/XMLHttpRequest/EventSource, and @a2a-js/sdk clients
 * built without our guarded fetch. A parser rather than a regex, so that `import net from 'net';
 * net.connect()`, `require('node:https').get`, `globalThis.fetch` and `{ fetch }` are all seen, and
 * `client.fetch()`, `http.Server` as a type or a comment are not.
 *
 * The legitimate uses that exist are listed in ALLOWANCES, each with its file and a reason; an
 * allowance that no longer matches anything fails too, so the list cannot silently grow stale.
 * The eslint rule in eslint.config.mjs says the same for imports and the global fetch; this test
 * also covers what that rule cannot see (default and namespace imports used as `net.connect`,
 * bare `net`/`tls` specifiers, require(), globalThis.fetch, dgram, http2, child processes).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const ROOT = path.resolve(__dirname, '..', '..');
const SRC = path.join(ROOT, 'src');
const OUTBOUND = path.join(SRC, 'outbound');

// ---------------------------------------------------------------------------------------------
// What counts as a way out
// ---------------------------------------------------------------------------------------------

/** Packages whose every value import is a way out (HTTP, WebSocket and socket clients). */
const CLIENT_PACKAGES = new Set([
  'undici',
  'dgram',
  'http2',
  'ws',
  'axios',
  'node-fetch',
  'got',
  'superagent',
  'supertest',
  'request',
  'needle',
  'cross-fetch',
  'isomorphic-fetch',
  'eventsource',
  'socket.io-client',
]);

/** Node modules with both client members (a way out) and server members (listeners, allowed by name). */
const MEMBERS: Record<string, { client: readonly string[]; server: readonly string[] }> = {
  http: {
    client: ['request', 'get', 'Agent', 'globalAgent', 'ClientRequest'],
    server: ['createServer', 'Server'],
  },
  https: { client: ['request', 'get', 'Agent', 'globalAgent'], server: ['createServer', 'Server'] },
  net: { client: ['connect', 'createConnection', 'Socket', 'Stream'], server: ['createServer', 'Server'] },
  tls: { client: ['connect', 'TLSSocket', 'createSecurePair'], server: ['createServer', 'Server'] },
};

const GLOBAL_CLIENTS = new Set(['fetch', 'WebSocket', 'XMLHttpRequest', 'EventSource']);
const GLOBAL_OBJECTS = new Set(['globalThis', 'global', 'window', 'self']);
/** Commands that a child process could use to reach out. */
const NETWORK_COMMAND = /(^|[\s/'"`;|&(])(curl|wget|nc|ncat|socat|telnet)(\.exe)?($|[\s'"`;|&)])/;
/** @a2a-js/sdk classes that fetch with the global fetch unless given `fetchImpl`. */
const SDK_FETCH_TAKERS = new Set([
  'JsonRpcTransportFactory',
  'RestTransportFactory',
  'DefaultAgentCardResolver',
  'JsonRpcTransport',
  'RestTransport',
]);

/**
 * The legitimate uses that exist. Each names its file, the module member it uses and why it is not
 * a way out.
 */
const ALLOWANCES: ReadonlyArray<{ file: string; module: string; member: string; reason: string }> = [
  {
    file: 'src/services.ts',
    module: 'http',
    member: 'createServer',
    reason: 'our own listeners: the management API, and the inbox when it has no TLS certificate',
  },
  {
    file: 'src/services.ts',
    module: 'https',
    member: 'createServer',
    reason: 'our own listener: the inbox over TLS',
  },
  {
    file: 'src/embedded/postgres.ts',
    module: 'net',
    member: 'connect',
    reason:
      'isPortOpen() probes whether the embedded Postgres already listens on 127.0.0.1 (checked below: ' +
      'every caller uses its loopback default)',
  },
];

// ---------------------------------------------------------------------------------------------
// The scanner
// ---------------------------------------------------------------------------------------------

interface Finding {
  /** path relative to the repository, forward slashes */
  file: string;
  line: number;
  /** for module members: the module (without `node:`) and the member */
  module?: string;
  member?: string;
  what: string;
}

const show = (f: Finding): string => `${f.file}:${f.line}: ${f.what}`;

/** `node:http` → `http`, `undici/types` → `undici`, `@a2a-js/sdk/client` → `@a2a-js/sdk`; relative → null. */
function packageOf(spec: string): string | null {
  if (spec.startsWith('.') || spec.startsWith('/')) return null;
  const s = spec.startsWith('node:') ? spec.slice(5) : spec;
  const parts = s.split('/');
  return s.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? s);
}

const isWatched = (pkg: string | null): pkg is string =>
  pkg !== null && (CLIENT_PACKAGES.has(pkg) || pkg in MEMBERS || pkg === 'child_process');

function isTypePosition(node: ts.Node): boolean {
  for (let n: ts.Node | undefined = node.parent; n !== undefined; n = n.parent) {
    if (ts.isExpressionWithTypeArguments(n)) {
      // `class X extends http.Agent` is a value; `implements` and interface `extends` are types.
      const clause = n.parent;
      return !(
        ts.isHeritageClause(clause) &&
        clause.token === ts.SyntaxKind.ExtendsKeyword &&
        ts.isClassLike(clause.parent)
      );
    }
    if (ts.isTypeNode(n)) return true;
    if (ts.isStatement(n) || ts.isSourceFile(n)) return false;
  }
  return false;
}

/** The identifier names something declared right here (a local binding of that name). */
function isDeclarationName(id: ts.Identifier): boolean {
  const p = id.parent;
  return (
    ((ts.isVariableDeclaration(p) ||
      ts.isParameter(p) ||
      ts.isFunctionDeclaration(p) ||
      ts.isFunctionExpression(p) ||
      ts.isClassDeclaration(p) ||
      ts.isClassExpression(p) ||
      ts.isImportClause(p) ||
      ts.isNamespaceImport(p) ||
      ts.isImportEqualsDeclaration(p) ||
      ts.isEnumDeclaration(p) ||
      ts.isModuleDeclaration(p)) &&
      p.name === id) ||
    (ts.isBindingElement(p) && p.name === id) ||
    (ts.isImportSpecifier(p) && p.name === id)
  );
}

/** The identifier is a reference to a binding, not a property name or a label. */
function isReference(id: ts.Identifier): boolean {
  const p = id.parent;
  if (ts.isPropertyAccessExpression(p) && p.name === id) return false;
  if (ts.isQualifiedName(p) && p.right === id) return false;
  if (
    (ts.isPropertyAssignment(p) ||
      ts.isPropertyDeclaration(p) ||
      ts.isPropertySignature(p) ||
      ts.isMethodDeclaration(p) ||
      ts.isMethodSignature(p) ||
      ts.isGetAccessor(p) ||
      ts.isSetAccessor(p) ||
      ts.isEnumMember(p)) &&
    p.name === id
  )
    return false;
  if (ts.isBindingElement(p) && p.propertyName === id) return false;
  if ((ts.isImportSpecifier(p) || ts.isExportSpecifier(p)) && p.propertyName === id) return false;
  if (ts.isLabeledStatement(p) || ts.isBreakOrContinueStatement(p)) return false;
  return true;
}

const stringValue = (n: ts.Node | undefined): string | undefined =>
  n !== undefined && (ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n)) ? n.text : undefined;

const hasProperty = (obj: ts.ObjectLiteralExpression, name: string): boolean =>
  obj.properties.some(
    (p) =>
      (ts.isPropertyAssignment(p) || ts.isShorthandPropertyAssignment(p) || ts.isMethodDeclaration(p)) &&
      p.name !== undefined &&
      (ts.isIdentifier(p.name) || ts.isStringLiteral(p.name)) &&
      p.name.text === name,
  );

function scriptKind(file: string): ts.ScriptKind {
  if (/\.[cm]?js$/.test(file)) return ts.ScriptKind.JS;
  if (file.endsWith('.tsx')) return ts.ScriptKind.TSX;
  return ts.ScriptKind.TS;
}

/** Every import of a module in the file: `import`, `import =`, `export … from`, require(), import(). */
function importsOf(file: string, text: string): Array<{ spec: string; line: number }> {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, scriptKind(file));
  const out: Array<{ spec: string; line: number }> = [];
  const lineOf = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const visit = (node: ts.Node): void => {
    let spec: string | undefined;
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node))
      spec = stringValue(node.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference))
      spec = stringValue(node.moduleReference.expression);
    else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === 'require'))
    )
      spec = stringValue(node.arguments[0]);
    if (spec !== undefined) out.push({ spec, line: lineOf(node) });
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return out;
}

/** The ways out in one file (allowances not applied). */
function scanSource(file: string, text: string): Finding[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, scriptKind(file));
  const findings: Finding[] = [];
  const lineOf = (n: ts.Node) => sf.getLineAndCharacterOfPosition(n.getStart(sf)).line + 1;
  const add = (n: ts.Node, what: string, module?: string, member?: string): void => {
    findings.push({
      file,
      line: lineOf(n),
      what,
      ...(module !== undefined ? { module } : {}),
      ...(member !== undefined ? { member } : {}),
    });
  };

  /** A local name bound to a whole watched module (default, namespace or require()). */
  const bindings = new Map<string, { pkg: string; decl: ts.Identifier }>();
  const identifiers: ts.Identifier[] = [];
  const declared = new Set<string>();
  let usesChildProcess = false;
  let usesSdk = false;
  const strings: ts.Node[] = [];
  const sdkNews: ts.NewExpression[] = [];

  const member = (pkg: string, name: string, at: ts.Node, how: string): void => {
    const m = MEMBERS[pkg];
    if (!m) return;
    if (m.client.includes(name)) add(at, `${how} ${pkg}.${name}: an outbound connection`, pkg, name);
    else if (m.server.includes(name)) add(at, `${how} ${pkg}.${name} (a listener)`, pkg, name);
  };

  const wholeModule = (pkg: string, spec: string, at: ts.Node, how: string): boolean => {
    if (pkg === 'child_process') usesChildProcess = true;
    if (CLIENT_PACKAGES.has(pkg)) {
      add(at, `${how} '${spec}': a network client`, pkg, '*');
      return true;
    }
    return false;
  };

  /** What is done with the result of require('<watched>'). */
  const requireUse = (call: ts.CallExpression, pkg: string, spec: string): void => {
    if (wholeModule(pkg, spec, call, 'require of')) return;
    if (!(pkg in MEMBERS)) return;
    let p: ts.Node = call.parent;
    while (ts.isParenthesizedExpression(p) || ts.isAsExpression(p) || ts.isNonNullExpression(p)) p = p.parent;
    if (ts.isVariableDeclaration(p) && ts.isIdentifier(p.name))
      bindings.set(p.name.text, { pkg, decl: p.name });
    else if (ts.isVariableDeclaration(p) && ts.isObjectBindingPattern(p.name)) destructure(p.name, pkg);
    else if (ts.isPropertyAccessExpression(p)) member(pkg, p.name.text, p, 'uses');
    else if (ts.isElementAccessExpression(p) && stringValue(p.argumentExpression) !== undefined)
      member(pkg, stringValue(p.argumentExpression)!, p, 'uses');
    else add(call, `require('${spec}') used in a way whose members cannot be checked`, pkg, '?');
  };

  const destructure = (pattern: ts.ObjectBindingPattern, pkg: string): void => {
    for (const el of pattern.elements) {
      const key = el.propertyName ?? el.name;
      if (el.dotDotDotToken || !(ts.isIdentifier(key) || ts.isStringLiteral(key)))
        add(el, `destructuring of ${pkg} whose members cannot be checked`, pkg, '?');
      else member(pkg, key.text, el, 'destructures');
    }
  };

  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      const spec = stringValue(node.moduleSpecifier) ?? '';
      const pkg = packageOf(spec);
      if (pkg === '@a2a-js/sdk') usesSdk = true;
      const clause = node.importClause;
      if (isWatched(pkg) && !clause?.isTypeOnly) {
        const named =
          clause?.namedBindings && ts.isNamedImports(clause.namedBindings) ? clause.namedBindings : null;
        const valueNames = named?.elements.filter((e) => !e.isTypeOnly) ?? [];
        const anyValue = !clause || clause.name || (clause.namedBindings && !named) || valueNames.length > 0;
        if (anyValue && !wholeModule(pkg, spec, node, 'import of') && pkg in MEMBERS) {
          if (clause?.name) bindings.set(clause.name.text, { pkg, decl: clause.name });
          if (clause?.namedBindings && ts.isNamespaceImport(clause.namedBindings))
            bindings.set(clause.namedBindings.name.text, { pkg, decl: clause.namedBindings.name });
          for (const e of valueNames) {
            const name = (e.propertyName ?? e.name).text;
            if (name === 'default') bindings.set(e.name.text, { pkg, decl: e.name });
            else member(pkg, name, e, 'imports');
          }
        }
      }
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      const spec = stringValue(node.moduleReference.expression) ?? '';
      const pkg = packageOf(spec);
      if (isWatched(pkg) && !node.isTypeOnly && !wholeModule(pkg, spec, node, 'import of') && pkg in MEMBERS)
        bindings.set(node.name.text, { pkg, decl: node.name });
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier) {
      const spec = stringValue(node.moduleSpecifier) ?? '';
      const pkg = packageOf(spec);
      if (isWatched(pkg) && !node.isTypeOnly && !wholeModule(pkg, spec, node, 're-export of')) {
        if (node.exportClause && ts.isNamedExports(node.exportClause)) {
          for (const e of node.exportClause.elements)
            if (!e.isTypeOnly) member(pkg, (e.propertyName ?? e.name).text, e, 're-exports');
        } else add(node, `re-export of all of '${spec}'`, pkg, '*');
      }
    } else if (ts.isCallExpression(node)) {
      const isRequire = ts.isIdentifier(node.expression) && node.expression.text === 'require';
      const isImport = node.expression.kind === ts.SyntaxKind.ImportKeyword;
      if (isRequire || isImport) {
        const spec = stringValue(node.arguments[0]);
        const pkg = spec === undefined ? null : packageOf(spec);
        if (spec === undefined) add(node, `${isRequire ? 'require' : 'import'}() of a computed module name`);
        else if (isWatched(pkg)) {
          if (isRequire) requireUse(node, pkg, spec);
          else if (!wholeModule(pkg, spec, node, 'dynamic import of') && pkg in MEMBERS)
            add(node, `dynamic import of '${spec}' (its members cannot be checked)`, pkg, '?');
        }
        if (pkg === '@a2a-js/sdk') usesSdk = true;
      }
    } else if (ts.isPropertyAccessExpression(node) || ts.isElementAccessExpression(node)) {
      const name = ts.isPropertyAccessExpression(node)
        ? node.name.text
        : stringValue(node.argumentExpression);
      if (
        name !== undefined &&
        GLOBAL_CLIENTS.has(name) &&
        ts.isIdentifier(node.expression) &&
        GLOBAL_OBJECTS.has(node.expression.text)
      )
        add(node, `${node.expression.text}.${name}: the unguarded global ${name}`);
      if (
        name === 'default' &&
        ts.isIdentifier(node.expression) &&
        node.expression.text === 'AgentCardResolver'
      )
        add(node, 'AgentCardResolver.default of @a2a-js/sdk fetches with the global fetch');
    } else if (ts.isNewExpression(node)) {
      sdkNews.push(node);
    } else if (ts.isIdentifier(node)) {
      identifiers.push(node);
      if (isDeclarationName(node)) declared.add(node.text);
    }
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node) || ts.isTemplateExpression(node))
      strings.push(node);
    ts.forEachChild(node, visit);
  };
  visit(sf);

  // Whole-module bindings: every use must be a member we can name.
  for (const [name, { pkg, decl }] of bindings) {
    for (const id of identifiers) {
      if (id.text !== name || id === decl || !isReference(id) || isDeclarationName(id) || isTypePosition(id))
        continue;
      const p = id.parent;
      if (ts.isPropertyAccessExpression(p) && p.expression === id) member(pkg, p.name.text, p, 'uses');
      else if (ts.isElementAccessExpression(p) && p.expression === id) {
        const key = stringValue(p.argumentExpression);
        if (key === undefined) add(p, `${name}[…] on ${pkg} with a computed member`, pkg, '?');
        else member(pkg, key, p, 'uses');
      } else if (ts.isVariableDeclaration(p) && p.initializer === id && ts.isObjectBindingPattern(p.name))
        destructure(p.name, pkg);
      else add(id, `${name} (the ${pkg} module) used as a value: its members cannot be checked`, pkg, '?');
    }
  }

  // The global clients, unless the file declares its own binding of that name.
  for (const id of identifiers) {
    if (!GLOBAL_CLIENTS.has(id.text) || declared.has(id.text)) continue;
    if (!isReference(id) || isDeclarationName(id) || isTypePosition(id)) continue;
    const p = id.parent;
    const how = ts.isNewExpression(p)
      ? `new ${id.text}`
      : ts.isCallExpression(p) && p.expression === id
        ? `${id.text}(`
        : id.text;
    add(id, `${how}: the unguarded global ${id.text}`);
  }

  if (usesChildProcess) {
    for (const s of strings) {
      const t = s.getText(sf);
      if (NETWORK_COMMAND.test(t)) add(s, `child process command ${t.slice(0, 60)}: a network tool`);
    }
  }

  if (usesSdk) {
    for (const n of sdkNews) {
      if (!ts.isIdentifier(n.expression)) continue;
      const cls = n.expression.text;
      const arg = n.arguments?.[0];
      if (SDK_FETCH_TAKERS.has(cls)) {
        if (!(arg && ts.isObjectLiteralExpression(arg) && hasProperty(arg, 'fetchImpl')))
          add(n, `new ${cls} without { fetchImpl }: @a2a-js/sdk would use the global fetch`);
      } else if (cls === 'A2AClient') {
        add(
          n,
          'new A2AClient: the legacy @a2a-js/sdk client; build clients through ClientFactory with fetchImpl',
        );
      } else if (cls === 'ClientFactory') {
        // The options must replace both default transports and the default card resolver.
        let opts: ts.Expression | undefined = arg;
        if (
          opts &&
          ts.isCallExpression(opts) &&
          ts.isPropertyAccessExpression(opts.expression) &&
          opts.expression.name.text === 'createFrom'
        )
          opts = opts.arguments[1];
        if (!(
          opts &&
          ts.isObjectLiteralExpression(opts) &&
          hasProperty(opts, 'transports') &&
          hasProperty(opts, 'cardResolver')
        ))
          add(
            n,
            'new ClientFactory without its own transports and cardResolver: @a2a-js/sdk defaults use the global fetch',
          );
      }
    }
  }
  return findings;
}

// ---------------------------------------------------------------------------------------------
// The tree
// ---------------------------------------------------------------------------------------------

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (/\.([cm]?[tj]s|tsx)$/.test(e.name)) out.push(p);
  }
  return out.sort();
}

const rel = (p: string): string => path.relative(ROOT, p).split(path.sep).join('/');
const ALL = sourceFiles(SRC);
const SCANNED = ALL.filter((f) => !f.startsWith(OUTBOUND + path.sep));
const read = (f: string): string => fs.readFileSync(f, 'utf8');

const isAllowed = (f: Finding): boolean =>
  ALLOWANCES.some((a) => a.file === f.file && a.module === f.module && a.member === f.member);

describe('no way out of the process except src/outbound', () => {
  const findings = SCANNED.flatMap((f) => scanSource(rel(f), read(f)));

  it('scans the whole source tree', () => {
    expect(SCANNED.length).toBeGreaterThan(20);
    expect(SCANNED.map(rel)).toEqual(
      expect.arrayContaining(['src/services.ts', 'src/activities/delivery.ts', 'src/a2a/remote.ts']),
    );
    expect(SCANNED.map(rel).filter((f) => f.startsWith('src/outbound/'))).toEqual([]);
  });

  it('no file outside src/outbound opens a connection, the listed allowances aside', () => {
    expect(findings.filter((f) => !isAllowed(f)).map(show)).toEqual([]);
  });

  it('every allowance still matches a use (no stale entries)', () => {
    const stale = ALLOWANCES.filter(
      (a) => !findings.some((f) => f.file === a.file && f.module === a.module && f.member === a.member),
    );
    expect(stale.map((a) => `${a.file}: ${a.module}.${a.member} (${a.reason})`)).toEqual([]);
  });

  it('src/outbound/http.ts is the only file that imports undici', () => {
    const importers = ALL.flatMap((f) =>
      importsOf(rel(f), read(f))
        .filter((i) => packageOf(i.spec) === 'undici')
        .map((i) => `${rel(f)}:${i.line}: imports '${i.spec}'`),
    );
    expect(importers.length).toBeGreaterThan(0);
    expect(importers.filter((i) => !i.startsWith('src/outbound/http.ts:'))).toEqual([]);
  });

  it('the allowed net.connect (isPortOpen) only ever probes its loopback default', () => {
    const file = path.join(SRC, 'embedded', 'postgres.ts');
    const sf = ts.createSourceFile(file, read(file), ts.ScriptTarget.Latest, true);
    let defaultHost: string | undefined;
    const find = (n: ts.Node): void => {
      if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && n.name.text === 'isPortOpen') {
        const fn = n.initializer;
        if (fn && ts.isArrowFunction(fn)) {
          const host = fn.parameters.find((p) => ts.isIdentifier(p.name) && p.name.text === 'host');
          defaultHost = stringValue(host?.initializer);
        }
      }
      ts.forEachChild(n, find);
    };
    find(sf);
    expect(defaultHost).toBe('127.0.0.1');
    // Every call, anywhere in src/, passes the port only.
    const calls: string[] = [];
    for (const f of ALL) {
      const s = ts.createSourceFile(f, read(f), ts.ScriptTarget.Latest, true, scriptKind(f));
      const walk = (n: ts.Node): void => {
        if (ts.isCallExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'isPortOpen') {
          const line = s.getLineAndCharacterOfPosition(n.getStart(s)).line + 1;
          calls.push(`${rel(f)}:${line}: ${n.arguments.length} argument(s)`);
        }
        ts.forEachChild(n, walk);
      };
      walk(s);
    }
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.filter((c) => !c.endsWith(': 1 argument(s)'))).toEqual([]);
  });

  it('the eslint rule is in force for src/ and lifted only for src/outbound', () => {
    const eslint = path.join(ROOT, 'node_modules', 'eslint', 'bin', 'eslint.js');
    const configOf = (file: string) =>
      JSON.parse(
        execFileSync(process.execPath, [eslint, '--print-config', file], { cwd: ROOT }).toString(),
      ) as {
        rules: Record<string, unknown>;
      };
    const inSrc = configOf('src/api/configs.ts').rules;
    expect(JSON.stringify(inSrc['no-restricted-imports'])).toMatch(/^\[2,.*"name":"undici"/);
    expect(JSON.stringify(inSrc['no-restricted-globals'])).toMatch(/^\[2,.*"name":"fetch"/);
    const inOutbound = configOf('src/outbound/http.ts').rules;
    expect(inOutbound['no-restricted-imports']).toBeUndefined();
  }, 30_000);
});

// ---------------------------------------------------------------------------------------------
// The scanner itself: what it must find, and what it must not
// ---------------------------------------------------------------------------------------------

describe('the scanner', () => {
  const scan = (text: string) => scanSource('src/x.ts', text);

  it.each([
    ["import { request } from 'node:http';", 'http.request'],
    ["import { get as g } from 'https';", 'https.get'],
    ["import http from 'node:http';\nhttp.request('https://x');", 'http.request'],
    ["import * as https from 'node:https';\nhttps.get('https://x');", 'https.get'],
    ["import net from 'net';\nnet.connect(1);", 'net.connect'],
    ["import { createConnection } from 'node:net';", 'net.createConnection'],
    ["import net from 'node:net';\nnew net.Socket();", 'net.Socket'],
    ["import tls from 'tls';\ntls.connect(443, 'x');", 'tls.connect'],
    ["import https from 'https';\nnew https.Agent();", 'https.Agent'],
    ["import http from 'http';\nconst { request } = http;", 'http.request'],
    ["import http from 'http';\nhttp['get']('x');", 'http.get'],
    ["import http from 'http';\nuse(http);", 'used as a value'],
    ["const { request } = require('node:https');", 'https.request'],
    ["require('node:https').get('x');", 'https.get'],
    ["const net = require('net');\nnet.connect(1);", 'net.connect'],
    ["import { Agent } from 'undici';", "'undici'"],
    ["import 'undici';", "'undici'"],
    ["const u = require('undici');", "'undici'"],
    ["export { request } from 'undici';", "'undici'"],
    ["export { connect } from 'node:tls';", 'tls.connect'],
    ["void import('undici');", "'undici'"],
    ["void import('node:http');", 'dynamic import'],
    ["const m = 'ht' + 'tp';\nrequire(m);", 'computed module name'],
    ["import dgram from 'node:dgram';", "'node:dgram'"],
    ["import { connect } from 'node:http2';", "'node:http2'"],
    ["import axios from 'axios';", "'axios'"],
    ["import { spawn } from 'node:child_process';\nspawn('curl', ['https://x']);", 'network tool'],
    ["import { execSync } from 'child_process';\nexecSync(`wget -q ${u}`);", 'network tool'],
    ["import cp from 'child_process';\ncp.exec('/usr/bin/curl https://x');", 'network tool'],
    ["fetch('https://x');", 'fetch('],
    ["await fetch(new Request('https://x'));", 'fetch('],
    ['const f = fetch;', 'global fetch'],
    ['make({ fetch });', 'global fetch'],
    ['make({ fetchImpl: fetch });', 'global fetch'],
    ["globalThis.fetch('https://x');", 'globalThis.fetch'],
    ["globalThis['fetch']('https://x');", 'globalThis.fetch'],
    ["new WebSocket('wss://x');", 'new WebSocket'],
    ['const x = new XMLHttpRequest();', 'XMLHttpRequest'],
    ["new EventSource('https://x');", 'EventSource'],
    [
      "import { RestTransportFactory } from '@a2a-js/sdk/client';\nnew RestTransportFactory();",
      'without { fetchImpl }',
    ],
    [
      "import { DefaultAgentCardResolver } from '@a2a-js/sdk/client';\nnew DefaultAgentCardResolver({});",
      'without { fetchImpl }',
    ],
    ["import { ClientFactory } from '@a2a-js/sdk/client';\nnew ClientFactory();", 'ClientFactory'],
    [
      "import { ClientFactory, ClientFactoryOptions as O } from '@a2a-js/sdk/client';\nnew ClientFactory(O.createFrom(O.default, { transports: [] }));",
      'ClientFactory',
    ],
    [
      "import { AgentCardResolver } from '@a2a-js/sdk/client';\nuse(AgentCardResolver.default);",
      'AgentCardResolver.default',
    ],
  ])('finds %j (%s)', (text, what) => {
    const found = scan(text);
    expect(found.map(show).join('\n')).toContain(what);
    expect(found.every((f) => f.file === 'src/x.ts' && f.line >= 1)).toBe(true);
  });

  it('names the line', () => {
    expect(scan("import x from './x';\n\n// fetch('a')\nconst y = 1;\nfetch('b');").map(show)).toEqual([
      'src/x.ts:5: fetch(: the unguarded global fetch',
    ]);
  });

  it.each([
    ["import type { Dispatcher } from 'undici';", 'a type-only import'],
    ["import { type Dispatcher } from 'undici';", 'type-only named imports'],
    ["await client.fetch('https://x');", 'a method named fetch'],
    ["const o = { fetch: guarded };\no.fetch('x');", 'a property named fetch'],
    ['type F = typeof fetch;\nlet g: F;', 'fetch in a type'],
    [
      "import type { OutboundClient } from './outbound';\ntype F = OutboundClient['fetch'];",
      'an indexed type',
    ],
    ["import { fetch } from './outbound';\nfetch('x');", 'a local fetch'],
    ["// fetch('https://x') and http.request\nconst s = 'use fetch( or curl';", 'comments and strings'],
    [
      "import http from 'node:http';\nexport function f(): http.Server { return null!; }",
      'http.Server as a type',
    ],
    ["import { isIP } from 'node:net';\nisIP('::1');", 'a harmless net member'],
    ["import { rootCertificates } from 'node:tls';", 'a harmless tls member'],
    [
      "import { spawn } from 'node:child_process';\nspawn(process.execPath, ['x.js']);",
      'a child process that is not a network tool',
    ],
    ['const t = deps.http.request;', 'a property named http'],
    [
      "import { RestTransportFactory, JsonRpcTransportFactory, ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver } from '@a2a-js/sdk/client';\n" +
        'const r = new DefaultAgentCardResolver({ fetchImpl });\n' +
        'new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {\n' +
        '  transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],\n' +
        '  cardResolver: r,\n}));',
      'the SDK built on our fetch',
    ],
  ])('does not flag %j (%s)', (text) => {
    expect(scan(text).map(show)).toEqual([]);
  });

  it('reports server members so that they need an allowance', () => {
    expect(scan("import http from 'node:http';\nhttp.createServer();")).toEqual([
      expect.objectContaining({ line: 2, module: 'http', member: 'createServer' }),
    ]);
  });
});
