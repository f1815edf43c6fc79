#!/usr/bin/env node
// generate.mjs - greedy text generation with a model built by mobius, in onnxruntime-node (CPU).
//
//   node examples/generate.mjs --model OUT_DIR [--prompt "1,5,9"] [--max-new-tokens 8]
//
// Works on token ids (the demo checkpoint has no tokenizer). It runs the prompt once (prefill, empty
// cache), then one token at a time, feeding every present.X output back as past_key_values.X: the
// I/O contract of tests/golden/README.md. Stops early at config.json's eos_token_id.
// onnxruntime-node is resolved from ./node_modules in the current directory, then NODE_PATH.
// Exit status: 0 done; 1 the model failed to load or run; 2 usage or I/O error.

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const USAGE = 'usage: node examples/generate.mjs --model OUT_DIR [--prompt "1,5,9"] [--max-new-tokens 8]';

class UsageError extends Error {}

function die(msg, code) {
  process.stderr.write(`generate: error: ${msg}\n`);
  process.exit(code);
}

function parseIntArg(name, s, min) {
  if (!/^\d+$/.test(s)) throw new UsageError(`${name} needs an integer >= ${min}, got '${s}'`);
  const n = Number(s);
  if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`${name} needs an integer >= ${min}, got '${s}'`);
  return n;
}

function parseArgs(argv) {
  const a = { model: null, prompt: '1', maxNew: 8 };
  for (let i = 0; i < argv.length; i++) {
    let k = argv[i];
    let v = null;
    const eq = k.indexOf('=');
    if (k.startsWith('--') && eq > 0) { v = k.slice(eq + 1); k = k.slice(0, eq); }
    if (k === '-h' || k === '--help') {
      process.stdout.write(USAGE + '\n');
      process.exit(0);
    }
    if (!['--model', '--prompt', '--max-new-tokens'].includes(k)) throw new UsageError(`unknown argument '${argv[i]}'; ${USAGE}`);
    if (v === null) {
      if (i + 1 >= argv.length) throw new UsageError(`${k} needs a value; ${USAGE}`);
      v = argv[++i];
    }
    if (k === '--model') a.model = v;
    else if (k === '--prompt') a.prompt = v;
    else a.maxNew = parseIntArg('--max-new-tokens', v, 1);
  }
  if (!a.model) throw new UsageError(`--model is required; ${USAGE}`);
  const parts = a.prompt.split(',').map((s) => s.trim());
  if (parts.some((s) => s === '')) throw new UsageError(`--prompt needs comma-separated token ids, got '${a.prompt}'`);
  a.promptIds = parts.map((s) => parseIntArg('--prompt token', s, 0));
  return a;
}

function loadOrt() {
  const bases = [process.cwd(), ...(process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean)];
  for (const b of bases) {
    try {
      return createRequire(path.join(path.resolve(b), '__generate__.js'))('onnxruntime-node');
    } catch (e) {
      if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes("'onnxruntime-node'")) continue;
      throw new UsageError(`onnxruntime-node found but failed to load: ${String(e && e.message || e).split('\n')[0]}`);
    }
  }
  throw new UsageError('cannot find onnxruntime-node in ./node_modules or NODE_PATH '
    + '(run ./scripts/setup.sh, or npm install --ignore-scripts onnxruntime-node@1.30.0)');
}

// config.json is optional: it gives the eos ids to stop at and the vocab size to check the prompt.
function readConfig(dir) {
  const file = path.join(dir, 'config.json');
  if (!fs.existsSync(file)) return {};
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UsageError(`cannot read ${file}: ${e.code || e.message}`);
  }
}

function f16ToF32(h) {
  const s = (h & 0x8000) ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

const EMPTY = {
  float32: Float32Array, float16: Uint16Array, float64: Float64Array, int64: BigInt64Array,
  int32: Int32Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
};

// An empty cache tensor: batch_size -> 1, past_sequence_length -> 0, numeric dims as declared.
function emptyCache(ort, meta) {
  const dims = (meta.shape || []).map((d) => {
    if (typeof d === 'number' && d >= 0) return d;
    if (d === 'batch_size') return 1;
    if (d === 'past_sequence_length') return 0;
    throw new Error(`${meta.name}: cannot size dim '${d}' of an empty cache `
      + '(only batch_size and past_sequence_length may be symbolic)');
  });
  if (dims.length === 0) throw new Error(`${meta.name} has no declared shape`);
  const Ctor = EMPTY[meta.type];
  if (!Ctor) throw new Error(`${meta.name}: unsupported cache dtype ${meta.type}`);
  return new ort.Tensor(meta.type, new Ctor(dims.reduce((x, y) => x * y, 1)), dims);
}

// A [1, n] integer tensor in the dtype the model declares (int64 per the contract; int32 accepted).
function ids(ort, type, values, name) {
  if (type === 'int64') return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), [1, values.length]);
  if (type === 'int32') return new ort.Tensor('int32', Int32Array.from(values), [1, values.length]);
  throw new Error(`model input '${name}' has type ${type}; expected int64 or int32`);
}

