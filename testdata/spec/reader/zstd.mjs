// A Zstandard decoder (RFC 8878), for the stored responses of docs/spec.md
// §11.2: one frame, with or without a dictionary. Node's standard library
// has no zstd before Node 22, so the reader carries its own. It is written
// for clarity, not speed: stored responses are small.

export class ZstdError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind; // 'malformed' or 'unknown-dictionary'
  }
}

const malformed = (msg) => new ZstdError('malformed', msg);

const FRAME_MAGIC = 0xfd2fb528;
const DICT_MAGIC = 0xec30a437;
const MAX_BLOCK = 128 << 10;

function u32(b, p) {
  if (p + 4 > b.length) throw malformed('truncated');
  return (b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (b[p + 3] << 24)) >>> 0;
}

function highBit(x) {
  return 31 - Math.clz32(x);
}

// BackwardBits reads a bitstream from its end (RFC 8878 §4.1): the last
// byte's highest set bit marks where the data ends; reads go towards the
// first byte. Past the start it gives zeros, and overflowed() tells.
class BackwardBits {
  constructor(b, start, end) {
    if (end <= start || b[end - 1] === 0) throw malformed('bitstream without its end mark');
    this.b = b;
    this.start = start;
    this.pos = (end - start - 1) * 8 + highBit(b[end - 1]);
  }
  bitsAt(pos, n) {
    let v = 0;
    for (let k = n - 1; k >= 0; k--) {
      const i = pos + k;
      const bit = i < 0 ? 0 : (this.b[this.start + (i >> 3)] >> (i & 7)) & 1;
      v = v * 2 + bit;
    }
    return v;
  }
  read(n) {
    if (n === 0) return 0;
    this.pos -= n;
    return this.bitsAt(this.pos, n);
  }
  peek(n) {
    return this.bitsAt(this.pos - n, n);
  }
  skip(n) {
    this.pos -= n;
  }
  overflowed() {
    return this.pos < 0;
  }
  done() {
    return this.pos === 0;
  }
}

// ForwardBits reads bits from the first byte on, least significant first
// (the FSE table descriptions, §4.1.1).
class ForwardBits {
  constructor(b, start, end) {
    this.b = b;
    this.start = start;
    this.end = end;
    this.pos = 0;
  }
  read(n) {
    let v = 0;
    for (let k = 0; k < n; k++) {
      const i = this.pos + k;
      const at = this.start + (i >> 3);
      if (at >= this.end) throw malformed('table description past its end');
      v += ((this.b[at] >> (i & 7)) & 1) * 2 ** k;
    }
    this.pos += n;
    return v;
  }
  peek(n) {
    const save = this.pos;
    let v = 0;
    for (let k = 0; k < n; k++) {
      const i = this.pos + k;
      const at = this.start + (i >> 3);
      if (at < this.end) v += ((this.b[at] >> (i & 7)) & 1) * 2 ** k;
    }
    this.pos = save;
    return v;
  }
  bytes() {
    return Math.ceil(this.pos / 8);
  }
}

// readCounts reads an FSE table description (§4.1.1): the normalized
// counts of each symbol, -1 for "less than one".
function readCounts(b, start, end, maxSymbol, maxLog) {
  const r = new ForwardBits(b, start, end);
  const log = r.read(4) + 5;
  if (log > maxLog) throw malformed(`FSE accuracy log ${log} over ${maxLog}`);
  let remaining = (1 << log) + 1;
  let threshold = 1 << log;
  let nbBits = log + 1;
  const counts = [];
  let previousZero = false;
  while (remaining > 1 && counts.length <= maxSymbol) {
    if (previousZero) {
      for (;;) {
        const repeat = r.read(2);
        for (let k = 0; k < repeat; k++) counts.push(0);
        if (repeat !== 3) break;
      }
      if (counts.length > maxSymbol) break;
    }
    const max = 2 * threshold - 1 - remaining;
    let count;
    const low = r.peek(nbBits - 1);
    if (low < max) {
      count = low;
      r.read(nbBits - 1);
    } else {
      count = r.read(nbBits);
      if (count >= threshold) count -= max;
    }
    count -= 1;
    remaining -= Math.abs(count);
    counts.push(count);
    previousZero = count === 0;
    while (remaining < threshold) {
      nbBits--;
      threshold >>= 1;
    }
  }
  if (remaining !== 1 || counts.length > maxSymbol + 1) throw malformed('FSE counts do not add up');
  return { counts, log, size: r.bytes() };
}

