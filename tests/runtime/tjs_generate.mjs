// tjs_generate.mjs - transformers.js loads a mobius output folder and generates greedily; an
// independent ONNX Runtime loop on the same onnx file must produce the same tokens.
//
//   node tests/runtime/tjs_generate.mjs OUT_DIR [--max-new-tokens N]
//
// OUT_DIR is what `mobius build --runtime transformers.js` writes: config.json (with
// "transformers.js_config"), generation_config.json, tokenizer.json, tokenizer_config.json, and
// onnx/model.onnx (fp32) or onnx/model_fp16.onnx (fp16) with its external data.
//
// Two cases run, each through both paths:
//   single  one prompt;
//   batch   two prompts of different lengths, left-padded (tokenizer.padding_side = 'left').
// Path A: AutoTokenizer + AutoModelForCausalLM.from_pretrained(OUT_DIR) and model.generate().
// Path B: this file's own loop over onnxruntime-node (no transformers.js model code): the same
// token ids from the tokenizer, then input_ids, attention_mask, position_ids and the cache fed the
// way transformers.js 4.3.2 feeds them (see the comments at positionIds() and emptyCache()).
//
// End-of-sequence: a random-weight model may pick eos at any step, which would end the comparison
// early. Both paths suppress it: transformers.js gets min_new_tokens = max_new_tokens (its
// MinNewTokensLengthLogitsProcessor sets the eos logits to -Infinity while fewer than
// min_new_tokens were generated), and the ORT loop sets the same eos logits to -Infinity before
// its argmax. So every row generates exactly max_new_tokens tokens, and all of them are compared.
//
// Exit status: 0 the token lists are equal in every case; 1 they differ, or a path failed (model
// does not load, a run fails); 2 usage error (bad arguments, OUT_DIR incomplete).
import { createRequire } from 'module';
import { pathToFileURL, fileURLToPath } from 'url';
import fs from 'fs';
import path from 'path';
import { halfToFloat, nodeModulesDirs } from '../parity/golden_io.mjs';

const SINGLE_PROMPT = 'The quick brown fox jumps over the lazy dog because';
const BATCH_PROMPTS = ['Hello, my name is', 'Once upon a time, in a small village by the sea, there lived'];

function usage(msg) {
  process.stderr.write(`tjs_generate: error: ${msg}\n`);
  process.exit(2);
}
function fail(msg) {
  process.stdout.write(`tjs_generate: FAIL: ${msg}\n`);
  process.exit(1);
}

// ---------------------------------------------------------------------------------------------
// Where node_modules is: MOBIUS_SOURCE_ROOT, the working folder, NODE_PATH, then this file's ../..

function moduleDirs() {
  const here = path.dirname(fileURLToPath(import.meta.url));
  return nodeModulesDirs([process.env.MOBIUS_SOURCE_ROOT, process.cwd(),
    ...(process.env.NODE_PATH || '').split(':'), path.join(here, '..', '..')]);
}

async function loadLibraries() {
  for (const dir of moduleDirs()) {
    const tjsPkg = path.join(dir, '@huggingface', 'transformers', 'package.json');
    const ortPkg = path.join(dir, 'onnxruntime-node', 'package.json');
    if (!fs.existsSync(tjsPkg) || !fs.existsSync(ortPkg)) continue;
    const pkg = JSON.parse(fs.readFileSync(tjsPkg, 'utf8'));
    const entry = pkg.exports?.node?.import?.default ?? './dist/transformers.node.mjs';
    const tjs = await import(pathToFileURL(path.join(dir, '@huggingface', 'transformers', entry)).href);
    const require = createRequire(path.join(dir, 'noop.js'));
    const ort = require(path.join(dir, 'onnxruntime-node'));
    return { tjs, ort, tjsVersion: pkg.version };
  }
  usage(`@huggingface/transformers and onnxruntime-node not found in ${moduleDirs().join(', ')}`);
}

// ---------------------------------------------------------------------------------------------
// Path B helpers: plain ONNX Runtime.

// The model types whose positions transformers.js starts at 1 (decoder_forward in
// src/models/modeling_utils.js: "a special case for paligemma/gemma3 models, where positions are
// 1-indexed"; Python transformers starts gemma3 text at 0).
const ONE_INDEXED = new Set(['paligemma', 'gemma3_text', 'gemma3']);
// The model types that get 3-row multimodal rope positions (generic_text_to_text_forward's list
// in modeling_utils.js; Qwen2VLForConditionalGeneration.prepare_inputs_for_generation computes
// them for every class derived from it, Qwen3_5ForCausalLM included).
const MROPE = new Set([
  'qwen2_vl', 'qwen2_vl_text', 'qwen2_5_vl', 'qwen2_5_vl_text', 'qwen3_vl', 'qwen3_vl_text',
  'qwen3_vl_moe', 'qwen3_vl_moe_text', 'qwen3_5', 'qwen3_5_text', 'qwen3_5_moe', 'qwen3_5_moe_text',
]);

