// golden_io.mjs - what the Node test scripts share: finding node_modules and onnxruntime-node, a
// build's model file, reading safetensors (with half floats), a golden case (case.json and
// reference.safetensors) with its steps' id feeds, and reference tensors fed to a graph's inputs
// and compared with its outputs (component_parity.mjs, seq2seq_parity.mjs); see
// tests/golden/README.md for a case's layout.
//
// A function that meets a usage or I/O error calls fail(message), which must not return: each
// script passes its own die(), which prints "<script>: error: message" and exits with status 2.
import { createRequire } from 'module';
import { pathToFileURL } from 'url';
import fs from 'fs';
import path from 'path';

// The node_modules folder of each base (a base may be one already), empty bases left out.
export function nodeModulesDirs(bases) {
  return bases.filter(Boolean)
    .map((b) => (path.basename(b) === 'node_modules' ? b : path.join(b, 'node_modules')));
}

// @huggingface/transformers (its Node entry) from the first of `bases`' node_modules that has it;
// null when none does.
export async function importTransformersJs(bases) {
  for (const dir of nodeModulesDirs(bases)) {
    const pkgFile = path.join(dir, '@huggingface', 'transformers', 'package.json');
    if (!fs.existsSync(pkgFile)) continue;
    const pkg = JSON.parse(fs.readFileSync(pkgFile, 'utf8'));
    const entry = pkg.exports?.node?.import?.default ?? './dist/transformers.node.mjs';
    return import(pathToFileURL(path.join(dir, '@huggingface', 'transformers', entry)).href);
  }
  return null;
}

// onnxruntime-node from the working folder's node_modules, else NODE_PATH's.
export function loadOrt(fail) {
  const bases = [process.cwd(), ...(process.env.NODE_PATH || '').split(':').filter(Boolean)];
  for (const dir of nodeModulesDirs(bases)) {
    try {
      return createRequire(path.join(dir, 'noop.js'))(path.join(dir, 'onnxruntime-node'));
    } catch (e) { /* next place */ }
  }
  fail(`onnxruntime-node not found in ${bases.join(', ')}`);
}

// The model file: the path itself, or model.onnx (else the only *.onnx) in a folder.
export function modelFile(p, fail) {
  if (!fs.existsSync(p)) fail(`no model at ${p}`);
  if (!fs.statSync(p).isDirectory()) return p;
  if (fs.existsSync(path.join(p, 'model.onnx'))) return path.join(p, 'model.onnx');
  // transformers.js's layout: the graph in onnx/.
  if (fs.existsSync(path.join(p, 'onnx')) && fs.statSync(path.join(p, 'onnx')).isDirectory()) p = path.join(p, 'onnx');
  const onnx = fs.readdirSync(p).filter((f) => f.endsWith('.onnx'));
  // A folder of several graphs (a zero-shot model's text_model, vision_model and model): the
  // one named model, at whatever dtype suffix.
  const main = onnx.filter((f) => /^model(_[a-z0-9]+)?\.onnx$/.test(f));
  if (onnx.length > 1 && main.length === 1) return path.join(p, main[0]);
  if (onnx.length !== 1) fail(`${p}: expected model.onnx or exactly one *.onnx file, found ${onnx.length}`);
  return path.join(p, onnx[0]);
}

// An IEEE half (f16), given as its 16 bits, as a number.
export function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
const bf16View = new DataView(new ArrayBuffer(4));
function bf16ToFloat(h) {
  bf16View.setUint32(0, h << 16, true);
  return bf16View.getFloat32(0, true);
}

// The safetensors dtypes read here: bytes per element, and the typed array of a copy of the bytes.
export const DTYPE_SIZE = { F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1 };
const TYPED = {
  F32: (b) => new Float32Array(b),
  F64: (b) => new Float64Array(b),
  F16: (b) => Float32Array.from(new Uint16Array(b), halfToFloat),
  BF16: (b) => Float32Array.from(new Uint16Array(b), bf16ToFloat),
  I64: (b) => new BigInt64Array(b),
  I32: (b) => new Int32Array(b),
  I16: (b) => new Int16Array(b),
  I8: (b) => new Int8Array(b),
  U8: (b) => new Uint8Array(b),
  BOOL: (b) => new Uint8Array(b),
};

