// tjs_seq2seq.mjs - transformers.js runs an encoder-decoder folder mobius laid out for it
// (onnx/encoder_model + onnx/decoder_model_merged, sdk/include/mobius/sdk/seq2seq.hpp): the golden
// case's logits through its forward, and its greedy generate against a plain ONNX Runtime loop.
//
//   node tests/runtime/tjs_seq2seq.mjs OUT_DIR CASE_DIR [ATOL RTOL]
//
// OUT_DIR is `mobius build --runtime transformers.js` of CASE_DIR (a text2text-generation or
// speech-to-text golden case, tests/golden-seq2seq). The folder is loaded with the Auto class of
// the case's task (AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq for Whisper), local files
// only, in the dtype its transformers.js_config names. Then:
//  1. logits: the model called as a user calls it, model({input_ids, attention_mask,
//     decoder_input_ids}) (input_features for Whisper), against prefill.logits; and the three
//     decoder steps (prefill, decode, decode2) on one cache, fed as PreTrainedModel.generate feeds
//     them (models/modeling_utils.js): the encoder run once by
//     _prepare_encoder_decoder_kwargs_for_generation (its last_hidden_state checked against
//     encode.last_hidden_state at real tokens), each step's inputs made by
//     prepare_inputs_for_generation, the cache carried by _update_model_kwargs_for_generation
//     (getPastKeyValues: the decoder entries of the last step, the cross-attention entries of the
//     first). |tjs - expected| <= atol + rtol*|expected| (the case's tolerance unless given).
//  2. tokens: transformers.js's generate (greedy: do_sample false, num_beams 1, 8 new tokens,
//     decoder_start_token_id from case.json) on batch row 0 of the case's inputs gives the tokens of
//     a plain onnxruntime-node loop over the same two graphs (the encoder once; the decoder with
//     use_cache_branch false and empty past entries, then true with its own decoder entries and the
//     first step's cross-attention entries; argmax at each step). The same for the whole batch in
//     one generate (a text case's second row is right-padded: its encoder mask reaches the
//     decoder), each row against the loop on that row alone. Nothing may stop or bend the
//     loop, so generate is given eos_token_id -1 (no token ends it) and forced_bos_token_id /
//     forced_eos_token_id null (config.json's forced_eos_token_id would force the last token).
//     Whisper runs WhisperForConditionalGeneration.generate, its own path: with no
//     generation_config.json (the cases have none), is_multilingual, no_timestamps_token_id and
//     return_timestamps unset, its prompt is decoder_start_token_id alone
//     (_retrieve_init_tokens, models/whisper/modeling_whisper.js), and nothing is written into the
//     folder for it.
// mobius names umt5 and pegasus, which transformers.js 4.3.2 has no class for (no entry in
// configs.js's getNormalizedConfig, none in the seq2seq Auto mappings), mt5 and bart in the folder's
// config.json; a type transformers.js still has no class for must be refused by transformers.js
// itself ("Unsupported model type: <type>", models/auto/modeling_auto.js); the refusal is checked,
// the rest cannot run: 'SKIP <reason>', exit 77.
// Exit status: 0 every check passed; 1 one failed, or the folder did not load or run; 2 usage;
// 77 (skipped) when a package is missing or transformers.js refuses the model type.
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';
import { TJS_AUTO_CLASS, halfToFloat, importTransformersJs, loadOrt, readSafetensors } from '../parity/golden_io.mjs';

const [out, caseDir, atolArg, rtolArg] = process.argv.slice(2);
if (!out || !caseDir) {
  process.stderr.write('usage: tjs_seq2seq.mjs OUT_DIR CASE_DIR [ATOL RTOL]\n');
  process.exit(2);
}
const say = (m) => process.stdout.write(`${m}\n`);
const fail = (m) => { say(`tjs_seq2seq: FAIL: ${m}`); process.exit(1); };
const usage = (m) => { process.stderr.write(`tjs_seq2seq: error: ${m}\n`); process.exit(2); };

const here = path.dirname(fileURLToPath(import.meta.url));
const tjs = await importTransformersJs([process.env.MOBIUS_SOURCE_ROOT, process.cwd(), path.join(here, '..', '..')]);
if (!tjs) {
  say('SKIP @huggingface/transformers is not installed');
  process.exit(77);
}
const ort = loadOrt(() => {
  say('SKIP onnxruntime-node is not installed');
  process.exit(77);
});

