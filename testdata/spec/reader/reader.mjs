#!/usr/bin/env node
// A reader of idemkey's storage format, Spec 1.0, written from docs/spec.md
// alone (and RFC 8878 for zstd), with Node's standard library only: the
// proof that the specification is complete. It prints what it reads by the
// specification's field names (§13), one JSON object per line.
//
//   node reader.mjs vectors DIR
//       decodes every golden vector of the vector files in DIR
//   node reader.mjs live HOST:PORT '{"prefix": ..., "scope": ..., "key": ...,
//                                    "outcome": "http"|"do"|"grpc", "dictionaries": [FILE...]}'
//       names the record of (prefix, scope, key), reads it and its
//       tombstone from Redis (RESP over TCP) and decodes them
//
// Bytes in the input are a string, or {"hex": "..."}, as in the output.

import { createHash } from 'node:crypto';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import net from 'node:net';
import { decompress, parseDictionary, ZstdError } from './zstd.mjs';

// ---- Errors: every refusal has one of the spec's names (§13).

class Refused extends Error {
  constructor(why, message) {
    super(message || why);
    this.why = why;
  }
}
const refuse = (why, message) => {
  throw new Refused(why, message);
};

// ---- JSON: integers are BigInt and print exactly; bytes follow §13.

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

class Bytes {
  constructor(u8) {
    this.u8 = u8;
  }
}
const hex = (u8) => Buffer.from(u8).toString('hex');
const hexOf = (u8) => ({ hex: hex(u8) });

function bytesView(u8) {
  try {
    return utf8.decode(u8);
  } catch {
    return hexOf(u8);
  }
}

function toJSON(v) {
  if (v === null) return 'null';
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'number') return String(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'string') return JSON.stringify(v);
  if (v instanceof Bytes) return toJSON(bytesView(v.u8));
  if (Array.isArray(v)) return '[' + v.map(toJSON).join(',') + ']';
  return '{' + Object.entries(v).map(([k, x]) => JSON.stringify(k) + ':' + toJSON(x)).join(',') + '}';
}

function bytesIn(v) {
  if (typeof v === 'string') return new Uint8Array(Buffer.from(v, 'utf8'));
  if (v && typeof v.hex === 'string') return new Uint8Array(Buffer.from(v.hex, 'hex'));
  throw new Error('bytes are a string or {"hex": ...}');
}

const ascii = (s) => new Uint8Array(Buffer.from(s, 'latin1'));
const text = (u8) => Buffer.from(u8).toString('latin1');
const cat = (...parts) => new Uint8Array(Buffer.concat(parts.map((p) => Buffer.from(p))));

// ---- Notation (§1).

const TWO63 = 1n << 63n;

// decimal reads 1 to 19 ASCII digits, below 2^63.
function decimalValue(u8) {
  if (u8.length < 1 || u8.length > 19) return null;
  let n = 0n;
  for (const c of u8) {
    if (c < 0x30 || c > 0x39) return null;
    n = n * 10n + BigInt(c - 0x30);
  }
  return n < TWO63 ? n : null;
}

// decimalColon reads "<decimal>:" from u8 at p: [value, next] or null.
function decimalColon(u8, p) {
  const i = u8.indexOf(0x3a, p);
  if (i < 0) return null;
  const n = decimalValue(u8.subarray(p, i));
  return n === null ? null : [n, i + 1];
}

function signedDecimalColon(u8, p) {
  if (u8[p] !== 0x2d) return decimalColon(u8, p);
  const i = u8.indexOf(0x3a, p);
  if (i < 0) return null;
  const digits = u8.subarray(p + 1, i);
  if (digits.length < 1 || digits.length > 19) return null;
  let n = 0n;
  for (const c of digits) {
    if (c < 0x30 || c > 0x39) return null;
    n = n * 10n + BigInt(c - 0x30);
  }
  return n <= TWO63 ? [-n, i + 1] : null;
}

function netstring(u8, p) {
  const d = decimalColon(u8, p);
  if (!d) return null;
  const [n, q] = d;
  if (n > BigInt(u8.length - q)) return null;
  return [u8.subarray(q, q + Number(n)), q + Number(n)];
}