// fseTable builds an FSE decoding table (§4.1.1) from normalized counts.
function fseTable(counts, log) {
  const size = 1 << log;
  const symbol = new Array(size);
  const next = [];
  let high = size - 1;
  let sum = 0;
  counts.forEach((c, s) => {
    if (c === -1) {
      symbol[high--] = s;
      next[s] = 1;
      sum += 1;
    } else {
      next[s] = c;
      sum += c;
    }
  });
  if (sum !== size) throw malformed('FSE counts do not fill the table');
  const step = (size >> 1) + (size >> 3) + 3;
  let pos = 0;
  counts.forEach((c, s) => {
    for (let k = 0; k < c; k++) {
      symbol[pos] = s;
      do pos = (pos + step) & (size - 1);
      while (pos > high);
    }
  });
  if (pos !== 0) throw malformed('FSE spread did not come round');
  const table = new Array(size);
  for (let u = 0; u < size; u++) {
    const s = symbol[u];
    const n = next[s]++;
    const bits = log - highBit(n);
    table[u] = { symbol: s, bits, base: (n << bits) - size };
  }
  return { table, log };
}

function rleTable(s) {
  return { table: [{ symbol: s, bits: 0, base: 0 }], log: 0 };
}

// The predefined distributions (§3.1.1.3.2.2).
const LL_DEFAULT = fseTable(
  [4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1],
  6,
);
const ML_DEFAULT = fseTable(
  [
    1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1,
  ],
  6,
);
const OF_DEFAULT = fseTable(
  [1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1],
  5,
);

// Literals length and match length codes (§3.1.1.3.2.1.1).
const LL_BASE = [
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024,
  2048, 4096, 8192, 16384, 32768, 65536,
];
const LL_BITS = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const ML_BASE = [];
const ML_BITS = [];
for (let c = 0; c < 32; c++) {
  ML_BASE.push(c + 3);
  ML_BITS.push(0);
}
ML_BASE.push(35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051, 4099, 8195, 16387, 32771, 65539);
ML_BITS.push(1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);

// huffmanTable reads a Huffman tree description (§4.2.1) at b[p] and
// returns the decoding table and the bytes it took.
function huffmanTable(b, p, end) {
  if (p >= end) throw malformed('no Huffman tree description');
  const header = b[p];
  let weights = [];
  let size;
  if (header < 128) {
    size = 1 + header;
    if (p + size > end) throw malformed('Huffman weights past the end');
    const { counts, log, size: n } = readCounts(b, p + 1, p + size, 255, 6);
    const { table } = fseTable(counts, log);
    const r = new BackwardBits(b, p + 1 + n, p + size);
    let s1 = r.read(log);
    let s2 = r.read(log);
    for (;;) {
      if (weights.length > 255) throw malformed('too many Huffman weights');
      weights.push(table[s1].symbol);
      s1 = table[s1].base + r.read(table[s1].bits);
      if (r.overflowed()) {
        weights.push(table[s2].symbol);
        break;
      }
      weights.push(table[s2].symbol);
      s2 = table[s2].base + r.read(table[s2].bits);
      if (r.overflowed()) {
        weights.push(table[s1].symbol);
        break;
      }
    }
  } else {
    const n = header - 127;
    size = 1 + Math.ceil(n / 2);
    if (p + size > end) throw malformed('Huffman weights past the end');
    for (let i = 0; i < n; i++) {
      const byte = b[p + 1 + (i >> 1)];
      weights.push(i % 2 === 0 ? byte >> 4 : byte & 15);
    }
  }
  if (weights.length > 255) throw malformed('too many Huffman weights');
  let total = 0;
  for (const w of weights) {
    if (w > 11) throw malformed('Huffman weight over 11');
    if (w > 0) total += 1 << (w - 1);
  }
  if (total === 0) throw malformed('Huffman weights all zero');
  const maxBits = highBit(total) + 1;
  const left = (1 << maxBits) - total;
  if (left & (left - 1)) throw malformed('Huffman weights do not complete a tree');
  weights.push(highBit(left) + 1);
  if (maxBits > 11) throw malformed('Huffman code over 11 bits');
  const rankStart = new Array(maxBits + 2).fill(0);
  const rankCount = new Array(maxBits + 2).fill(0);
  for (const w of weights) rankCount[w]++;
  let next = 0;
  for (let w = 1; w <= maxBits; w++) {
    rankStart[w] = next;
    next += rankCount[w] << (w - 1);
  }
  const table = new Array(1 << maxBits);
  weights.forEach((w, symbol) => {
    if (w === 0) return;
    const len = 1 << (w - 1);
    for (let u = rankStart[w]; u < rankStart[w] + len; u++) table[u] = { symbol, bits: maxBits + 1 - w };
    rankStart[w] += len;
  });
  return { huffman: { table, maxBits }, size };
}

