// genai_state_alias.mjs - runs a hybrid (Qwen3.5) model the way ONNX Runtime GenAI binds its
// recurrent state, and checks that the logits do not change.
//
//   node tests/runtime/genai_state_alias.mjs MODEL_DIR|model.onnx CASE_DIR [--break stale|garbage|twice]
//
// ONNX Runtime GenAI (src/models/recurrent_state.cpp, RecurrentState) allocates ONE buffer per
// past_key_values.N.conv_state / .recurrent_state input, zeroes it once, and binds it both as that
// input and as the matching present.N.* output on every step (share_buffers_ is true on every EP but
// WebGPU unless CUDA-graph capture is on, whatever past_present_share_buffer says); Update() does
// nothing between steps. ONNX Runtime therefore writes present.N.* into the memory it reads
// past_key_values.N.* from, and a graph in which some node reads the past state after the node
// that produces the present state has run computes garbage. Attention key/value caches are not
// aliased when genai_config.json has past_present_share_buffer false (mobius writes false): the
// first step gets a zero-length past, each later step the previous step's present, and every
// present is a fresh buffer of the step's total length (kv_cache.cpp, DefaultKeyValueCache).
//
// This harness runs the golden case's steps (reference.safetensors: s.input_ids,
// s.attention_mask, s.position_ids, s.logits for every step s of case.json) twice per session:
// plainly (outputs fed back as the next step's inputs, as tests/parity/parity.mjs does) and with
// GenAI's binding: the same ort.Tensor object is the feed past_key_values.N.X and the pre-allocated
// fetch present.N.X. It does so for graph optimizations on (ORT's default, "all") and off, with 1
// and 2 intra-op threads. A configuration passes when, at every step,
//   - every aliased state buffer was updated in place (ONNX Runtime honoured the pre-allocated
//     output: the bound buffer's content changed and equals the returned present, which
//     onnxruntime-node 1.30 hands back as a copy), and equals the plain run's present to 1e-5,
//   - the aliased logits equal the plain logits to 1e-5 (max |diff| over all positions), both
//     chained (each step from the aliased run's own state) and with the step alone (from the
//     plain run's state and cache), which tells a step's own error from an inherited one,
//   - the aliased logits match the reference within the case's atol/rtol at unpadded positions.
//
// --break corrupts the aliased run on purpose, to show the check fails: "stale" puts back the
// state each step started from (as if present had been written to other memory), "garbage" fills
// the state with pseudo-random values before every step but the first, "twice" runs every step
// twice on the same buffers (a state read after it was updated, what a bad node order does).
//
// Exit status: 0 every configuration passed; 1 a check failed (or the model did not load or run);
// 2 a usage or I/O error.
import { idFeeds, loadCase, loadOrt, modelFile } from '../parity/golden_io.mjs';