// argmax over the vocab at the last position of logits [1, seq, vocab].
function lastArgmax(t) {
  if (t.dims.length !== 3 || t.dims[0] !== 1) throw new Error(`logits have shape [${t.dims}], expected [1, seq, vocab]`);
  const [, S, V] = t.dims;
  const get = t.type === 'float16' ? (i) => f16ToF32(t.data[i]) : (i) => t.data[i];
  if (!['float32', 'float16', 'float64'].includes(t.type)) throw new Error(`logits have unsupported type ${t.type}`);
  const off = (S - 1) * V;
  let best = 0;
  let bestV = -Infinity;
  for (let v = 0; v < V; v++) {
    const x = get(off + v);
    if (x > bestV) { bestV = x; best = v; }  // NaN never wins; ties go to the lowest id, as torch.argmax
  }
  if (bestV === -Infinity) throw new Error('logits are all NaN or -inf');
  return best;
}

async function main() {
  let args; let ort; let modelFile; let cfg;
  try {
    args = parseArgs(process.argv.slice(2));
    let st;
    try { st = fs.statSync(args.model); } catch { throw new UsageError(`model folder not found: ${args.model}`); }
    if (!st.isDirectory()) throw new UsageError(`--model must be a folder built by mobius: ${args.model}`);
    modelFile = path.join(args.model, 'model.onnx');
    if (!fs.existsSync(modelFile)) throw new UsageError(`no model.onnx in ${args.model} (build one with: mobius build --model CKPT ${args.model})`);
    cfg = readConfig(args.model);
    if (Number.isInteger(cfg.vocab_size)) {
      const bad = args.promptIds.filter((t) => t >= cfg.vocab_size);
      if (bad.length) throw new UsageError(`prompt token(s) ${bad.join(',')} out of range: vocab_size is ${cfg.vocab_size}`);
    }
    ort = loadOrt();
  } catch (e) {
    if (e instanceof UsageError) die(e.message, 2);
    throw e;
  }
  // eos_token_id may be one id or a list of ids.
  const eos = new Set([cfg.eos_token_id].flat().filter((x) => Number.isInteger(x)));

  let session;
  try {
    session = await ort.InferenceSession.create(modelFile, { executionProviders: ['cpu'], logSeverityLevel: 3 });
  } catch (e) {
    die(`cannot load ${modelFile}: ${String(e && e.message || e).split('\n')[0]}`, 1);
  }
  if (!Array.isArray(session.inputMetadata)) die('this onnxruntime-node has no session.inputMetadata (need >= 1.22)', 1);
  const meta = new Map(session.inputMetadata.map((m) => [m.name, m]));
  if (!meta.has('input_ids')) die('model has no input_ids input; is it a text-generation model?', 1);
  if (!session.outputNames.includes('logits')) die('model has no logits output; is it a text-generation model?', 1);
  const cache = [...meta.keys()].filter((n) => n.startsWith('past_key_values.'));
  for (const n of meta.keys()) {
    if (!['input_ids', 'attention_mask', 'position_ids'].includes(n) && !n.startsWith('past_key_values.')) {
      die(`model input '${n}' is not part of the I/O contract (input_ids, attention_mask, position_ids, past_key_values.*)`, 1);
    }
  }
  const presentOf = (n) => 'present.' + n.slice('past_key_values.'.length);
  for (const n of cache) {
    if (!session.outputNames.includes(presentOf(n))) die(`model has input ${n} but no output ${presentOf(n)}`, 1);
  }

  // One step: `tokens` at positions past..past+len-1 over a cache of `past` tokens.
  let past = null;
  let pastLen = 0;
  const step = async (tokens) => {
    const feeds = { input_ids: ids(ort, meta.get('input_ids').type, tokens, 'input_ids') };
    const total = pastLen + tokens.length;
    if (meta.has('attention_mask')) {
      feeds.attention_mask = ids(ort, meta.get('attention_mask').type, new Array(total).fill(1), 'attention_mask');
    }
    if (meta.has('position_ids')) {
      feeds.position_ids = ids(ort, meta.get('position_ids').type, tokens.map((_, i) => pastLen + i), 'position_ids');
    }
    for (const n of cache) feeds[n] = past ? past[presentOf(n)] : emptyCache(ort, meta.get(n));
    const res = await session.run(feeds);
    past = res;
    pastLen = total;
    return lastArgmax(res.logits);
  };

  const generated = [];
  const t0 = performance.now();
  let prefillMs = 0;
  let stoppedAtEos = false;
  try {
    let next = await step(args.promptIds);
    prefillMs = performance.now() - t0;
    generated.push(next);
    while (generated.length < args.maxNew && !eos.has(next)) {
      next = await step([next]);
      generated.push(next);
    }
    stoppedAtEos = eos.has(next);
  } catch (e) {
    die(`inference failed after ${generated.length} token(s): ${String(e && e.message || e).split('\n')[0]}`, 1);
  }
  const totalMs = performance.now() - t0;

  console.log(`prompt:    ${args.promptIds.join(',')}`);
  console.log(`generated: ${generated.join(',')}${stoppedAtEos ? '  (stopped at eos)' : ''}`);
  const decodeN = generated.length - 1;
  let timing = `time: ${(totalMs / generated.length).toFixed(2)} ms/token (${generated.length} tokens in ${totalMs.toFixed(1)} ms;`
    + ` prefill of ${args.promptIds.length} prompt tokens ${prefillMs.toFixed(1)} ms`;
  if (decodeN > 0) timing += `, decode ${((totalMs - prefillMs) / decodeN).toFixed(2)} ms/token`;
  console.log(timing + ')');
}

main().catch((e) => die(String(e && e.stack || e).split('\n')[0], 1));