const spec = JSON.parse(fs.readFileSync(path.join(caseDir, 'case.json'), 'utf8'));
const ref = readSafetensors(path.join(caseDir, 'reference.safetensors'), usage);
const atol = Number(atolArg ?? spec.atol), rtol = Number(rtolArg ?? spec.rtol);
if (!(atol >= 0) || !(rtol >= 0)) usage('no tolerance (case.json atol/rtol, or ATOL RTOL)');
const steps = spec.steps.filter((s) => s !== 'encode');
for (const s of steps)
  for (const k of ['decoder_input_ids', 'logits']) if (!ref[`${s}.${k}`]) usage(`no '${s}.${k}' in the reference`);
const audio = Boolean(ref['encode.input_features']);
const start = spec.decoder_start_token_id;
if (!Number.isInteger(start)) usage(`${caseDir}/case.json has no decoder_start_token_id`);

const cfg = JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8'));
const tjsDtype = cfg['transformers.js_config']?.dtype;
if (!tjsDtype) fail(`${out}/config.json has no transformers.js_config.dtype`);
const autoClass = TJS_AUTO_CLASS[spec.task];
if (!autoClass) usage(`no transformers.js Auto class for task '${spec.task}'`);
say(`${path.basename(caseDir)}: ${cfg.model_type}, ${autoClass}, dtype ${tjsDtype}, tolerance atol ${atol} rtol ${rtol}`);

let checked = 0, failed = 0;
const report = (what, ok, detail) => {
  checked++;
  if (!ok) failed++;
  say(`${ok ? 'PASS' : 'FAIL'} ${what}: ${detail}`);
};

tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
tjs.env.useFSCache = false;
tjs.env.localModelPath = path.dirname(path.resolve(out)) + path.sep;
let model;
try {
  model = await tjs[autoClass].from_pretrained(path.basename(path.resolve(out)), {
    local_files_only: true, dtype: tjsDtype,
  });
} catch (e) {
  const msg = String(e?.message ?? e);
  // transformers.js's own refusal (models/auto/modeling_auto.js): its Auto class maps no class to
  // the model type. Anything else is the folder's fault.
  if (tjs[autoClass].supports(cfg.model_type) || msg !== `Unsupported model type: ${cfg.model_type}`)
    fail(`${autoClass}.from_pretrained: ${msg}`);
  say(`refused by transformers.js (as expected): ${autoClass}.from_pretrained: "${msg}"`);
  say(`SKIP transformers.js ${tjs.env.version} has no encoder-decoder class for model type '${cfg.model_type}' ` +
      '(no seq2seq Auto mapping, no entry in configs.js getNormalizedConfig): its logits and generate cannot be checked');
  process.exit(77);
}

// ---- transformers.js tensors of the case's inputs, and comparisons ----
const i64 = (data, shape) => new tjs.Tensor('int64', BigInt64Array.from(data, (v) => BigInt(v)), shape);
const rows = (t, n) => {  // the first n batch rows of a reference tensor
  const inner = t.shape.slice(1).reduce((a, b) => a * b, 1);
  return { shape: [n, ...t.shape.slice(1)], data: t.data.slice(0, n * inner) };
};
function encoderInputs(n) {  // the case's encoder inputs, batch rows [0, n)
  if (audio) {
    const f = rows(ref['encode.input_features'], n);
    return { input_features: new tjs.Tensor('float32', Float32Array.from(f.data), f.shape) };
  }
  const ids = rows(ref['encode.input_ids'], n), mask = rows(ref['encode.attention_mask'], n);
  return { input_ids: i64(ids.data, ids.shape), attention_mask: i64(mask.data, mask.shape) };
}
const toFloats = (t) => (t.type === 'float32' ? t.data : t.to('float32').data);
// Largest |got - want| over the compared values, and how many are out of tolerance; `keep(i)`
// says whether value i is compared.
function compare(got, want, keep = () => true) {
  if (got.dims.join() !== want.shape.join()) return { error: `shape [${got.dims}] (expected [${want.shape}])` };
  const g = toFloats(got);
  let worst = 0, bad = 0, n = 0;
  for (let i = 0; i < want.data.length; ++i) {
    if (!keep(i)) continue;
    const d = Math.abs(Number(g[i]) - want.data[i]);
    n++;
    if (!(d <= worst)) worst = d;  // a NaN is the worst
    if (!(d <= atol + rtol * Math.abs(want.data[i]))) bad++;
  }
  return { worst, bad, n };
}
function check(what, got, want, keep) {
  if (!got) return report(what, false, 'no such output');
  const r = compare(got, want, keep);
  if (r.error) return report(what, false, r.error);
  report(what, r.bad === 0 && r.n > 0, `max |diff| ${r.worst.toExponential(3)} over ${r.n} values` +
    (r.bad ? `, ${r.bad} out of tolerance` : ''));
}
const stepIds = (s) => ref[`${s}.decoder_input_ids`];
const batch = stepIds(steps[0]).shape[0];