// Every tensor of a safetensors file as [name, {dtype, shape, bytes}], bytes a Buffer into the file.
export function safetensorsEntries(file, fail) {
  const buf = fs.readFileSync(file);
  if (buf.length < 8) fail(`${file}: too short for a safetensors file`);
  const n = Number(buf.readBigUInt64LE(0));
  if (n > buf.length - 8) fail(`${file}: header length ${n} exceeds the file`);
  let header;
  try {
    header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  } catch (e) {
    fail(`${file}: header is not valid JSON (${e.message})`);
  }
  const base = 8 + n;
  const entries = [];
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const size = DTYPE_SIZE[t.dtype];
    if (!size) fail(`${file}: tensor '${name}' has unsupported dtype ${t.dtype}`);
    const [begin, end] = t.data_offsets;
    const count = t.shape.reduce((x, y) => x * y, 1);
    if (end < begin || base + end > buf.length || end - begin !== count * size)
      fail(`${file}: tensor '${name}' has bad offsets [${begin}, ${end})`);
    entries.push([name, { dtype: t.dtype, shape: t.shape, bytes: buf.subarray(base + begin, base + end) }]);
  }
  return entries;
}

// name -> {shape, data}: data a typed array (Float32Array for F16 and BF16).
export function readSafetensors(file, fail) {
  const tensors = {};
  for (const [name, { dtype, shape, bytes }] of safetensorsEntries(file, fail)) {
    // A copy, so that the typed array is aligned whatever the offset.
    const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);
    tensors[name] = { shape, data: TYPED[dtype](copy) };
  }
  return tensors;
}

// A golden case: case.json's steps and tolerance, and reference.safetensors, checked to hold
// s.input_ids, s.attention_mask, s.position_ids and s.logits for every step s.
export function loadCase(caseDir, fail) {
  const caseFile = path.join(caseDir, 'case.json');
  if (!fs.existsSync(caseFile)) fail(`no case.json in ${caseDir}`);
  let spec;
  try {
    spec = JSON.parse(fs.readFileSync(caseFile, 'utf8'));
  } catch (e) {
    fail(`${caseFile}: ${e.message}`);
  }
  const refFile = path.join(caseDir, 'reference.safetensors');
  if (!fs.existsSync(refFile)) fail(`no reference.safetensors in ${caseDir}`);
  const ref = readSafetensors(refFile, fail);
  const steps = spec.steps || [];
  if (!steps.length) fail(`${caseFile}: no steps`);
  for (const s of steps)
    for (const k of ['input_ids', 'attention_mask', 'position_ids', 'logits'])
      if (!ref[`${s}.${k}`]) fail(`${refFile}: no tensor '${s}.${k}'`);
  return { steps, ref, atol: Number(spec.atol) || 0, rtol: Number(spec.rtol) || 0 };
}

// A step's input_ids, attention_mask and position_ids, for those the model takes (inputs: name ->
// input metadata), in the integer type it declares. Throws on a type other than int64 or int32.
export function idFeeds(ort, inputs, ref, step) {
  const feeds = {};
  for (const k of ['input_ids', 'attention_mask', 'position_ids']) {
    if (!inputs[k]) continue;
    const t = ref[`${step}.${k}`], type = inputs[k].type;
    if (type === 'int64') feeds[k] = new ort.Tensor('int64', BigInt64Array.from(t.data), t.shape);
    else if (type === 'int32') feeds[k] = new ort.Tensor('int32', Int32Array.from(t.data, (v) => Number(v)), t.shape);
    else throw new Error(`ids declared as ${type}; expected int64 or int32`);
  }
  return feeds;
}