// uvarint: [value, next] or null; values past 2^53 are lengths that run
// past any value, so a Number is exact enough.
function uvarint(u8, p) {
  let v = 0;
  for (let k = 0; k < 10; k++) {
    if (p + k >= u8.length) return null;
    const c = u8[p + k];
    if (k === 9 && c > 1) return null;
    v += (c & 0x7f) * 2 ** (7 * k);
    if (c < 0x80) return [v, p + k + 1];
  }
  return null;
}

// ---- Key names (§4).

const sha256 = (...parts) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return new Uint8Array(h.digest());
};
function uvarintBytes(n) {
  const out = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return new Uint8Array(out);
}
const lenPrefixed = (u8) => cat(uvarintBytes(u8.length), u8);
const base64url = (u8) => Buffer.from(u8).toString('base64url');

function keyNames(prefix, scope, key) {
  const tag = base64url(sha256(lenPrefixed(scope), key).subarray(0, 16));
  const record = cat(prefix, ascii('{' + tag + '}'));
  return {
    tag,
    record,
    tombstone: cat(record, ascii(':t')),
    channel: cat(record, ascii(':w')),
    legacy_lease: cat(record, ascii(':lease')),
  };
}

function derivedKey(prefix, scope, key, step) {
  const sum = sha256(ascii('idemkey derived key\x00'), lenPrefixed(prefix), lenPrefixed(scope), lenPrefixed(key), lenPrefixed(step));
  return base64url(sum.subarray(0, 24));
}

// storedFingerprint is §5.3.
function storedFingerprint(given) {
  return given.length === 16 ? given : sha256(given).subarray(0, 16);
}

// ---- The record (§5).

function parseRecord(v) {
  if (v.length === 0 || (v[0] !== 0x53 && v[0] !== 0x43)) refuse('unknown-version');
  if (v[0] === 0x43) {
    if (v.length < 18) refuse('malformed');
    const a = decimalColon(v, 18);
    if (!a) refuse('malformed');
    const c = signedDecimalColon(v, a[1]);
    if (!c) refuse('malformed');
    return { kind: 'C', flags: v[1], fingerprint: v.subarray(2, 18), attempt: a[0], code: c[0], outcome: v.subarray(c[1]) };
  }
  if (v.length < 26) refuse('malformed');
  const r = { kind: 'S', flags: v[1], fingerprint: v.subarray(2, 18), token: v.subarray(18, 26) };
  let p = 26;
  const next = (f) => {
    const x = f(v, p);
    if (!x) refuse('malformed');
    p = x[1];
    return x[0];
  };
  r.attempt = next(decimalColon);
  r.threshold = next(decimalColon);
  r.recovery_point = next(netstring);
  r.recovery_data = next(netstring);
  r.label = next(netstring);
  const created = decimalValue(v.subarray(p));
  if (created === null) refuse('malformed');
  r.created = created;
  return r;
}

function stateOf(r) {
  if (r.kind === 'C') return 'completed';
  return r.flags === 0x72 ? 'released' : 'started';
}

function recordView(r) {
  const common = { kind: r.kind, state: stateOf(r), flags: new Bytes(Uint8Array.of(r.flags)), fingerprint: hex(r.fingerprint) };
  if (r.kind === 'C') return { ...common, attempt: r.attempt, code: r.code, outcome: new Bytes(r.outcome) };
  return {
    ...common,
    token: hex(r.token),
    attempt: r.attempt,
    threshold: r.threshold,
    recovery_point: new Bytes(r.recovery_point),
    recovery_data: new Bytes(r.recovery_data),
    label: new Bytes(r.label),
    created: r.created,
  };
}

// ---- Tombstones (§7.3).

function tombstoneView(v) {
  const t = decimalValue(v);
  if (t === null || t >= 1n << 50n) refuse('malformed');
  const fp32 = t >> 18n;
  return { fingerprint32: fp32.toString(16).padStart(8, '0'), code: (t >> 8n) & 1023n, attempt: t & 255n };
}

// ---- Stored HTTP responses (§11).

