// golden_io.mjs - what the Node test scripts share: finding node_modules and onnxruntime-node, a
// build's model file, reading safetensors (with half floats), and a golden case (case.json and
// reference.safetensors) with its steps' id feeds; see tests/golden/README.md for a case's layout.
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

// Command-line options: `options` maps each option to [key, kind], kind 'string', 'number' or
// 'flag' (false unless given). An unknown argument, a missing value, a missing `required` key
// and a negative --atol/--rtol are die(message), with `usage` where it helps.
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

// The transformers.js Auto class that loads a model of an encoder or speech case's task
// (case.json's "task"), or undefined.
export const TJS_AUTO_CLASS = {
  'feature-extraction': 'AutoModel',
  'sequence-classification': 'AutoModelForSequenceClassification',
  'token-classification': 'AutoModelForTokenClassification',
  'fill-mask': 'AutoModelForMaskedLM',
  'ctc': 'AutoModelForCTC',
};
