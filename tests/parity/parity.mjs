// parity.mjs - runs a built model in ONNX Runtime (CPU) through a golden case's steps and compares
// its logits with the reference logits computed by Hugging Face transformers.
//
//   node tests/parity/parity.mjs --model OUT_DIR|model.onnx --case tests/golden/<case>
//                                [--atol X] [--rtol Y] [--top1 RATE] [--json]
//
// A case folder holds case.json (steps, atol, rtol) and reference.safetensors (for every step s:
// s.input_ids, s.attention_mask, s.position_ids, s.logits); see tests/golden/README.md. Steps run
// in order on one growing cache: the first starts from an empty cache built from the model's
// input metadata, each later one feeds the previous step's present.* outputs back as
// past_key_values.*. Logits are compared only where attention_mask is 1, with
// |onnx - expected| <= atol + rtol * |expected|. --atol/--rtol raise the case's tolerance (the
// looser of the two wins), for reduced-precision builds. --top1 RATE judges a quantized build
// instead: a step passes when the model's argmax equals the reference's at no less than RATE
// (0..1) of the compared positions; the max |diff| is still reported.
//
// Exit status: 0 every step passed; 1 a step failed (including a model that does not load or run);
// 2 a usage or I/O error. The last line is "parity: P passed, F failed" (counting steps).
import { idFeeds, halfToFloat, loadCase, loadOrt, modelFile, parseOptions } from './golden_io.mjs';