const NAMES = `Content-Type Location Content-Encoding Cache-Control Etag Vary Link Content-Language
Content-Disposition Last-Modified Expires Retry-After X-Request-Id X-Content-Type-Options
Access-Control-Allow-Origin Access-Control-Allow-Credentials Access-Control-Expose-Headers
Strict-Transport-Security Content-Security-Policy X-Frame-Options Referrer-Policy Content-Location
Allow Www-Authenticate Accept-Ranges Content-Range Content-Digest Repr-Digest Pragma X-Correlation-Id
Request-Id Traceparent Server-Timing Preference-Applied Deprecation Sunset Ratelimit-Limit
Ratelimit-Remaining Ratelimit-Reset X-Ratelimit-Limit X-Ratelimit-Remaining X-Ratelimit-Reset
Idempotency-Key X-Version Api-Version`.split(/\s+/);
const VALUES = [
  'application/json', 'application/json; charset=utf-8', 'text/plain; charset=utf-8', 'application/problem+json',
  'application/octet-stream', 'text/html; charset=utf-8', 'application/xml', 'application/xml; charset=utf-8',
  'text/plain', 'text/html', 'application/json;charset=UTF-8', 'application/json; charset=UTF-8',
  'application/problem+json; charset=utf-8', 'application/hal+json', 'application/vnd.api+json',
  'application/x-ndjson', 'text/csv', 'application/pdf', 'image/png', 'gzip', 'br', 'zstd', 'deflate', 'identity',
  'no-store', 'no-cache', 'private', 'no-cache, no-store, must-revalidate', 'private, no-store', 'max-age=0',
  'public', 'Accept-Encoding', 'Origin', 'Accept', 'Authorization', '*', 'true', 'nosniff', 'DENY', 'SAMEORIGIN',
  'bytes', 'none', 'no-referrer', 'strict-origin-when-cross-origin', 'max-age=31536000',
  'max-age=31536000; includeSubDomains', '1', '0',
];
if (NAMES.length !== 45 || VALUES.length !== 48) throw new Error('the tables of §11.3');

// One GiB: the bound of a reader that does not know MaxResponseBytes.
const LIMIT = 1 << 30;

function responseView(b, dictionaries) {
  if (b.length === 0) refuse('malformed');
  if (b[0] === 0x01) {
    if (b.length < 2) refuse('malformed');
    const headers = [];
    let d = uvarint(b, 2);
    if (!d || d[0] > b.length - d[1]) refuse('malformed');
    let p = d[1];
    for (let i = 0; i < d[0]; i++) {
      const field = () => {
        const n = uvarint(b, p);
        if (!n || n[0] > b.length - n[1]) refuse('malformed');
        p = n[1] + n[0];
        return b.subarray(n[1], p);
      };
      const name = field();
      headers.push([new Bytes(name), new Bytes(field())]);
    }
    return { version: 1n, body_omitted: (b[1] & 1) === 1, compressed: false, dictionary_id: 0n, headers, body: new Bytes(b.subarray(p)) };
  }
  if ((b[0] & ~3) !== 0x20) refuse('unknown-version', `first byte 0x${b[0].toString(16)}`);
  let payload = b.subarray(1);
  let dictId = 0;
  const compressed = (b[0] & 2) !== 0;
  if (compressed) {
    try {
      const r = decompress(cat(Uint8Array.of(0x28, 0xb5, 0x2f, 0xfd), payload), dictionaries, LIMIT);
      payload = r.content;
      dictId = r.dictId;
    } catch (e) {
      if (e instanceof ZstdError) refuse(e.kind, e.message);
      throw e;
    }
  }
  const d = uvarint(payload, 0);
  if (!d || d[0] > payload.length - d[1]) refuse('malformed');
  let p = d[1];
  const entry = (table) => {
    const n = uvarint(payload, p);
    if (!n) refuse('malformed');
    if (n[0] % 2 === 0) {
      if (n[0] / 2 >= table.length) refuse('malformed', 'an index past the end of its table');
      p = n[1];
      return ascii(table[n[0] / 2]);
    }
    const len = (n[0] - 1) / 2;
    if (len > payload.length - n[1]) refuse('malformed');
    p = n[1] + len;
    return payload.subarray(n[1], p);
  };
  const headers = [];
  for (let i = 0; i < d[0]; i++) {
    const name = entry(NAMES);
    headers.push([new Bytes(name), new Bytes(entry(VALUES))]);
  }
  return {
    version: 2n,
    body_omitted: (b[0] & 1) === 1,
    compressed,
    dictionary_id: BigInt(dictId),
    headers,
    body: new Bytes(payload.subarray(p)),
  };
}