// mask: number[][] (batch rows of 0/1, covering past and current tokens). Returns the per-row
// position of every column: cumsum(mask) - 1 + start for real tokens, 1 for padding (as
// cumsum_masked_fill in modeling_utils.js, which is Python's
// `mask.cumsum(-1) - 1; masked_fill_(mask == 0, 1)`).
function cumsumPositions(mask, start) {
  return mask.map((row) => {
    let sum = start;
    return row.map((m) => {
      if (m === 0) return 1;
      const p = sum;
      sum += 1;
      return p;
    });
  });
}

// Position ids for one run of the loop, as transformers.js 4.3.2 feeds them.
//   state.mask    the attention mask of this run (past + current columns)
//   state.cur     how many columns this run feeds (prompt length, then 1)
//   state.past    how many columns the cache already holds
//   state.deltas  qwen mrope deltas, computed at prefill
function positionIds(ort, modelType, state) {
  const B = state.mask.length;
  if (MROPE.has(modelType)) {
    // Qwen VL / Qwen3.5: position_ids [3, batch, seq], three identical rows for text.
    // Prefill (Qwen2VLForConditionalGeneration._get_text_only_rope_index): each row is
    // cumsum(mask) - 1 (padding 1), and per batch row
    //     rope_delta = max(positions of the row) + 1 + mask.shape[1]
    // Decode (prepare_inputs_for_generation, "Auto-regressive case"): every row gets
    //     past_length + rope_delta
    // with past_length = the cache's sequence length (DynamicCache.get_seq_length).
    // NOTE: Python transformers computes rope_delta = max + 1 - mask.shape[1] (minus): decode
    // token k of a row with n real tokens of S sits at n + k there. transformers.js 4.3.2 adds
    // mask.shape[1] instead, so it feeds S + k + n + S, 2 * S higher than Python, while the
    // prefill positions (0..n-1) are the same; the gap between the prompt and the generated
    // tokens is wrong by 2 * S under RoPE. We mirror transformers.js, since the test checks what
    // transformers.js runs, not what Python would generate.
    let rows;
    if (state.past === 0) {
      const pos = cumsumPositions(state.mask, 0);
      state.deltas = pos.map((r) => BigInt(Math.max(...r) + 1 + r.length));
      rows = pos;
    } else {
      rows = state.deltas.map((d) => [Number(BigInt(state.past) + d)]);
    }
    const S = rows[0].length;
    const data = new BigInt64Array(3 * B * S);
    for (let k = 0; k < 3; ++k)
      for (let b = 0; b < B; ++b)
        for (let s = 0; s < S; ++s) data[(k * B + b) * S + s] = BigInt(rows[b][s]);
    return new ort.Tensor('int64', data, [3, B, S]);
  }
  const start = ONE_INDEXED.has(modelType) ? 1 : 0;
  const full = cumsumPositions(state.mask, start);
  const S = state.cur;
  const data = new BigInt64Array(B * S);
  for (let b = 0; b < B; ++b)
    for (let s = 0; s < S; ++s) data[b * S + s] = BigInt(full[b][full[b].length - S + s]);
  return new ort.Tensor('int64', data, [B, S]);
}

const NON_CACHE_INPUTS = new Set(['input_ids', 'attention_mask', 'position_ids', 'num_logits_to_keep']);

// The present output that feeds a past input on the next run (getPastKeyValues in
// modeling_utils.js renames present_conv -> past_conv, present_recurrent -> past_recurrent,
// present -> past_key_values).
function pastNameOf(outputName) {
  for (const [from, to] of [['present_conv', 'past_conv'], ['present_recurrent', 'past_recurrent'],
    ['present_ssm', 'past_ssm'], ['present.', 'past_key_values.']]) {
    if (outputName.startsWith(from)) return to + outputName.slice(from.length);
  }
  return null;
}