function huffmanStream(b, start, end, huffman, count, out) {
  const r = new BackwardBits(b, start, end);
  for (let i = 0; i < count; i++) {
    const e = huffman.table[r.peek(huffman.maxBits)];
    out.push(e.symbol);
    r.skip(e.bits);
  }
  if (!r.done()) throw malformed('Huffman stream not used up');
}

// literals decodes a block's literals section (§3.1.1.3.1).
function literals(b, p, end, st) {
  const b0 = b[p];
  const type = b0 & 3;
  const format = (b0 >> 2) & 3;
  if (type <= 1) {
    let n;
    let h;
    if (format === 0 || format === 2) {
      n = b0 >> 3;
      h = 1;
    } else if (format === 1) {
      n = (b0 >> 4) + (b[p + 1] << 4);
      h = 2;
    } else {
      n = (b0 >> 4) + (b[p + 1] << 4) + (b[p + 2] << 12);
      h = 3;
    }
    if (n > MAX_BLOCK) throw malformed('literals over 128 KiB');
    if (type === 0) {
      if (p + h + n > end) throw malformed('raw literals past the end');
      return { lits: Array.from(b.subarray(p + h, p + h + n)), next: p + h + n };
    }
    if (p + h >= end) throw malformed('RLE literals past the end');
    return { lits: new Array(n).fill(b[p + h]), next: p + h + 1 };
  }
  const h = [3, 3, 4, 5][format];
  const bits = [10, 10, 14, 18][format];
  const streams = format === 0 ? 1 : 4;
  if (p + h > end) throw malformed('literals header past the end');
  let v = 0;
  for (let k = h - 1; k >= 0; k--) v = v * 256 + b[p + k];
  const regen = Math.floor(v / 16) % 2 ** bits;
  const comp = Math.floor(v / 2 ** (4 + bits)) % 2 ** bits;
  if (regen > MAX_BLOCK) throw malformed('literals over 128 KiB');
  let q = p + h;
  const stop = q + comp;
  if (stop > end) throw malformed('compressed literals past the end');
  if (type === 2) {
    const t = huffmanTable(b, q, stop);
    st.huffman = t.huffman;
    q += t.size;
  } else if (!st.huffman) {
    throw malformed('treeless literals without a previous table');
  }
  const out = [];
  if (streams === 1) {
    huffmanStream(b, q, stop, st.huffman, regen, out);
  } else {
    if (q + 6 > stop) throw malformed('no jump table');
    const s1 = b[q] | (b[q + 1] << 8);
    const s2 = b[q + 2] | (b[q + 3] << 8);
    const s3 = b[q + 4] | (b[q + 5] << 8);
    q += 6;
    const s4 = stop - q - s1 - s2 - s3;
    if (s4 <= 0) throw malformed('jump table past the end');
    const seg = Math.floor((regen + 3) / 4);
    if (regen - 3 * seg < 0) throw malformed('literals too short for four streams');
    huffmanStream(b, q, q + s1, st.huffman, seg, out);
    huffmanStream(b, q + s1, q + s1 + s2, st.huffman, seg, out);
    huffmanStream(b, q + s1 + s2, q + s1 + s2 + s3, st.huffman, seg, out);
    huffmanStream(b, q + s1 + s2 + s3, stop, st.huffman, regen - 3 * seg, out);
  }
  return { lits: out, next: stop };
}