// ---- Store.Do's and gRPC's outcomes (§10).

function doView(code, b) {
  if (code === 0n) return { result: new Bytes(b) };
  if (code === 1n) return { error: new Bytes(b) };
  refuse('not-do');
}

function grpcView(code, b) {
  if (b.length === 0) refuse('malformed');
  if (b[0] !== 0x01) refuse('unknown-version');
  let p = 1;
  const string = () => {
    const n = uvarint(b, p);
    if (!n || n[0] > b.length - n[1]) refuse('malformed');
    p = n[1] + n[0];
    return b.subarray(n[1], p);
  };
  const md = () => {
    const n = uvarint(b, p);
    if (!n) refuse('malformed');
    p = n[1];
    if (n[0] > b.length - p) refuse('malformed');
    const pairs = [];
    for (let i = 0; i < n[0]; i++) {
      const k = string();
      pairs.push([new Bytes(k), new Bytes(string())]);
    }
    return pairs;
  };
  const type = string();
  const message = string();
  const header = md();
  const trailer = md();
  if (p !== b.length) refuse('malformed');
  if ((code === 0n) !== (type.length > 0) || code < 0n || code > 16n) refuse('malformed');
  return { version: 1n, type: new Bytes(type), message: hex(message), header, trailer };
}

// ---- Script replies (§8), in RESP2.

function parseRESP(b) {
  let p = 0;
  const line = () => {
    const i = b.indexOf(0x0d, p);
    if (i < 0 || b[i + 1] !== 0x0a) throw new Error('not RESP');
    const s = text(b.subarray(p + 1, i));
    const t = b[p];
    p = i + 2;
    return [t, s];
  };
  const one = () => {
    const [t, s] = line();
    if (t === 0x3a) return BigInt(s);
    if (t === 0x24) {
      const n = Number(s);
      const v = b.subarray(p, p + n);
      p += n + 2;
      return v;
    }
    if (t === 0x2a) {
      const out = [];
      for (let i = 0; i < Number(s); i++) out.push(one());
      return out;
    }
    throw new Error('RESP type ' + t);
  };
  const v = one();
  if (p !== b.length) throw new Error('bytes after the reply');
  return v;
}

const isInt = (x) => typeof x === 'bigint';
const isStr = (x) => x instanceof Uint8Array;
const clamp = (n) => (n > 0n ? n : 0n);

function tryRecord(v) {
  try {
    return parseRecord(v);
  } catch (e) {
    if (e instanceof Refused) return null;
    throw e;
  }
}

function claimView(r) {
  if (!Array.isArray(r) || r.length === 0 || !isInt(r[0])) refuse('unknown-reply');
  const status = r[0];
  if (status === 1n && r.length === 3 && isInt(r[1]) && isStr(r[2]) && r[1] >= 0n) {
    if (r[1] === 0n) return { status: 5n }; // legacy.lua: the record went meanwhile
    if (r[2].length === 0) return { status, attempt: r[1], record: null };
    const rec = tryRecord(r[2]);
    if (rec && rec.kind === 'S') return { status, attempt: r[1], record: recordView(rec) };
  }
  if (status === 2n && (r.length === 2 || r.length === 3) && isStr(r[1]) && (r.length === 2 || isInt(r[2]))) {
    const rec = tryRecord(r[1]);
    if (rec && rec.kind === 'C') {
      return { status, attempt: rec.attempt, code: rec.code, outcome: new Bytes(rec.outcome), ttl_ms: r.length === 3 ? clamp(r[2]) : 0n };
    }
  }
  if (status === 7n && r.length === 3 && isInt(r[1]) && isStr(r[2])) return { status, code: r[1], outcome: new Bytes(r[2]) };
  if (status === 3n && r.length === 2 && isInt(r[1])) return { status, lease_left_ms: clamp(r[1]) };
  if (status === 6n && r.length === 3 && isInt(r[1]) && isInt(r[2])) return { status, code: r[1], attempt: r[2] };
  if ((status === 4n || status === 5n) && r.length === 1) return { status };
  refuse('unknown-reply');
}

