// seq2seq_parity.mjs - runs an encoder-decoder build (the two graphs of mobius/sdk/seq2seq.hpp)
// of a golden case of tests/golden-seq2seq in ONNX Runtime (CPU) as transformers.js's generation
// loop does, and compares the encoder's output and each decoder step's logits with transformers'.
//
//   node tests/parity/seq2seq_parity.mjs --model OUT_DIR --case CASE_DIR [--atol X] [--rtol Y] [--json]
//
// OUT_DIR holds encoder_model and decoder_model_merged, as transformers.js lays them out
// (onnx/<name>.onnx, onnx/<name>_fp16.onnx) or ONNX Runtime (<name>.onnx). The case folder holds
// case.json ("steps": ["encode", "prefill", "decode", ...], atol, rtol) and reference.safetensors
// with encode.input_ids and encode.attention_mask (1 = a real token) or encode.input_features
// (speech), encode.last_hidden_state, and per decoder step <step>.decoder_input_ids and
// <step>.logits; see tests/golden-seq2seq/README.md.
//
// The loop: the encoder runs once, fed encode.<input> for each input it declares, and its
// last_hidden_state is compared at real tokens. Each decoder step then feeds <step>.decoder_input_ids
// as input_ids, the encoder's own output (in the dtype it returned) as encoder_hidden_states,
// encode.attention_mask as encoder_attention_mask (all ones for a case without one), and
// use_cache_branch false on the first step and true after; the cache: every past_key_values.* empty
// on the first step (a dim named like batch is the batch, every other symbolic dim 0), then the
// previous step's present.* for the self-attention entries (`.decoder.`) and the first step's
// present.* for the cross-attention ones (`.encoder.`), which later steps return as placeholders.
// Logits are compared at every position. The cache is checked too: after each step every
// present.<i>.decoder.* holds as many positions as the steps have fed so far, and the first step's
// present.<i>.encoder.* as many as the encoder's output.
//
// Tolerance: every element must satisfy |onnx - expected| <= atol + rtol * |expected|, case.json's
// atol/rtol, or --atol/--rtol where they are larger (reduced-precision builds).
// Exit status: 0 every comparison passed; 1 one failed, or a graph did not load or run, or broke
// the contract (an input the loop does not feed, a missing output, a cache of the wrong length);
// 2 a usage or I/O error. The last line is "seq2seq parity: N passed, M failed" (counting the
// encoder's output, each step's logits and the cache checks).
import fs from 'fs';
import path from 'path';
import { compare, feedFor, finishReport, loadOrt, parseOptions, readSafetensors } from './golden_io.mjs';

const USAGE = 'usage: seq2seq_parity.mjs --model OUT_DIR --case CASE_DIR [--atol X] [--rtol Y] [--json]';

function die(msg) {
  process.stderr.write(`seq2seq_parity: error: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  return parseOptions(argv, {
    '--model': ['model', 'string'], '--case': ['caseDir', 'string'],
    '--atol': ['atol', 'number'], '--rtol': ['rtol', 'number'], '--json': ['json', 'flag'],
  }, ['model', 'caseDir'], USAGE, die);
}

// case.json and reference.safetensors of an encoder-decoder case, checked to hold what the loop
// feeds and compares.
function loadSeq2SeqCase(caseDir) {
  const caseFile = path.join(caseDir, 'case.json');
  if (!fs.existsSync(caseFile)) die(`no case.json in ${caseDir}`);
  let spec;
  try {
    spec = JSON.parse(fs.readFileSync(caseFile, 'utf8'));
  } catch (e) {
    die(`${caseFile}: ${e.message}`);
  }
  const steps = spec.steps || [];
  if (steps[0] !== 'encode' || steps.length < 2) die(`${caseFile}: steps must be "encode" and decoder steps`);
  const refFile = path.join(caseDir, 'reference.safetensors');
  if (!fs.existsSync(refFile)) die(`no reference.safetensors in ${caseDir}`);
  const ref = readSafetensors(refFile, die);
  const need = ['encode.last_hidden_state'];
  for (const s of steps.slice(1)) need.push(`${s}.decoder_input_ids`, `${s}.logits`);
  for (const k of need) if (!ref[k]) die(`${refFile}: no tensor '${k}'`);
  return { steps: steps.slice(1), ref, atol: Number(spec.atol) || 0, rtol: Number(spec.rtol) || 0 };
}

// The file of graph `name` in a build folder: onnx/<name>.onnx or onnx/<name>_fp16.onnx
// (transformers.js), or <name>.onnx (ONNX Runtime); exactly one of them.
function graphFile(out, name) {
  if (!fs.existsSync(out)) die(`no model at ${out}`);
  const found = [path.join('onnx', `${name}.onnx`), path.join('onnx', `${name}_fp16.onnx`), `${name}.onnx`]
    .filter((f) => fs.existsSync(path.join(out, f)));
  if (found.length !== 1)
    die(`${out}: expected one of onnx/${name}.onnx, onnx/${name}_fp16.onnx, ${name}.onnx; found ${found.length}`);
  return path.join(out, found[0]);
}

// An empty cache entry of the input's declared shape: the batch for a dim named like it, 0 for
// every other symbolic dim.
function emptyCache(ort, meta, batch) {
  const dims = meta.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : /batch/i.test(String(d)) ? batch : 0));
  const Ctor = { float32: Float32Array, float16: Uint16Array }[meta.type];
  if (!Ctor) throw new Error(`cache input '${meta.name}' has type ${meta.type}; expected float32 or float16`);
  return new ort.Tensor(meta.type, new Ctor(dims.reduce((a, b) => a * b, 1)), dims);
}

async function open(ort, file) {
  return ort.InferenceSession.create(file, { logSeverityLevel: 3, executionProviders: ['cpu'] });
}

// A result that is no comparison: a graph that fails to load or run, a broken contract.
const failure = (step, output, error) => ({ step, output, pass: false, error });

// The length checks of a step's cache: `fed` decoder positions so far, `frames` encoder positions.
function checkCache(step, out, fed, frames, first) {
  const wrong = [];
  for (const [name, t] of Object.entries(out)) {
    if (!name.startsWith('present.')) continue;
    if (name.includes('.decoder.') && t.dims[2] !== fed) wrong.push(`${name} holds ${t.dims[2]} positions, not ${fed}`);
    if (first && name.includes('.encoder.') && t.dims[2] !== frames)
      wrong.push(`${name} holds ${t.dims[2]} positions, not the encoder's ${frames}`);
  }
  if (!Object.keys(out).some((n) => n.startsWith('present.'))) wrong.push('no present.* output');
  return wrong.length ? failure(step, 'cache', wrong.join('; ')) : { step, output: 'cache', pass: true, compared: 0 };
}