// sequenceTable reads one of a sequences section's three table modes.
function sequenceTable(mode, b, p, end, maxSymbol, maxLog, predefined, previous) {
  switch (mode) {
    case 0:
      return { t: predefined, size: 0 };
    case 1:
      if (p >= end) throw malformed('RLE symbol past the end');
      if (b[p] > maxSymbol) throw malformed('RLE symbol out of range');
      return { t: rleTable(b[p]), size: 1 };
    case 2: {
      const { counts, log, size } = readCounts(b, p, end, maxSymbol, maxLog);
      return { t: fseTable(counts, log), size };
    }
    default:
      if (!previous) throw malformed('repeat mode without a previous table');
      return { t: previous, size: 0 };
  }
}

// block decodes a compressed block (§3.1.1.3) onto out.
function block(b, p, end, st, out) {
  const { lits, next } = literals(b, p, end, st);
  p = next;
  if (p >= end) throw malformed('no sequences section');
  let n = b[p];
  if (n === 0) {
    p += 1;
    if (p !== end) throw malformed('bytes after an empty sequences section');
    for (const c of lits) out.push(c);
    return;
  } else if (n < 128) {
    p += 1;
  } else if (n < 255) {
    n = ((n - 128) << 8) + b[p + 1];
    p += 2;
  } else {
    n = b[p + 1] + (b[p + 2] << 8) + 0x7f00;
    p += 3;
  }
  if (p >= end) throw malformed('no compression modes');
  const modes = b[p++];
  if (modes & 3) throw malformed('reserved bits in the compression modes');
  let r = sequenceTable(modes >> 6, b, p, end, 35, 9, LL_DEFAULT, st.ll);
  st.ll = r.t;
  p += r.size;
  r = sequenceTable((modes >> 4) & 3, b, p, end, 31, 8, OF_DEFAULT, st.of);
  st.of = r.t;
  p += r.size;
  r = sequenceTable((modes >> 2) & 3, b, p, end, 52, 9, ML_DEFAULT, st.ml);
  st.ml = r.t;
  p += r.size;

  const bits = new BackwardBits(b, p, end);
  let ll = bits.read(st.ll.log);
  let of = bits.read(st.of.log);
  let ml = bits.read(st.ml.log);
  let li = 0;
  for (let i = 0; i < n; i++) {
    const ofCode = st.of.table[of].symbol;
    const llCode = st.ll.table[ll].symbol;
    const mlCode = st.ml.table[ml].symbol;
    if (ofCode > 31) throw malformed('offset code over 31');
    const offsetValue = 2 ** ofCode + bits.read(ofCode);
    const matchLen = ML_BASE[mlCode] + bits.read(ML_BITS[mlCode]);
    const litLen = LL_BASE[llCode] + bits.read(LL_BITS[llCode]);
    let offset;
    const rep = st.rep;
    if (offsetValue > 3) {
      offset = offsetValue - 3;
      st.rep = [offset, rep[0], rep[1]];
    } else {
      const idx = offsetValue - 1 + (litLen === 0 ? 1 : 0);
      if (idx === 0) {
        offset = rep[0];
      } else if (idx === 1) {
        offset = rep[1];
        st.rep = [rep[1], rep[0], rep[2]];
      } else if (idx === 2) {
        offset = rep[2];
        st.rep = [rep[2], rep[0], rep[1]];
      } else {
        offset = rep[0] - 1;
        st.rep = [offset, rep[0], rep[1]];
      }
    }
    if (li + litLen > lits.length) throw malformed('a sequence past the literals');
    for (let k = 0; k < litLen; k++) out.push(lits[li++]);
    if (offset <= 0 || offset > out.length) throw malformed('an offset before the start');
    if (out.length + matchLen > st.limit) throw malformed('more than the frame holds');
    const from = out.length - offset;
    for (let k = 0; k < matchLen; k++) out.push(out[from + k]);
    if (i !== n - 1) {
      ll = st.ll.table[ll].base + bits.read(st.ll.table[ll].bits);
      ml = st.ml.table[ml].base + bits.read(st.ml.table[ml].bits);
      of = st.of.table[of].base + bits.read(st.of.table[of].bits);
    }
  }
  if (!bits.done()) throw malformed('sequences bitstream not used up');
  while (li < lits.length) out.push(lits[li++]);
}