const usage = 'usage: genai_state_alias.mjs MODEL_DIR|model.onnx CASE_DIR [--break stale|garbage|twice]';
function die(msg) {
  process.stderr.write(`genai_state_alias: error: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const a = { positional: [], brk: null };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === '--break') {
      if (i + 1 >= argv.length) die(`--break needs a value; ${usage}`);
      a.brk = argv[++i];
      if (!['stale', 'garbage', 'twice'].includes(a.brk)) die(`unknown --break mode '${a.brk}'; ${usage}`);
    } else if (argv[i].startsWith('--')) {
      die(`unknown option '${argv[i]}'; ${usage}`);
    } else {
      a.positional.push(argv[i]);
    }
  }
  if (a.positional.length !== 2) die(usage);
  [a.model, a.caseDir] = a.positional;
  return a;
}

const ARRAYS = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array };

// A zero tensor for an input: the batch dim is the batch, a past_sequence_length dim is `seq`,
// every other dim must be a number (GenAI's RecurrentState rejects any other dynamic dim).
function zeros(ort, meta, batch, seq) {
  const dims = meta.shape.map((d, i) => {
    if (typeof d === 'number' && d >= 0) return d;
    if (i === 0 && (d === 'batch_size' || typeof d !== 'number')) return batch;
    if (d === 'past_sequence_length') return seq;
    throw new Error(`input '${meta.name}' has dim ${JSON.stringify(d)} at axis ${i} that cannot be sized`);
  });
  const A = ARRAYS[meta.type];
  if (!A) throw new Error(`input '${meta.name}' has dtype ${meta.type}; this harness handles float32 only`);
  return new ort.Tensor(meta.type, new A(dims.reduce((x, y) => x * y, 1)), dims);
}

function maxAbsDiff(a, b) {
  let m = 0;
  for (let i = 0; i < a.length; ++i) {
    const x = a[i], y = b[i];
    if (Number.isNaN(x) && Number.isNaN(y)) continue;
    const d = Math.abs(x - y);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

// Logits against the reference at unpadded positions: max |diff| and whether all are in tolerance.
function compareRef(got, ref, step, atol, rtol) {
  const ids = ref[`${step}.input_ids`], mask = ref[`${step}.attention_mask`], e = ref[`${step}.logits`];
  const [batch, seq] = ids.shape, total = mask.shape[1], vocab = e.shape[2];
  if (got.dims.length !== 3 || got.dims[0] !== batch || got.dims[1] !== seq || got.dims[2] !== vocab)
    return { maxAbs: Infinity, pass: false, error: `logits shape [${got.dims}] != [${batch}, ${seq}, ${vocab}]` };
  let maxAbs = 0, bad = 0, compared = 0;
  for (let b = 0; b < batch; ++b)
    for (let t = 0; t < seq; ++t) {
      if (Number(mask.data[b * total + total - seq + t]) !== 1) continue;
      compared++;
      const base = (b * seq + t) * vocab;
      for (let v = 0; v < vocab; ++v) {
        const x = got.data[base + v], y = e.data[base + v], d = Math.abs(x - y);
        if (!(d <= atol + rtol * Math.abs(y))) bad++;
        if (!(d <= maxAbs)) maxAbs = Number.isNaN(d) ? Infinity : d;
      }
    }
  return { maxAbs, pass: bad === 0 && compared > 0, bad, error: compared ? null : 'no unpadded position' };
}

const STATE_RE = /^past_key_values\.(\d+)\.(conv_state|recurrent_state)$/;
const KV_RE = /^past_key_values\.(\d+)\.(key|value)$/;
const ALIAS_TOL = 1e-5;

// One pass over the steps. aliased=false: parity.mjs's way. aliased=true: GenAI's way.
// resync (aliased only): the plain pass; every step then starts from the plain pass's state and
// key/value cache instead of the aliased pass's own, so a step's error is its own, not inherited.
async function runSteps(ort, session, ref, steps, aliased, brk, resync = null) {
  const meta = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
  const batch = ref[`${steps[0]}.input_ids`].shape[0];
  const stateNames = session.inputNames.filter((n) => STATE_RE.test(n));
  const kvNames = session.inputNames.filter((n) => KV_RE.test(n));
  const other = session.inputNames.filter((n) => !STATE_RE.test(n) && !KV_RE.test(n) &&
                                                 !['input_ids', 'attention_mask', 'position_ids'].includes(n));
  if (other.length) throw new Error(`unexpected inputs ${other.join(', ')}`);
  for (const n of [...stateNames, ...kvNames]) {
    const present = 'present.' + n.slice('past_key_values.'.length);
    if (!session.outputNames.includes(present)) throw new Error(`input '${n}' has no output '${present}'`);
  }

  // GenAI: one zeroed buffer per state, created once, never swapped (recurrent_state.cpp).
  const states = Object.fromEntries(stateNames.map((n) => [n, zeros(ort, meta[n], batch, 0)]));
  let kv = Object.fromEntries(kvNames.map((n) => [n, zeros(ort, meta[n], batch, 0)]));
  let plainStates = null;
  const perStep = [];
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;

  for (const [si, s] of steps.entries()) {
    const total = ref[`${s}.attention_mask`].shape[1];
    const feeds = idFeeds(ort, meta, ref, s);
    if (resync && si > 0) {
      for (const n of stateNames) states[n].data.set(resync.perStep[si - 1].stateSnapshot[n]);
      kv = resync.perStep[si - 1].kv;
    }
    Object.assign(feeds, kv);
    const rec = { step: s };
    let out;
    if (!aliased) {
      for (const n of stateNames) feeds[n] = plainStates ? plainStates[n] : zeros(ort, meta[n], batch, 0);
      out = await session.run(feeds);
      plainStates = {};
      for (const n of stateNames) plainStates[n] = out['present.' + n.slice('past_key_values.'.length)];
    } else {
      if (brk === 'garbage' && si > 0)
        for (const n of stateNames) states[n].data.forEach((_, i, a) => { a[i] = rand(); });
      const before = Object.fromEntries(stateNames.map((n) => [n, Float32Array.from(states[n].data)]));
      const fetches = {};
      for (const o of session.outputNames) fetches[o] = null;
      for (const n of stateNames) {
        feeds[n] = states[n];
        fetches['present.' + n.slice('past_key_values.'.length)] = states[n];  // the same object
      }
      // GenAI (kv_cache.cpp, Update): each present key/value a fresh [batch, heads, total, head] buffer.
      for (const n of kvNames) {
        const m = meta[n];
        fetches['present.' + n.slice('past_key_values.'.length)] =
          new ort.Tensor(m.type, new ARRAYS[m.type](batch * m.shape[1] * total * m.shape[3]),
                         [batch, m.shape[1], total, m.shape[3]]);
      }
      out = await session.run(feeds, fetches);
      if (brk === 'twice') out = await session.run(feeds, fetches);
      // Did ONNX Runtime write the state into the bound memory? onnxruntime-node returns a new
      // tensor for a pre-allocated output (1.30: a copy in a new ArrayBuffer), so compare contents:
      // the bound buffer must have changed and must hold what was returned.
      rec.inPlace = true;
      rec.notInPlace = [];
      for (const n of stateNames) {
        const o = out['present.' + n.slice('past_key_values.'.length)];
        const changed = maxAbsDiff(before[n], states[n].data) > 0;
        const holds = o && o.data.length === states[n].data.length && maxAbsDiff(o.data, states[n].data) === 0;
        if (!changed || !holds) {
          rec.inPlace = false;
          rec.notInPlace.push(`${n}${changed ? '' : ' (unchanged)'}${holds ? '' : ' (differs from the returned present)'}`);
        }
      }
      rec.stateSnapshot = Object.fromEntries(stateNames.map((n) => [n, Float32Array.from(states[n].data)]));
      if (brk === 'stale')
        for (const n of stateNames) states[n].data.set(before[n]);
    }
    const nextKv = {};
    for (const n of kvNames) nextKv[n] = out['present.' + n.slice('past_key_values.'.length)];
    kv = nextKv;
    rec.kv = nextKv;
    rec.logits = out.logits;
    if (!aliased) rec.stateSnapshot = Object.fromEntries(stateNames.map((n) => [n, plainStates[n].data]));
    perStep.push(rec);
  }
  return { perStep, stateNames };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { steps, ref, atol, rtol } = loadCase(args.caseDir, die);
  const file = modelFile(args.model, die);
  const ort = loadOrt(die);
  ort.env.logLevel = 'fatal';

  let failed = 0, passed = 0;
  for (const opt of ['all', 'disabled']) {
    for (const threads of [1, 2]) {
      const label = `opt=${opt} threads=${threads}`;
      let session;
      try {
        session = await ort.InferenceSession.create(file, {
          executionProviders: ['cpu'], graphOptimizationLevel: opt, intraOpNumThreads: threads,
          interOpNumThreads: 1, executionMode: 'sequential', logSeverityLevel: 3,
        });
      } catch (e) {
        console.log(`${label}: FAIL: the model does not load: ${e.message}`);
        failed++;
        continue;
      }
      let plain, alias, isolated;
      try {
        plain = await runSteps(ort, session, ref, steps, false, null);
        alias = await runSteps(ort, session, ref, steps, true, args.brk);
        isolated = await runSteps(ort, session, ref, steps, true, args.brk, plain);
      } catch (e) {
        console.log(`${label}: FAIL: run failed: ${e.message}`);
        failed++;
        await session.release();
        continue;
      }
      if (!alias.stateNames.length) {
        console.log(`${label}: FAIL: the model has no past_key_values.N.conv_state/recurrent_state input`);
        failed++;
        await session.release();
        continue;
      }
      let ok = true;
      for (let i = 0; i < steps.length; ++i) {
        const p = plain.perStep[i], a = alias.perStep[i], iso = isolated.perStep[i];
        const dLogits = maxAbsDiff(a.logits.data, p.logits.data);
        const dIso = maxAbsDiff(iso.logits.data, p.logits.data);
        let dState = 0;
        for (const n of alias.stateNames)
          dState = Math.max(dState, maxAbsDiff(a.stateSnapshot[n], p.stateSnapshot[n]));
        const ra = compareRef(a.logits, ref, steps[i], atol, rtol);
        const rp = compareRef(p.logits, ref, steps[i], atol, rtol);
        const problems = [];
        if (!a.inPlace) problems.push(`state not updated in place: ${a.notInPlace.join(', ')}`);
        if (!(dState <= ALIAS_TOL)) problems.push(`aliased state != plain present`);
        if (!(dLogits <= ALIAS_TOL)) problems.push(`aliased logits != plain logits`);
        if (!(dIso <= ALIAS_TOL)) problems.push(`this step alone, from the plain state, gives other logits`);
        if (!iso.inPlace) problems.push(`state not updated in place (step alone): ${iso.notInPlace.join(', ')}`);
        if (!ra.pass) problems.push(`aliased logits out of tolerance (${ra.error || ra.bad + ' values'})`);
        const stepOk = problems.length === 0;
        ok &&= stepOk;
        console.log(`${label} ${steps[i]}: ${stepOk ? 'PASS' : 'FAIL'}: aliased-vs-plain logits ` +
                    `${dLogits.toExponential(3)} (step alone ${dIso.toExponential(3)}), state ${dState.toExponential(3)}; ` +
                    `vs reference: aliased ` +
                    `${ra.maxAbs.toExponential(3)}, plain ${rp.maxAbs.toExponential(3)} (atol ${atol}, rtol ${rtol})` +
                    (stepOk ? '' : `; ${problems.join('; ')}`));
      }
      ok ? passed++ : failed++;
      await session.release();
    }
  }
  console.log(`genai_state_alias: ${passed} passed, ${failed} failed (configurations)` +
              (args.brk ? ` [--break ${args.brk}]` : ''));
  process.exit(failed ? 1 : 0);
}

await main();
