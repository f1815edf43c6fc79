// right_padding.mjs - a graph on right-padded batches, as ONNX Runtime GenAI pads them, against a
// reference graph of the same checkpoint (the standard-operator build, whose attention reads
// position_ids and the mask as transformers' eager attention does).
//
//   node tests/parity/right_padding.mjs --model OUT --reference REF_OUT --case CASE_DIR
//                                       [--shared-buffer MAX] [--json]
//
// The case's prompt rows keep their real tokens, moved to the front, with the padding after
// them (token 0, mask 0, position 0, as GenAI's PadInputs and position inputs make them); each
// later step of the case feeds its input_ids with the mask grown by a one and each row's
// position its count of real tokens so far. Logits are compared at every real token at the
// case's tolerance. With --shared-buffer, the model's caches are one buffer each, bound as the
// present output too (GenAI's past_present_share_buffer). Exit 0 when every step passes.
import { loadCase, loadOrt, modelFile, parseOptions } from './golden_io.mjs';

function die(msg) {
  process.stderr.write(`right_padding: error: ${msg}\n`);
  process.exit(2);
}

const USAGE = 'usage: right_padding.mjs --model OUT --reference REF_OUT --case CASE_DIR [--shared-buffer MAX]';
const args = parseOptions(process.argv.slice(2), {
  '--model': ['model', 'string'], '--reference': ['reference', 'string'], '--case': ['caseDir', 'string'],
  '--shared-buffer': ['shared', 'number'], '--json': ['json', 'flag'],
}, ['model', 'reference', 'caseDir'], USAGE, die);
const ort = loadOrt(die);
ort.env.logLevel = 'fatal';
const { steps, ref, atol, rtol } = loadCase(args.caseDir, die);

// The steps' inputs, right-padded.
const ids0 = ref[`${steps[0]}.input_ids`], mask0 = ref[`${steps[0]}.attention_mask`];
const [B, S0] = ids0.shape;
const real = [];
for (let b = 0; b < B; b++) {
  const r = [];
  for (let t = 0; t < S0; t++) if (Number(mask0.data[b * S0 + t]) === 1) r.push(ids0.data[b * S0 + t]);
  real.push(r);
}
if (!real.some((r) => r.length < S0)) die(`${args.caseDir}: the prompt has no padded row to move`);
const inputs = [];
{
  const ids = [], mask = [], pos = [];
  for (const r of real)
    for (let t = 0; t < S0; t++) {
      ids.push(t < r.length ? r[t] : 0n);
      mask.push(t < r.length ? 1n : 0n);
      pos.push(BigInt(t < r.length ? t : 0));
    }
  inputs.push({ ids, mask, pos, seq: S0 });
}
let count = real.map((r) => r.length);
for (const s of steps.slice(1)) {
  const ids = ref[`${s}.input_ids`];
  if (ids.shape[1] !== 1) die(`step ${s} feeds ${ids.shape[1]} tokens; this check decodes one at a time`);
  const prev = inputs[inputs.length - 1];
  const width = prev.mask.length / B + 1;
  const mask = [];
  for (let b = 0; b < B; b++) mask.push(...prev.mask.slice(b * (width - 1), (b + 1) * (width - 1)), 1n);
  inputs.push({ ids: Array.from(ids.data), mask, pos: count.map((c) => BigInt(c)), seq: 1 });
  count = count.map((c) => c + 1);
}

async function run(dir, shared) {
  const session = await ort.InferenceSession.create(modelFile(dir, die), { logSeverityLevel: 3 });
  const meta = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
  const out = [];
  let cache = null;
  for (const x of inputs) {
    const total = x.mask.length / B;
    const feeds = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(x.ids), [B, x.seq]),
      attention_mask: new ort.Tensor('int64', BigInt64Array.from(x.mask), [B, total]),
    };
    if (meta.position_ids) feeds.position_ids = new ort.Tensor('int64', BigInt64Array.from(x.pos), [B, x.seq]);
    const fetches = shared ? { logits: null } : null;
    for (const name of session.inputNames) {
      if (!name.startsWith('past_key_values.')) continue;
      if (!cache) {
        const dims = meta[name].shape.map((d) => (typeof d === 'number' ? d : d === 'batch_size' ? B : shared ?? 0));
        cache = cache ?? {};
        cache[name] = new ort.Tensor('float32', new Float32Array(dims.reduce((a, c) => a * c, 1)), dims);
      } else if (!cache[name]) {
        const dims = meta[name].shape.map((d) => (typeof d === 'number' ? d : d === 'batch_size' ? B : shared ?? 0));
        cache[name] = new ort.Tensor('float32', new Float32Array(dims.reduce((a, c) => a * c, 1)), dims);
      }
      feeds[name] = cache[name];
      if (fetches) fetches['present.' + name.slice('past_key_values.'.length)] = feeds[name];
    }
    const r = fetches ? await session.run(feeds, fetches) : await session.run(feeds);
    if (!shared)
      for (const name of session.outputNames)
        if (name.startsWith('present.')) cache['past_key_values.' + name.slice('present.'.length)] = r[name];
    out.push(r.logits.data.slice());
  }
  return out;
}

const got = await run(args.model, args.shared);
const want = await run(args.reference, undefined);
let failed = 0;
const results = [];
inputs.forEach((x, k) => {
  const total = x.mask.length / B;
  const vocab = want[k].length / (B * x.seq);
  let maxAbs = 0, bad = 0, compared = 0;
  for (let b = 0; b < B; b++)
    for (let t = 0; t < x.seq; t++) {
      if (x.mask[b * total + (total - x.seq + t)] !== 1n) continue;
      compared++;
      for (let v = 0; v < vocab; v++) {
        const i = (b * x.seq + t) * vocab + v;
        const d = Math.abs(got[k][i] - want[k][i]);
        maxAbs = Math.max(maxAbs, Number.isNaN(d) ? Infinity : d);
        if (!(d <= atol + rtol * Math.abs(want[k][i]))) bad++;
      }
    }
  const pass = bad === 0 && compared > 0;
  if (!pass) failed++;
  results.push({ step: steps[k], pass, maxAbs, compared });
  if (!args.json)
    console.log(`${steps[k]}: ${pass ? 'PASS' : 'FAIL'}: max |diff| ${maxAbs.toExponential(3)} over ${compared} ` +
                `real tokens (right-padded rows${args.shared ? ', shared buffer' : ''})`);
});
if (args.json) console.log(JSON.stringify(results));
console.log(`right_padding: ${inputs.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