// parseDictionary reads a zstd dictionary (RFC 8878 §5).
export function parseDictionary(b) {
  if (b.length < 8 || u32(b, 0) !== DICT_MAGIC) throw malformed('not a zstd dictionary');
  const id = u32(b, 4);
  if (id === 0) throw malformed('a dictionary with ID 0');
  let p = 8;
  const st = {};
  const h = huffmanTable(b, p, b.length);
  st.huffman = h.huffman;
  p += h.size;
  let r = readCounts(b, p, b.length, 31, 8);
  st.of = fseTable(r.counts, r.log);
  p += r.size;
  r = readCounts(b, p, b.length, 52, 9);
  st.ml = fseTable(r.counts, r.log);
  p += r.size;
  r = readCounts(b, p, b.length, 35, 9);
  st.ll = fseTable(r.counts, r.log);
  p += r.size;
  const rep = [u32(b, p), u32(b, p + 4), u32(b, p + 8)];
  p += 12;
  const content = Array.from(b.subarray(p));
  if (rep.some((o) => o === 0 || o > content.length)) throw malformed('dictionary repeat offsets out of range');
  return { id, huffman: st.huffman, of: st.of, ml: st.ml, ll: st.ll, rep, content };
}

// decompress decodes one zstd frame, magic number included, which must be
// all of b: the frame must state its content size, at most limit bytes.
// dictionaries maps IDs to parsed dictionaries. It returns the content and
// the frame's dictionary ID (0 for none).
export function decompress(b, dictionaries, limit) {
  if (u32(b, 0) !== FRAME_MAGIC) throw malformed('not a zstd frame');
  let p = 4;
  if (p >= b.length) throw malformed('no frame header');
  const fhd = b[p++];
  const fcsFlag = fhd >> 6;
  const single = (fhd >> 5) & 1;
  if (fhd & 8) throw malformed('reserved bit set');
  const checksum = (fhd >> 2) & 1;
  const dictFlag = fhd & 3;
  if (!single) p++; // the window descriptor: a single frame's content bounds the window anyway
  let dictId = 0;
  const dictSize = [0, 1, 2, 4][dictFlag];
  for (let k = dictSize - 1; k >= 0; k--) dictId = dictId * 256 + b[p + k];
  p += dictSize;
  const fcsSize = [single ? 1 : 0, 2, 4, 8][fcsFlag];
  if (fcsSize === 0) throw malformed('the frame does not state its content size');
  if (p + fcsSize > b.length) throw malformed('frame header cut short');
  let size = 0;
  for (let k = fcsSize - 1; k >= 0; k--) size = size * 256 + b[p + k];
  if (fcsSize === 2) size += 256;
  p += fcsSize;
  if (size > limit) throw malformed(`the frame states ${size} bytes, over ${limit}`);
  const st = { rep: [1, 4, 8], limit: size };
  let out = [];
  let history = 0;
  if (dictId !== 0) {
    const d = dictionaries.get(dictId);
    if (!d) throw new ZstdError('unknown-dictionary', `compressed with dictionary ${dictId}, which this reader does not hold`);
    Object.assign(st, { huffman: d.huffman, of: d.of, ml: d.ml, ll: d.ll, rep: [...d.rep] });
    out = [...d.content];
    history = out.length;
    st.limit += history;
  }
  for (;;) {
    if (p + 3 > b.length) throw malformed('block header cut short');
    const h = b[p] | (b[p + 1] << 8) | (b[p + 2] << 16);
    p += 3;
    const last = h & 1;
    const type = (h >> 1) & 3;
    const n = h >>> 3;
    if (n > MAX_BLOCK) throw malformed('block over 128 KiB');
    if (type === 0) {
      if (p + n > b.length) throw malformed('raw block cut short');
      for (let k = 0; k < n; k++) out.push(b[p + k]);
      p += n;
    } else if (type === 1) {
      if (p >= b.length) throw malformed('RLE block cut short');
      for (let k = 0; k < n; k++) out.push(b[p]);
      p += 1;
    } else if (type === 2) {
      if (p + n > b.length) throw malformed('compressed block cut short');
      block(b, p, p + n, st, out);
      p += n;
    } else {
      throw malformed('reserved block type');
    }
    if (out.length > st.limit) throw malformed('more than the frame states');
    if (last) break;
  }
  if (checksum) p += 4; // not verified: idemkey never writes one
  if (p !== b.length) throw malformed('bytes after the frame');
  if (out.length - history !== size) throw malformed('the frame holds another size than it states');
  return { content: Uint8Array.from(out.slice(history)), dictId };
}