function ownedView(r) {
  if (r === 1n) return { owned: true };
  if (r === 0n) return { owned: false };
  refuse('unknown-reply');
}

function lookupView(r) {
  if (!Array.isArray(r) || r.length !== 3 || !isInt(r[0]) || !isStr(r[1]) || !isStr(r[2])) refuse('unknown-reply');
  const type = text(r[1]);
  const out = { type, ttl_ms: clamp(r[0]) };
  if (type === 'none' || type === 'hash') return out;
  const rec = tryRecord(r[2]);
  if (!rec) refuse('unknown-reply');
  out.state = stateOf(rec);
  out.lease_ttl_ms = out.state === 'started' ? clamp(r[0] - rec.threshold) : 0n;
  out.record = recordView(rec);
  return out;
}

function forgetView(r) {
  if (!Array.isArray(r) || r.length === 0 || !isInt(r[0])) refuse('unknown-reply');
  const status = r[0];
  if (status === 0n && r.length === 1) return { status };
  if (status === 1n && r.length === 3 && isStr(r[1]) && isInt(r[2])) {
    if (r[1].length === 0) return { status, record: null, lease_left_ms: clamp(r[2]) };
    const rec = tryRecord(r[1]);
    if (rec) return { status, record: recordView(rec), lease_left_ms: clamp(r[2]) };
  }
  if (status === 2n && r.length === 2 && isStr(r[1])) return { status, type: text(r[1]) };
  if (status === 3n && r.length === 2 && isInt(r[1])) return { status, lease_left_ms: clamp(r[1]) };
  refuse('unknown-reply');
}

// ---- The golden vectors.

const FAMILIES = {
  'keys.json': ['record_keys', 'derived_keys', 'fingerprints'],
  'records.json': ['records', 'tombstones'],
  'responses.json': ['responses'],
  'outcomes.json': ['do', 'grpc'],
  'replies.json': ['claim', 'legacy', 'owned', 'lookup', 'forget'],
};

function loadDictionaries(dir, names) {
  const m = new Map();
  for (const name of names || []) {
    const d = parseDictionary(new Uint8Array(readFileSync(join(dir, name))));
    m.set(d.id, d);
  }
  return m;
}

function vectorView(family, v, dicts) {
  const b = () => new Uint8Array(Buffer.from(v.hex || '', 'hex'));
  const code = () => BigInt(v.code);
  const input = v.input || {};
  switch (family) {
    case 'record_keys': {
      const k = keyNames(bytesIn(input.prefix), bytesIn(input.scope), bytesIn(input.key));
      return { tag: k.tag, record: new Bytes(k.record), tombstone: new Bytes(k.tombstone), channel: new Bytes(k.channel), legacy_lease: new Bytes(k.legacy_lease) };
    }
    case 'derived_keys':
      return { derived: derivedKey(bytesIn(input.prefix), bytesIn(input.scope), bytesIn(input.key), bytesIn(input.step)) };
    case 'fingerprints':
      return { stored: hex(storedFingerprint(bytesIn(input.given))) };
    case 'records':
      return recordView(parseRecord(b()));
    case 'tombstones':
      return tombstoneView(b());
    case 'responses':
      return responseView(b(), dicts);
    case 'do':
      return doView(code(), b());
    case 'grpc':
      return grpcView(code(), b());
    case 'claim':
    case 'legacy':
      return claimView(parseRESP(b()));
    case 'owned':
      return ownedView(parseRESP(b()));
    case 'lookup':
      return lookupView(parseRESP(b()));
    case 'forget':
      return forgetView(parseRESP(b()));
  }
  throw new Error('no family ' + family);
}

function viewOrRefusal(f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof Refused) return { refused: e.why };
    throw e;
  }
}

function vectors(dir) {
  for (const [file, families] of Object.entries(FAMILIES)) {
    const path = join(dir, file);
    if (!existsSync(path)) continue;
    const doc = JSON.parse(readFileSync(path, 'utf8'));
    const dicts = loadDictionaries(dir, doc.dictionaries);
    for (const family of families) {
      for (const v of doc[family] || []) {
        const view = viewOrRefusal(() => vectorView(family, v, dicts));
        process.stdout.write(toJSON({ file, family, name: v.name, view }) + '\n');
      }
    }
  }
}