// ---- 1. logits ----
try {
  // As a user calls the model: encoder and decoder in one call, no cache.
  const first = await model({ ...encoderInputs(batch), decoder_input_ids: i64(stepIds(steps[0]).data, stepIds(steps[0]).shape) });
  check(`${steps[0]} logits, model({...})`, first.logits, ref[`${steps[0]}.logits`]);
} catch (e) {
  report(`${steps[0]} logits, model({...})`, false, `the model did not run: ${String(e?.message ?? e).split('\n')[0]}`);
}
try {
  // As generate feeds the model (models/modeling_utils.js PreTrainedModel.generate), with the
  // decoder tokens of the reference instead of sampled ones.
  const generation_config = model._prepare_generation_config(null, {});
  const encoderFeeds = encoderInputs(batch);
  let model_inputs = await model._prepare_encoder_decoder_kwargs_for_generation({
    inputs_tensor: encoderFeeds[model.main_input_name], model_inputs: encoderFeeds,
    model_input_name: model.main_input_name, generation_config,
  });
  const mask = ref['encode.attention_mask'], hidden = ref['encode.last_hidden_state'];
  if (hidden) {
    const perRow = hidden.shape.slice(1).reduce((a, b) => a * b, 1), perToken = hidden.shape[2];
    const tokens = hidden.shape[1];
    // Real tokens only (an audio encoder has no mask: every frame).
    const keep = (i) => !mask || Number(mask.data[Math.floor(i / perRow) * tokens + Math.floor((i % perRow) / perToken)]) !== 0;
    check('encoder last_hidden_state', model_inputs.encoder_outputs, hidden, keep);
  }
  const all = Array.from({ length: batch }, () => []);
  let outputs = null;
  for (const s of steps) {
    const ids = stepIds(s), n = ids.shape[1];
    const fresh = Array.from({ length: batch }, (_, b) => Array.from(ids.data.slice(b * n, (b + 1) * n), (v) => BigInt(v)));
    if (outputs) {
      if (n !== 1) throw new Error(`step ${s} feeds ${n} tokens a row; generate feeds one after the first step`);
      model_inputs = model._update_model_kwargs_for_generation({
        generated_input_ids: fresh, outputs, model_inputs, is_encoder_decoder: true,
      });
    }
    fresh.forEach((r, b) => all[b].push(...r));
    model_inputs = model.prepare_inputs_for_generation(all, model_inputs, generation_config);
    outputs = await model.forward(model_inputs);
    check(`${s} logits, generate's loop${s !== steps[0] ? ` (past ${all[0].length - 1})` : ''}`,
      outputs.logits, ref[`${s}.logits`]);
  }
} catch (e) {
  report("the cached steps, generate's loop", false, `the model did not run: ${String(e?.message ?? e).split('\n')[0]}`);
}

// ---- 2. greedy tokens: transformers.js's generate against a plain ONNX Runtime loop ----
const NEW_TOKENS = 8;
async function tjsGreedy(n) {  // transformers.js's generate on batch rows [0, n): a token list a row
  const options = {
    ...encoderInputs(n), max_new_tokens: NEW_TOKENS, do_sample: false, num_beams: 1,
    decoder_start_token_id: start, eos_token_id: -1, forced_bos_token_id: null, forced_eos_token_id: null,
  };
  // Whisper's generate hands its prompt over as one flat list (_retrieve_init_tokens,
  // models/whisper/modeling_whisper.js:47), which _prepare_encoder_decoder_kwargs_for_generation
  // (models/modeling_utils.js:766) takes for a batch of one: a batch gives the same prompt, one list
  // a row, as decoder_input_ids.
  if (audio && n > 1) options.decoder_input_ids = Array.from({ length: n }, () => [start]);
  const seq = await model.generate(options);
  return seq.tolist().map((r) => {
    const row = r.map(Number);
    if (row[0] !== start) throw new Error(`its sequence starts with ${row[0]}, not decoder_start_token_id ${start}`);
    return row.slice(1);
  });
}
const generated = {};
for (const n of [1, batch]) {
  try {
    generated[n] = await tjsGreedy(n);
  } catch (e) {
    report(`generate, batch of ${n}`, false, `transformers.js's generate failed: ${String(e?.message ?? e).split('\n')[0]}`);
  }
}
await model.dispose();