function die(msg) {
  process.stderr.write(`parity: error: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const a = parseOptions(argv, {
    '--model': ['model', 'string'], '--case': ['caseDir', 'string'], '--atol': ['atol', 'number'],
    '--rtol': ['rtol', 'number'], '--top1': ['top1', 'number'], '--json': ['json', 'flag'],
    '--shared-buffer': ['shared', 'number'],
  }, ['model', 'caseDir'],
  'usage: parity.mjs --model OUT_DIR|model.onnx --case CASE_DIR [--atol X] [--rtol Y] [--top1 RATE] ' +
  '[--shared-buffer MAX] [--json]', die);
  if (a.top1 !== undefined && !(a.top1 >= 0 && a.top1 <= 1)) die('--top1 must be a number from 0 to 1');
  if (a.shared !== undefined && !(Number.isInteger(a.shared) && a.shared > 0))
    die('--shared-buffer must be a positive integer');
  return a;
}

// An empty cache tensor: batch_size is the batch, past_sequence_length `past` (0; with
// --shared-buffer the buffer's length, zeros), numeric dims as given.
function emptyCache(meta, batch, past = 0) {
  const dims = meta.shape.map((d) => {
    if (typeof d === 'number' && d >= 0) return d;
    if (d === 'batch_size') return batch;
    if (d === 'past_sequence_length') return past;
    throw new Error(`cache input '${meta.name}' has dim '${d}' that cannot be sized`);
  });
  const n = dims.reduce((x, y) => x * y, 1);
  const arrays = { float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array };
  const A = arrays[meta.type];
  if (!A) throw new Error(`cache input '${meta.name}' has dtype ${meta.type}`);
  return new ort.Tensor(meta.type, new A(n), dims);
}

function logitsAsFloat(t) {
  if (t.type === 'float32') return t.data;
  if (t.type === 'float16') {
    const d = t.data;
    return d instanceof Uint16Array ? Float32Array.from(d, halfToFloat) : Float32Array.from(d);
  }
  throw new Error(`logits have dtype ${t.type}; expected float32 or float16`);
}

async function runCase(args) {
  const { steps, ref, ...tolerance } = loadCase(args.caseDir, die);
  const atol = Math.max(tolerance.atol, args.atol || 0);
  const rtol = Math.max(tolerance.rtol, args.rtol || 0);
  const file = modelFile(args.model, die);

  const results = [];
  const fail = (step, error) => results.push({ step, pass: false, error });
  let session;
  try {
    session = await ort.InferenceSession.create(file, { logSeverityLevel: 3, executionProviders: ['cpu'] });
  } catch (e) {
    for (const s of steps) fail(s, `the model does not load: ${e.message}`);
    return { atol, rtol, results };
  }
  const inputs = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
  const contract = () => {
    if (!inputs.input_ids) return 'the model has no input_ids input';
    if (!session.outputNames.includes('logits')) return 'the model has no logits output';
    for (const name of session.inputNames) {
      if (['input_ids', 'attention_mask', 'position_ids'].includes(name)) continue;
      if (!name.startsWith('past_key_values.')) return `unknown input '${name}'`;
      const present = 'present.' + name.slice('past_key_values.'.length);
      if (!session.outputNames.includes(present)) return `input '${name}' has no '${present}' output`;
    }
    return null;
  };
  const broken = contract();
  if (broken) {
    for (const s of steps) fail(s, broken);
    return { atol, rtol, results };
  }

  // --shared-buffer MAX: ONNX Runtime GenAI's past_present_share_buffer. Each cache input is one
  // buffer of MAX positions from the first step on, bound as its present output too, so the
  // operator appends in place; the attention mask says how much of it is filled.
  const shared = args.shared;
  let cache = null;  // past_key_values.X -> tensor, from the previous step
  let chainBroken = false;  // a step did not run: the later ones have no cache to start from
  for (const s of steps) {
    if (chainBroken) {
      fail(s, 'not run: the previous step did not produce a cache');
      continue;
    }
    const ids = ref[`${s}.input_ids`], mask = ref[`${s}.attention_mask`];
    const [batch, seq] = ids.shape;
    const total = mask.shape[1];
    let out;
    try {
      const feeds = idFeeds(ort, inputs, ref, s);
      let fetches = null;
      if (shared !== undefined) {
        if (total > shared) throw new Error(`the case needs ${total} positions; --shared-buffer is ${shared}`);
        fetches = { logits: null };
        for (const name of session.outputNames) if (!name.startsWith('present.')) fetches[name] = null;
      }
      for (const name of session.inputNames) {
        if (!name.startsWith('past_key_values.')) continue;
        feeds[name] = cache ? cache[name] : emptyCache(inputs[name], batch, shared ?? 0);
        if (fetches) fetches['present.' + name.slice('past_key_values.'.length)] = feeds[name];
      }
      out = fetches ? await session.run(feeds, fetches, { logSeverityLevel: 4 })
                    : await session.run(feeds, { logSeverityLevel: 4 });
    } catch (e) {
      fail(s, `run failed: ${e.message}`);
      chainBroken = true;
      continue;
    }
    cache = {};
    for (const name of session.outputNames)
      if (name.startsWith('present.')) cache['past_key_values.' + name.slice('present.'.length)] = out[name];

    const expected = ref[`${s}.logits`];
    const vocab = expected.shape[2];
    const got = out.logits;
    const r = { step: s, compared: 0, values: 0, bad: 0, maxAbs: 0, where: null, worst: 0, top1: 0 };
    if (got.dims.length !== 3 || got.dims[0] !== batch || got.dims[1] !== seq || got.dims[2] !== vocab) {
      r.pass = false;
      r.error = `logits shape [${got.dims}] != expected [${batch}, ${seq}, ${vocab}]`;
      results.push(r);
      continue;
    }
    const g = logitsAsFloat(got), e = expected.data;
    for (let b = 0; b < batch; ++b) {
      for (let t = 0; t < seq; ++t) {
        const absPos = total - seq + t;
        if (Number(mask.data[b * total + absPos]) !== 1) continue;
        r.compared++;
        const base = (b * seq + t) * vocab;
        let argG = 0, argE = 0;
        for (let v = 1; v < vocab; ++v) {
          if (g[base + v] > g[base + argG]) argG = v;
          if (e[base + v] > e[base + argE]) argE = v;
        }
        if (argG === argE) r.top1++;
        for (let v = 0; v < vocab; ++v) {
          const x = g[base + v], y = e[base + v];
          r.values++;
          const d = Math.abs(x - y);
          const tol = atol + rtol * Math.abs(y);
          if (!(d <= tol)) {
            r.bad++;
            const ratio = Number.isFinite(d) ? d / tol : Infinity;
            if (ratio > r.worst) r.worst = ratio;
          }
          if (!(d <= r.maxAbs)) {
            r.maxAbs = Number.isNaN(d) ? Infinity : d;
            r.where = { batch: b, token: t, position: absPos, vocab: v, onnx: x, expected: y };
          }
        }
      }
    }
    // With --top1 a step only has to run and stay finite; the agreement is judged over all steps
    // together (a decode step compares a position or two).
    r.pass = args.top1 !== undefined ? r.compared > 0 && Number.isFinite(r.maxAbs)
                                     : r.bad === 0 && r.compared > 0;
    if (r.compared === 0) r.error = 'no unpadded position to compare';
    results.push(r);
  }
  return { atol, rtol, results };
}

const args = parseArgs(process.argv.slice(2));
const ort = loadOrt(die);
ort.env.logLevel = 'fatal';  // failures are reported by the harness itself
const report = await runCase(args);
let passed = 0, failed = 0;
for (const r of report.results) {
  r.pass ? passed++ : failed++;
  if (args.json) continue;
  if (r.error) {
    console.log(`${r.step}: FAIL: ${r.error}`);
    continue;
  }
  const w = r.where;
  const at = w ? ` at batch ${w.batch} token ${w.token} (position ${w.position}) vocab ${w.vocab}: ` +
                 `onnx ${w.onnx} expected ${w.expected}` : '';
  const judged = args.top1 !== undefined ? `top-1 agrees at ${r.top1} of ${r.compared} positions`
                                         : `${r.compared} positions (${r.values} logits) compared (atol ${report.atol}, rtol ${report.rtol})`;
  console.log(`${r.step}: ${r.pass ? 'PASS' : 'FAIL'}: max |diff| ${r.maxAbs.toExponential(3)}${at}; ${judged}`);
  if (!r.pass && args.top1 === undefined)
    console.log(`${r.step}: ${r.bad} values out of tolerance; worst is ${r.worst.toFixed(2)}x the tolerance`);
}
if (args.top1 !== undefined) {
  const agree = report.results.reduce((a, r) => a + (r.top1 || 0), 0);
  const compared = report.results.reduce((a, r) => a + (r.compared || 0), 0);
  const ok = compared > 0 && agree >= args.top1 * compared;
  const line = `top-1 agreement: ${agree} of ${compared} positions ` +
               `(${compared ? (100 * agree / compared).toFixed(1) : 0}%, needed ${(100 * args.top1).toFixed(0)}%)`;
  (args.json ? process.stderr : process.stdout).write(line + '\n');
  if (!ok) failed++;
}
if (args.json) process.stdout.write(JSON.stringify(report, null, 2) + '\n');
(args.json ? process.stderr : process.stdout).write(`parity: ${passed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);