async function run(args, ort) {
  const c = loadSeq2SeqCase(args.caseDir);
  const atol = Math.max(c.atol, args.atol || 0);
  const rtol = Math.max(c.rtol, args.rtol || 0);
  const encoderFile = graphFile(args.model, 'encoder_model');
  const decoderFile = graphFile(args.model, 'decoder_model_merged');
  const report = { encoder: encoderFile, decoder: decoderFile, atol, rtol, results: [] };
  const mask = c.ref['encode.attention_mask'] || null;

  let encoder, decoder;
  try {
    encoder = await open(ort, encoderFile);
    decoder = await open(ort, decoderFile);
  } catch (e) {
    report.results.push(failure('load', '(model)', `a graph does not load: ${e.message}`));
    return report;
  }
  const feeds = {};
  for (const meta of encoder.inputMetadata) {
    const t = c.ref[`encode.${meta.name}`];
    if (!t) {
      report.results.push(failure('encode', '(model)', `input '${meta.name}' has no reference tensor 'encode.${meta.name}'`));
      return report;
    }
    feeds[meta.name] = feedFor(ort, meta, t);
  }
  let hidden;
  try {
    hidden = (await encoder.run(feeds, { logSeverityLevel: 4 })).last_hidden_state;
  } catch (e) {
    report.results.push(failure('encode', '(model)', `run failed: ${e.message}`));
    return report;
  }
  if (!hidden) {
    report.results.push(failure('encode', 'last_hidden_state', `no such output (${encoder.outputNames.join(', ')})`));
    return report;
  }
  report.results.push({ step: 'encode', ...compare('last_hidden_state', 'last_hidden_state', hidden,
                                                   c.ref['encode.last_hidden_state'], atol, rtol, mask) });

  const [batch, frames] = hidden.dims;
  const encoderMask = mask || { shape: [batch, frames], data: new BigInt64Array(batch * frames).fill(1n) };
  let prev = null, fed = 0;
  const cross = {};
  for (const step of c.steps) {
    const ids = c.ref[`${step}.decoder_input_ids`];
    const f = {};
    for (const meta of decoder.inputMetadata) {
      const name = meta.name;
      if (name === 'input_ids') f[name] = feedFor(ort, meta, ids);
      else if (name === 'encoder_hidden_states') f[name] = hidden;
      else if (name === 'encoder_attention_mask') f[name] = feedFor(ort, meta, encoderMask);
      else if (name === 'use_cache_branch') f[name] = new ort.Tensor('bool', Uint8Array.from([prev ? 1 : 0]), [1]);
      else if (name.startsWith('past_key_values.')) {
        const present = 'present.' + name.slice('past_key_values.'.length);
        if (!prev) f[name] = emptyCache(ort, meta, batch);
        else if (name.includes('.encoder.')) f[name] = cross[present];
        else f[name] = prev[present];
        if (!f[name]) {
          report.results.push(failure(step, '(model)', `no output '${present}' to feed '${name}'`));
          return report;
        }
      } else {
        report.results.push(failure(step, '(model)', `input '${name}' is not one the loop feeds`));
        return report;
      }
    }
    let out;
    try {
      out = await decoder.run(f, { logSeverityLevel: 4 });
    } catch (e) {
      report.results.push(failure(step, '(model)', `run failed: ${e.message}`));
      return report;
    }
    fed += ids.shape[1];
    if (!prev) for (const [name, t] of Object.entries(out)) if (name.includes('.encoder.')) cross[name] = t;
    if (!out.logits) {
      report.results.push(failure(step, 'logits', `no such output (${decoder.outputNames.join(', ')})`));
      return report;
    }
    report.results.push({ step, ...compare('logits', 'logits', out.logits, c.ref[`${step}.logits`], atol, rtol, null) });
    report.results.push(checkCache(step, out, fed, frames, !prev));
    prev = out;
  }
  return report;
}

const args = parseArgs(process.argv.slice(2));
const ort = loadOrt(die);
ort.env.logLevel = 'fatal';  // failures are reported by the harness itself
const report = await run(args, ort);
finishReport(report, args, 'seq2seq parity', (r) => `${r.step}.${r.output}`,
             (r) => (r.output === 'cache' ? 'PASS: every present entry holds the positions fed' : null));