// ---- A live record: RESP over TCP to Redis.

function encodeCommand(args) {
  const parts = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = Buffer.from(a);
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

// replyEnd returns where the reply starting at p ends in b, or -1 if b
// does not hold it all yet.
function replyEnd(b, p) {
  const i = b.indexOf('\r\n', p);
  if (i < 0) return -1;
  const t = String.fromCharCode(b[p]);
  const n = Number(b.subarray(p + 1, i).toString('latin1'));
  if (t === '+' || t === '-' || t === ':') return i + 2;
  if (t === '$') return n < 0 ? i + 2 : i + 2 + n + 2 <= b.length ? i + 2 + n + 2 : -1;
  if (t === '*') {
    let q = i + 2;
    for (let k = 0; k < n; k++) {
      q = replyEnd(b, q);
      if (q < 0) return -1;
    }
    return q;
  }
  throw new Error('RESP type ' + t);
}

function decodeReply(b) {
  const t = String.fromCharCode(b[0]);
  const i = b.indexOf('\r\n');
  const s = b.subarray(1, i).toString('latin1');
  if (t === '+') return s;
  if (t === '-') throw new Error('Redis: ' + s);
  if (t === ':') return BigInt(s);
  if (t === '$') return Number(s) < 0 ? null : new Uint8Array(b.subarray(i + 2, i + 2 + Number(s)));
  throw new Error('unexpected reply ' + t);
}

async function redisCommands(addr, commands) {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))];
  if (host !== '127.0.0.1' && host !== '::1' && host !== 'localhost') throw new Error('loopback only');
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ host, port });
    const timer = setTimeout(() => sock.destroy(new Error('Redis did not answer within 10s')), 10000);
    let buf = Buffer.alloc(0);
    const replies = [];
    sock.on('connect', () => sock.write(Buffer.concat(commands.map(encodeCommand))));
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.length ? replyEnd(buf, 0) : -1;
        if (end < 0) break;
        replies.push(buf.subarray(0, end));
        buf = buf.subarray(end);
      }
      if (replies.length === commands.length) {
        clearTimeout(timer);
        sock.end();
        try {
          resolve(replies.map(decodeReply));
        } catch (e) {
          reject(e);
        }
      }
    });
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

async function live(addr, inputJSON) {
  const input = JSON.parse(inputJSON);
  const names = keyNames(bytesIn(input.prefix), bytesIn(input.scope), bytesIn(input.key));
  const dicts = new Map();
  for (const f of input.dictionaries || []) {
    const d = parseDictionary(new Uint8Array(readFileSync(f)));
    dicts.set(d.id, d);
  }
  const [type] = await redisCommands(addr, [['TYPE', names.record]]);
  const [value, pttl, tomb] = await redisCommands(addr, [
    type === 'string' ? ['GET', names.record] : ['ECHO', ''],
    ['PTTL', names.record],
    ['GET', names.tombstone],
  ]);
  const out = { name: new Bytes(names.record), type, pttl };
  if (type === 'string') {
    out.record = viewOrRefusal(() => recordView(parseRecord(value)));
    const rec = tryRecord(value);
    if (rec) {
      out.lease_ttl_ms = stateOf(rec) === 'started' ? clamp(pttl - rec.threshold) : 0n;
      if (rec.kind === 'C') {
        const decode = { http: () => responseView(rec.outcome, dicts), do: () => doView(rec.code, rec.outcome), grpc: () => grpcView(rec.code, rec.outcome) }[input.outcome];
        if (decode) out.outcome = viewOrRefusal(decode);
      }
    }
  }
  out.tombstone = tomb === null ? null : viewOrRefusal(() => tombstoneView(tomb));
  process.stdout.write(toJSON(out) + '\n');
}

// ---- Main.

const [cmd, ...args] = process.argv.slice(2);
try {
  if (cmd === 'vectors' && args.length === 1) {
    vectors(args[0]);
  } else if (cmd === 'live' && args.length === 2) {
    await live(args[0], args[1]);
  } else {
    process.stderr.write('usage: node reader.mjs vectors DIR | live HOST:PORT INPUT-JSON\n');
    process.exit(2);
  }
} catch (e) {
  process.stderr.write(`reader: ${e.stack || e}\n`);
  process.exit(1);
}