const suffix = tjsDtype === 'fp32' ? '' : `_${tjsDtype}`;
const session = (name) => ort.InferenceSession.create(path.join(out, 'onnx', `${name}${suffix}.onnx`));
let encoder, decoder;
try {
  [encoder, decoder] = [await session('encoder_model'), await session('decoder_model_merged')];
} catch (e) {
  fail(`onnxruntime-node cannot open the folder's graphs: ${String(e?.message ?? e).split('\n')[0]}`);
}
const ortI64 = (data, shape) => new ort.Tensor('int64', BigInt64Array.from(data, (v) => BigInt(v)), shape);
async function ortGreedy(row) {  // the plain loop on batch row `row` alone
  const one = (t) => {
    const inner = t.shape.slice(1).reduce((a, b) => a * b, 1);
    return { shape: [1, ...t.shape.slice(1)], data: t.data.slice(row * inner, (row + 1) * inner) };
  };
  const encFeeds = {};
  if (audio) {
    const f = one(ref['encode.input_features']);
    encFeeds.input_features = new ort.Tensor('float32', Float32Array.from(f.data), f.shape);
  } else {
    const ids = one(ref['encode.input_ids']), mask = one(ref['encode.attention_mask']);
    encFeeds.input_ids = ortI64(ids.data, ids.shape);
    encFeeds.attention_mask = ortI64(mask.data, mask.shape);
  }
  const { last_hidden_state } = await encoder.run(encFeeds);
  // Empty past entries: every symbolic dimension 0 but the batch.
  let past = {};
  for (const m of decoder.inputMetadata) {
    if (!m.name.startsWith('past_key_values.')) continue;
    const shape = m.shape.map((d) => (typeof d === 'number' ? d : d === 'batch_size' ? 1 : 0));
    if (!shape.includes(0)) throw new Error(`${m.name}: no dimension to leave empty in [${m.shape}]`);
    past[m.name] = new ort.Tensor(m.type, m.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), shape);
  }
  const tokens = [];
  let last = start, cross = null;
  for (let step = 0; step < NEW_TOKENS; ++step) {
    const feeds = { input_ids: ortI64([last], [1, 1]), encoder_hidden_states: last_hidden_state,
      use_cache_branch: new ort.Tensor('bool', [step > 0], [1]), ...past };
    if (decoder.inputNames.includes('encoder_attention_mask')) feeds.encoder_attention_mask = encFeeds.attention_mask;
    const res = await decoder.run(feeds);
    const logits = res.logits, vocab = logits.dims[2];
    const lastRow = logits.data.subarray((logits.dims[1] - 1) * vocab, logits.dims[1] * vocab);
    const value = logits.type === 'float16' ? (i) => halfToFloat(lastRow[i]) : (i) => lastRow[i];
    let best = 0;
    for (let i = 1; i < vocab; ++i) if (value(i) > value(best)) best = i;
    tokens.push(best);
    last = best;
    // The decoder entries of this step; the cross-attention entries of the first.
    const first = !cross;
    past = {};
    cross ??= {};
    for (const k of Object.keys(res)) {
      const m = /^present\.\d+\.(decoder|encoder)\./.exec(k);
      if (m && m[1] === 'decoder') past[k.replace('present', 'past_key_values')] = res[k];
      else if (m && first) cross[k.replace('present', 'past_key_values')] = res[k];
    }
    Object.assign(past, cross);
  }
  return tokens;
}
const loopTokens = [];  // the loop's tokens of each row, computed once
for (const n of [1, batch]) {
  if (!generated[n]) continue;
  for (let row = 0; row < n; ++row) {
    const what = `greedy tokens, ${n === 1 ? 'row 0 alone' : `row ${row} of a batch of ${n}`}`;
    try {
      const want = (loopTokens[row] ??= await ortGreedy(row)), got = generated[n][row];
      const same = got.length === NEW_TOKENS && got.every((t, i) => t === want[i]);
      report(what, same, `transformers.js generate ${JSON.stringify(got)}${same ? ' = ' : ' != '}` +
        `onnxruntime loop ${JSON.stringify(want)}`);
    } catch (e) {
      report(what, false, `the onnxruntime loop failed: ${String(e?.message ?? e).split('\n')[0]}`);
    }
  }
}

say(`tjs_seq2seq: ${checked - failed} passed, ${failed} failed`);
process.exit(failed || !checked ? 1 : 0);