// The empty cache of the first run. transformers.js (addPastKeyValues + resolveCacheShape in
// modeling_utils.js) takes each cache input's shape from the session's input metadata, resolves
// a symbolic dim named exactly 'batch_size' to the batch size and every other symbolic dim to 0.
// Here: dim 0 is the batch whatever its name, a symbolic sequence dim of an attention cache is 0,
// and any other symbolic dim is an error, since no runtime can know it. If the model names its
// batch dim differently, transformers.js gets 0 there and the two paths disagree (or it fails).
function emptyCache(ort, session, B) {
  const feeds = {};
  for (const meta of session.inputMetadata) {
    if (NON_CACHE_INPUTS.has(meta.name)) continue;
    const attention = meta.name.startsWith('past_key_values.');
    const shape = meta.shape.map((d, i) => {
      if (typeof d === 'number' && d >= 0) return d;
      if (i === 0) return B;
      if (attention && i === meta.shape.length - 2) return 0;
      throw new Error(`cache input ${meta.name} has a symbolic dim '${d}' at ${i} (shape ` +
        `${JSON.stringify(meta.shape)}); only the batch dim (and the sequence dim of a key/value cache) ` +
        'may be symbolic: transformers.js resolves every other symbolic dim to 0');
    });
    const size = shape.reduce((a, b) => a * b, 1);
    const type = meta.type;
    let data;
    if (type === 'float32') data = new Float32Array(size);
    else if (type === 'float16') data = new Uint16Array(size);
    else if (type === 'int64') data = new BigInt64Array(size);
    else throw new Error(`cache input ${meta.name}: unsupported type ${type}`);
    feeds[meta.name] = new ort.Tensor(type, data, shape);
  }
  return feeds;
}

function lastLogits(t, b) {
  const [, S, V] = t.dims;
  const off = (b * S + (S - 1)) * V;
  const out = new Float32Array(V);
  if (t.type === 'float32') out.set(t.data.subarray(off, off + V));
  else if (t.type === 'float16') for (let i = 0; i < V; ++i) out[i] = halfToFloat(t.data[off + i]);
  else throw new Error(`logits of type ${t.type}`);
  return out;
}

async function ortGreedy(ort, onnxPath, config, ids, mask, maxNew, eosIds) {
  const session = await ort.InferenceSession.create(onnxPath);
  const modelType = config.model_type;
  const B = ids.length;
  let curIds = ids.map((r) => r.slice());
  let curMask = mask.map((r) => r.slice());
  let cache = emptyCache(ort, session, B);
  const generated = Array.from({ length: B }, () => []);
  const state = { mask: curMask, cur: ids[0].length, past: 0, deltas: null };
  for (let step = 0; step < maxNew; ++step) {
    const S = curIds[0].length;
    const feeds = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(curIds.flat().map(BigInt)), [B, S]),
      attention_mask: new ort.Tensor('int64', BigInt64Array.from(curMask.flat().map(BigInt)), [B, curMask[0].length]),
      ...cache,
    };
    state.mask = curMask;
    state.cur = S;
    if (session.inputNames.includes('position_ids')) feeds.position_ids = positionIds(ort, modelType, state);
    if (session.inputNames.includes('num_logits_to_keep')) feeds.num_logits_to_keep = new ort.Tensor('int64', [1n], []);
    for (const n of session.inputNames) if (!(n in feeds)) throw new Error(`no value for input ${n}`);
    const out = await session.run(Object.fromEntries(session.inputNames.map((n) => [n, feeds[n]])));
    if (!out.logits) throw new Error('the model has no logits output');
    const next = [];
    for (let b = 0; b < B; ++b) {
      const l = lastLogits(out.logits, b);
      for (const e of eosIds) if (e >= 0 && e < l.length) l[e] = -Infinity;
      let best = 0;
      for (let i = 1; i < l.length; ++i) if (l[i] > l[best]) best = i;
      next.push(best);
      generated[b].push(best);
    }
    const newCache = {};
    for (const [name, t] of Object.entries(out)) {
      const past = pastNameOf(name);
      if (past !== null) newCache[past] = t;
    }
    for (const n of Object.keys(cache)) if (!(n in newCache)) throw new Error(`no present output feeds ${n}`);
    cache = newCache;
    state.past += S;
    curIds = next.map((t) => [t]);
    curMask = curMask.map((r) => [...r, 1]);
  }
  await session.release?.();
  return { generated, inputNames: session.inputNames, outputNames: session.outputNames };
}

// ---------------------------------------------------------------------------------------------

function eosIdsOf(outDir, config) {
  const read = (f) => {
    const p = path.join(outDir, f);
    return fs.existsSync(p) ? JSON.parse(fs.readFileSync(p, 'utf8')) : {};
  };
  const gen = read('generation_config.json');
  const e = gen.eos_token_id ?? config.eos_token_id ?? config.text_config?.eos_token_id ?? null;
  return e === null ? [] : Array.isArray(e) ? e : [e];
}