// float32 -> IEEE half bits, rounding to nearest even (what a float16 graph input takes).
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
function floatToHalf(v) {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);  // inf, nan
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;  // overflow: inf
  if (e <= 0) {  // subnormal half (or zero)
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1), half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;  // may carry into the exponent: correct
  return sign | h;
}

// The reference tensor `t` ({shape, data}) as an ort.Tensor of the model input's type.
export function feedFor(ort, meta, t) {
  const n = t.data.length;
  const num = (v) => (typeof v === 'bigint' ? Number(v) : v);
  const isInt = t.data instanceof BigInt64Array || t.data instanceof Int32Array ||
                t.data instanceof Int16Array || t.data instanceof Int8Array;
  switch (meta.type) {
    case 'int64': return new ort.Tensor('int64', BigInt64Array.from(t.data, (v) => BigInt(Math.round(num(v)))), t.shape);
    case 'int32': return new ort.Tensor('int32', Int32Array.from(t.data, (v) => Math.round(num(v))), t.shape);
    case 'float32': return new ort.Tensor('float32', Float32Array.from(t.data, num), t.shape);
    case 'float64': return new ort.Tensor('float64', Float64Array.from(t.data, num), t.shape);
    case 'float16': {
      const bits = new Uint16Array(n);
      for (let i = 0; i < n; ++i) bits[i] = floatToHalf(num(t.data[i]));
      return new ort.Tensor('float16', bits, t.shape);
    }
    case 'bool': return new ort.Tensor('bool', Uint8Array.from(t.data, (v) => (num(v) ? 1 : 0)), t.shape);
    default:
      throw new Error(`input '${meta.name}' has type ${meta.type}, which this harness does not feed` +
                      (isInt ? ' (the reference is integer)' : ''));
  }
}

// An output tensor's values as numbers.
export function asFloat(t) {
  if (t.type === 'float32' || t.type === 'float64') return t.data;
  if (t.type === 'float16') {
    const d = t.data;
    return d instanceof Uint16Array ? Float32Array.from(d, halfToFloat) : Float32Array.from(d);
  }
  if (t.type === 'int64') return Float64Array.from(t.data, (v) => Number(v));
  if (['int32', 'int16', 'int8', 'uint8', 'bool'].includes(t.type)) return Float64Array.from(t.data, Number);
  throw new Error(`dtype ${t.type} cannot be compared`);
}

// The multi-dimensional index of flat position i in a tensor of `shape`.
function unflatten(i, shape) {
  const idx = new Array(shape.length);
  for (let d = shape.length - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i = Math.floor(i / shape[d]);
  }
  return idx;
}

// Output `name` (an ort.Tensor) against its reference `expected` ({shape, data}, named `refName`):
// every element must satisfy |got - expected| <= atol + rtol * |expected|. `mask` (the reference
// attention_mask, [batch, seq], or null): per-token positions where it is 0 are skipped. Returns
// {output, reference, pass, compared, bad, maxAbs, worst (the worst |diff| / tolerance), where
// (index, onnx, expected of the worst), error (a shape mismatch, nothing compared)}.
export function compare(name, refName, got, expected, atol, rtol, mask) {
  const r = { output: name, reference: refName, pass: false, compared: 0, bad: 0, maxAbs: 0, worst: 0, where: null };
  const shape = expected.shape;
  if (got.dims.length !== shape.length || got.dims.some((d, i) => d !== shape[i])) {
    r.error = `shape [${got.dims}] != expected [${shape}]`;
    return r;
  }
  const g = asFloat(got), e = expected.data;
  const perToken = mask && shape.length >= 3 && shape[0] === mask.shape[0] && shape[1] === mask.shape[1];
  const inner = perToken ? shape.slice(2).reduce((a, b) => a * b, 1) : 1;
  let worstAt = -1, worstRatio = -1;
  for (let i = 0; i < e.length; ++i) {
    if (perToken && Number(mask.data[Math.floor(i / inner)]) === 0) continue;
    const x = Number(g[i]), y = Number(e[i]);
    const d = Math.abs(x - y);
    const tol = atol + rtol * Math.abs(y);
    r.compared++;
    const ratio = Number.isNaN(d) ? Infinity : tol > 0 ? d / tol : (d > 0 ? Infinity : 0);
    if (!(d <= tol)) r.bad++;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      worstAt = i;
    }
    if (!(d <= r.maxAbs)) r.maxAbs = Number.isNaN(d) ? Infinity : d;
  }
  r.worst = worstRatio;
  if (worstAt >= 0)
    r.where = { index: unflatten(worstAt, shape), onnx: Number(g[worstAt]), expected: Number(e[worstAt]) };
  r.pass = r.bad === 0 && r.compared > 0;
  if (r.compared === 0) r.error = 'empty output: nothing to compare';
  return r;
}

// Command-line options: `options` maps each option to [key, kind], kind 'string', 'number' or
// 'flag' (false unless given). An unknown argument, a missing value, a missing `required` key
// and a negative --atol/--rtol are die(message), with `usage` where it helps.
// Ends a harness: one line per result of `report` (the worst element of a failing comparison),
// `notes` after them, the report as JSON on stdout with --json (the lines then go to stderr), and
// the summary `<title>: N passed, M failed`; exits 1 when a result failed. `label(r)` names a
// result; `line(r)`, when it returns a string, stands for a result that is not a comparison.
export function finishReport(report, args, title, label, line = () => null, notes = []) {
  let passed = 0, failed = 0;
  const say = (text) => (args.json ? process.stderr : process.stdout).write(text + '\n');
  for (const r of report.results) {
    r.pass ? passed++ : failed++;
    if (args.json) continue;
    const name = label(r);
    if (r.error) {
      say(`${name}: FAIL: ${r.error}`);
      continue;
    }
    const own = line(r);
    if (own !== null) {
      say(`${name}: ${own}`);
      continue;
    }
    const w = r.where;
    const at = w ? ` worst at [${w.index.join(', ')}]: onnx ${w.onnx} expected ${w.expected}` : '';
    say(`${name}: ${r.pass ? 'PASS' : 'FAIL'}: max |diff| ${r.maxAbs.toExponential(3)};${at}; ` +
        `${r.compared} values (atol ${report.atol}, rtol ${report.rtol})`);
    if (!r.pass) say(`${name}: ${r.bad} values out of tolerance; worst is ${r.worst.toFixed(2)}x the tolerance`);
  }
  if (!args.json) for (const n of notes) say(n);
  if (args.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
  say(`${title}: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

export function parseOptions(argv, options, required, usage, die) {
  const a = {};
  for (const [key, kind] of Object.values(options)) if (kind === 'flag') a[key] = false;
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    if (!Object.hasOwn(options, k)) die(`unknown argument '${k}' (${usage})`);
    const [key, kind] = options[k];
    if (kind === 'flag') {
      a[key] = true;
      continue;
    }
    if (i + 1 >= argv.length) die(`${k} needs a value`);
    const v = argv[++i];
    a[key] = kind === 'number' ? Number(v) : v;
  }
  if (required.some((k) => a[k] === undefined)) die(usage);
  for (const t of ['atol', 'rtol'])
    if (a[t] !== undefined && !(a[t] >= 0)) die(`--${t} must be a non-negative number`);
  return a;
}

// The transformers.js Auto class that loads a model of an encoder, speech or encoder-decoder
// case's task (case.json's "task"), or undefined.
export const TJS_AUTO_CLASS = {
  'feature-extraction': 'AutoModel',
  'sequence-classification': 'AutoModelForSequenceClassification',
  'token-classification': 'AutoModelForTokenClassification',
  'fill-mask': 'AutoModelForMaskedLM',
  'ctc': 'AutoModelForCTC',
  'text2text-generation': 'AutoModelForSeq2SeqLM',
  'speech-to-text': 'AutoModelForSpeechSeq2Seq',
};