async function main() {
  const args = process.argv.slice(2);
  let outDir = null;
  let maxNew = 8;
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--max-new-tokens') {
      maxNew = Number(args[++i]);
      if (!Number.isInteger(maxNew) || maxNew < 1) usage('--max-new-tokens needs a positive integer');
    } else if (outDir === null) outDir = args[i];
    else usage(`unexpected argument '${args[i]}' (usage: tjs_generate.mjs OUT_DIR [--max-new-tokens N])`);
  }
  if (outDir === null) usage('usage: tjs_generate.mjs OUT_DIR [--max-new-tokens N]');
  outDir = path.resolve(outDir);
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) {
    if (!fs.existsSync(path.join(outDir, f))) usage(`${outDir}: no ${f}`);
  }
  const config = JSON.parse(fs.readFileSync(path.join(outDir, 'config.json'), 'utf8'));
  const tjsConfig = config['transformers.js_config'];
  if (!tjsConfig) usage(`${outDir}/config.json has no "transformers.js_config"`);
  const dtype = typeof tjsConfig.dtype === 'string' ? tjsConfig.dtype : 'fp32';
  const onnxName = { fp32: 'model.onnx', fp16: 'model_fp16.onnx' }[dtype];
  if (!onnxName) usage(`unsupported transformers.js_config.dtype ${JSON.stringify(tjsConfig.dtype)}`);
  const onnxPath = path.join(outDir, 'onnx', onnxName);
  if (!fs.existsSync(onnxPath)) usage(`no ${path.relative(outDir, onnxPath)} in ${outDir}`);

  const { tjs, ort, tjsVersion } = await loadLibraries();
  const { env, AutoTokenizer, AutoModelForCausalLM } = tjs;
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.useFSCache = false;
  // An absolute path is not a hub id, so transformers.js reads it as it is; localModelPath is
  // its parent anyway, in case a version joins the two.
  env.localModelPath = path.dirname(outDir) + path.sep;

  const eosIds = eosIdsOf(outDir, config);
  process.stdout.write(`tjs_generate: ${outDir} model_type ${config.model_type}, ${path.relative(outDir, onnxPath)} ` +
    `(${dtype}), transformers.js ${tjsVersion}, eos suppressed: ${JSON.stringify(eosIds)}, max_new_tokens ${maxNew}\n`);

  let tokenizer, model;
  try {
    tokenizer = await AutoTokenizer.from_pretrained(outDir);
    tokenizer.padding_side = 'left';
    model = await AutoModelForCausalLM.from_pretrained(outDir, { local_files_only: true });
  } catch (e) {
    fail(`transformers.js could not load ${outDir}: ${e && e.stack ? e.stack : e}`);
  }
  const sessions = Object.keys(model.sessions);
  process.stdout.write(`transformers.js: ${model.constructor.name}, sessions: ${sessions.join(', ')}\n`);

  const cases = [['single', [SINGLE_PROMPT]], ['batch', BATCH_PROMPTS]];
  let mismatches = 0;
  for (const [label, prompts] of cases) {
    const enc = tokenizer(prompts, { padding: true });
    const ids = enc.input_ids.tolist().map((r) => r.map(Number));
    const mask = enc.attention_mask.tolist().map((r) => r.map(Number));
    if (label === 'batch') {
      const lens = mask.map((r) => r.reduce((a, b) => a + b, 0));
      if (lens[0] === lens[1]) usage(`the batch prompts tokenize to the same length ${lens[0]}: no padding to test`);
      if (mask.some((r) => r[0] === 1 && r.includes(0))) fail('padding is not on the left');
    }

    let tjsTokens;
    try {
      const out = await model.generate({
        ...enc,
        max_new_tokens: maxNew,
        min_new_tokens: maxNew,
        do_sample: false,
      });
      const S = ids[0].length;
      tjsTokens = out.tolist().map((r) => r.slice(S).map(Number));
    } catch (e) {
      fail(`transformers.js generate (${label}) failed: ${e && e.stack ? e.stack : e}`);
    }

    let ortRes;
    try {
      ortRes = await ortGreedy(ort, onnxPath, config, ids, mask, maxNew, eosIds);
    } catch (e) {
      fail(`onnxruntime loop (${label}) failed: ${e && e.stack ? e.stack : e}`);
    }

    for (let b = 0; b < prompts.length; ++b) {
      const a = tjsTokens[b], o = ortRes.generated[b];
      const same = a.length === o.length && a.every((t, i) => t === o[i]);
      if (!same) ++mismatches;
      const pad = mask[b].filter((m) => m === 0).length;
      process.stdout.write(`${label}[${b}] prompt ${ids[b].length - pad} tokens (+${pad} pad): ${JSON.stringify(ids[b])}\n`);
      process.stdout.write(`  transformers.js: ${JSON.stringify(a)}\n`);
      process.stdout.write(`  onnxruntime:     ${JSON.stringify(o)}  ${same ? 'equal' : 'DIFFERENT'}\n`);
      process.stdout.write(`  text: ${JSON.stringify(tokenizer.decode(a))}\n`);
    }
  }
  await model.dispose();
  if (mismatches > 0) fail(`${mismatches} row(s) differ`);
  process.stdout.write('tjs_generate: PASS: transformers.js and onnxruntime generate the same tokens\n');
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
