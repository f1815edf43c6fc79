// decode.mjs - decode-speed measurements of one or more model folders (model.onnx, and config.json
// or, where a converter writes none, as ONNX Runtime GenAI's model builder, genai_config.json) with
// onnxruntime-node on the CPU, each measurement in a fresh child process so its peak RSS is that
// model's alone.
//
// usage: node bench/decode.mjs [--reps N] [--steps N] [--prompt N] [--long N] [--out FILE]
//                              [--dump DIR] MODEL_DIR...
//   --reps N     measurements per model, the best of each metric is kept (default 1); the model
//                order alternates between repetitions
//   --steps N    timed decode steps per context length, the median is reported (default 16)
//   --prompt N   prefill length, and the first decode context (default 128)
//   --long N     the second decode context (default 1024; 0 skips it)
//   --dump DIR   writes DIR/<basename of MODEL_DIR>.{prefill,decode}.f32: the logits of the prompt
//                and of the first 4 decode steps after it (bench/compare_logits.mjs compares them)
//   --out FILE   also writes the results as JSON
//   --threads N  ONNX Runtime's intra-op threads (default 2)
//   --max-other F   a measurement during which other processes used more than F of the machine's
//                CPU (default 0.05) is repeated, up to --retries N times (default 4), keeping the
//                least contended; before each one, waits up to --quiet-wait S seconds (default 600)
//                for a 2-second window under F. For shared machines.
//   --wait-quiet only waits for such a window, then exits (bench/decode.sh runs it before the floor)
//   --paired     takes the models in pairs A B and measures each pair in one process: session
//                creation alternately (--creations N each, default 6, even, the median), and at each
//                context their decode steps interleaved, the median of the ratios of neighbouring
//                steps (A/B). Prints one JSON object per pair: over 2 * ceil(--reps / 2) runs
//                alternating which model is opened first, the geometric mean of the ratios.
// Prints one JSON object per model: create_s, rss_create_mib, peak_rss_mib, prefill_ms,
// prefill_long_ms, decode_ms (at the prompt length), decode_long_ms, the fastest single steps
// (decode_min_ms, decode_long_min_ms) and other_cpu, the share of the machine's CPU that other
// processes used during the measurement (with --reps, the highest of the repetitions kept; every
// other number is the best of them), ort_warnings: how many warnings ONNX Runtime logged (loading
// the graph, mostly), and the first of them.
//
// The graph's inputs are read from the session and fed generically: input_ids, attention_mask,
// position_ids when present, and every past_* input from the previous run's matching present_*
// output (past_key_values.N.key <- present.N.key); any other input is an error. Past tensors start
// empty, sized from the input metadata and config.json. Timed decode steps write their outputs into
// preallocated buffers (two per past input, alternating) so the timing is the graph's, not a copy
// of the KV cache into JavaScript memory. Batch 1, no padding.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const self = fileURLToPath(import.meta.url);

function parseArgs(argv) {
  const o = {
    reps: 1, steps: 16, prompt: 128, long: 1024, out: '', dump: '', child: false, models: [],
    maxOther: 0.05, retries: 4, quietWait: 600, waitQuiet: false, paired: false, creations: 6, threads: 2,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--child') o.child = true;
    else if (a === '--wait-quiet') o.waitQuiet = true;
    else if (a === '--paired') o.paired = true;
    else if (['--reps', '--steps', '--prompt', '--long', '--retries', '--creations', '--threads'].includes(a)) o[a.slice(2)] = Number(argv[++i]);
    else if (a === '--max-other') o.maxOther = Number(argv[++i]);
    else if (a === '--quiet-wait') o.quietWait = Number(argv[++i]);
    else if (a === '--out' || a === '--dump') o[a.slice(2)] = argv[++i];
    else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
    else o.models.push(a);
  }
  if (!o.models.length && !o.waitQuiet) throw new Error('usage: node bench/decode.mjs [options] MODEL_DIR...');
  if (o.paired && o.models.length % 2) throw new Error('--paired takes models in pairs: A B [C D ...]');
  return o;
}

// Deterministic token ids, the same for every model: the prompt, then the decode steps' inputs.
function tokens(n, vocab, seed) {
  const out = new Array(n);
  let s = BigInt(seed) * 6364136223846793005n + 1442695040888963407n;
  for (let i = 0; i < n; i++) {
    s = (s * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn;
    out[i] = 3 + Number((s >> 33n) % BigInt(vocab - 3));
  }
  return out;
}

function statusKiB(field) {
  const m = readFileSync('/proc/self/status', 'utf8').match(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm'));
  return m ? Number(m[1]) : NaN;
}

// CPU time of the whole machine (all cores, jiffies) and of this process: what other processes
// took during a measurement is the difference, a check that the numbers are not contended.
function cpuJiffies() {
  const all = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const busy = all.reduce((a, b) => a + b, 0) - all[3] - (all[4] || 0); // minus idle, iowait
  const self = readFileSync('/proc/self/stat', 'utf8');
  const f = self.slice(self.lastIndexOf(')') + 2).split(' ');
  return { busy, total: all.reduce((a, b) => a + b, 0), self: Number(f[11]) + Number(f[12]) };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

// ---------------------------------------------------------------------------------------------
// A model's session and how to feed it.

// The shape the feeds need, from the folder's config.json, or from ONNX Runtime GenAI's
// genai_config.json where a converter writes no config.json (GenAI's model builder).
function readConfig(dir) {
  if (existsSync(join(dir, 'config.json'))) return JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  const m = JSON.parse(readFileSync(join(dir, 'genai_config.json'), 'utf8')).model;
  return {
    head_dim: m.decoder.head_size, num_attention_heads: m.decoder.num_attention_heads,
    num_key_value_heads: m.decoder.num_key_value_heads, hidden_size: m.decoder.hidden_size,
    vocab_size: m.vocab_size, max_position_embeddings: m.context_length,
  };
}

async function openModel(ort, dirArg, opts) {
  const dir = resolve(dirArg);
  const cfg = readConfig(dir);
  const headDim = cfg.head_dim ?? cfg.hidden_size / cfg.num_attention_heads;
  const kvHeads = cfg.num_key_value_heads ?? cfg.num_attention_heads;
  const vocab = cfg.vocab_size;
  const maxPos = cfg.max_position_embeddings ?? Infinity;
  if (Math.max(opts.prompt, opts.long) + opts.steps + 2 > maxPos)
    throw new Error(`${dir}: max_position_embeddings ${maxPos} is shorter than the longest context ` +
      `(${Math.max(opts.prompt, opts.long)} + ${opts.steps + 2} decode steps)`);

  const sessionOptions = { intraOpNumThreads: opts.threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all' };
  // Two sessions in one process (--paired): a pool's threads spinning after a run would take the
  // cores from the other session's run.
  if (opts.paired) sessionOptions.extra = { session: { intra_op: { allow_spinning: '0' } } };
  const create = async () => {
    const t0 = performance.now();
    const s = await ort.InferenceSession.create(join(dir, 'model.onnx'), sessionOptions);
    return [s, (performance.now() - t0) / 1000];
  };
  const [session, createS] = await create();

  const meta = new Map((session.inputMetadata ?? []).map((m) => [m.name, m]));
  const pastNames = session.inputNames.filter((n) => n.startsWith('past'));
  const presentOf = (p) =>
    p.startsWith('past_key_values.') ? 'present.' + p.slice('past_key_values.'.length) : p.replace(/^past/, 'present');
  for (const p of pastNames)
    if (!session.outputNames.includes(presentOf(p))) throw new Error(`${p}: no output ${presentOf(p)}`);
  for (const n of session.inputNames)
    if (!['input_ids', 'attention_mask', 'position_ids'].includes(n) && !pastNames.includes(n))
      throw new Error(`input ${n} is not one this benchmark knows how to feed`);

  // An empty past: [batch 1, kv heads, 0, head dim] from the metadata, symbolic dims from config.
  function emptyPast(name) {
    const shape = meta.get(name)?.shape ?? [1, kvHeads, 0, headDim];
    const dims = shape.map((d, i) => {
      if (typeof d === 'number' && d >= 0) return d;
      if (i === 0) return 1;
      if (i === shape.length - 2) return 0;
      if (i === 1) return kvHeads;
      return headDim;
    });
    const n = dims.reduce((a, b) => a * b, 1);
    // float16 caches (an f16 build) are fed as their raw 16-bit words.
    return meta.get(name)?.type === 'float16'
      ? new ort.Tensor('float16', new Uint16Array(n), dims)
      : new ort.Tensor('float32', new Float32Array(n), dims);
  }

  function feeds(ids, past, pastLen) {
    const S = ids.length;
    const f = {};
    for (const n of session.inputNames) {
      if (n === 'input_ids') f[n] = new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, S]);
      else if (n === 'attention_mask') f[n] = new ort.Tensor('int64', new BigInt64Array(pastLen + S).fill(1n), [1, pastLen + S]);
      else if (n === 'position_ids')
        f[n] = new ort.Tensor('int64', BigInt64Array.from({ length: S }, (_, i) => BigInt(pastLen + i)), [1, S]);
      else f[n] = past ? past[n] : emptyPast(n);
    }
    return f;
  }
  const pastFrom = (out) => Object.fromEntries(pastNames.map((p) => [p, out[presentOf(p)]]));

  async function prefill(ids) {
    const t = performance.now();
    const out = await session.run(feeds(ids, null, 0));
    return [performance.now() - t, out];
  }

  // A decoder continuing from a prefill's outputs, for at most `n` steps: step(id) runs one
  // token and returns its time in ms; the first step (ORT-allocated, untimed by callers) shows
  // which axis of each present grows with the context. Later steps write into preallocated
  // buffers: two per past input, sized for the longest context, of the past's own element type;
  // a step reads its past from one and writes its present into the other.
  function decoder(prefillOut, pastLen, n) {
    let past = pastFrom(prefillOut);
    let bufs = null, axis = null, s = 0;
    const logitsBuf = new Float32Array(vocab);
    const total = pastLen + n + 1;
    const d = { last: null };
    d.step = async (id) => {
      if (s === 0) {
        const t = performance.now();
        const out = await session.run(feeds([id], past, pastLen));
        const ms = performance.now() - t;
        axis = {};
        for (const p of pastNames) {
          const a = past[p].dims, b = out[presentOf(p)].dims;
          axis[p] = a.findIndex((dd, i) => b[i] === dd + 1);
        }
        past = pastFrom(out);
        if (pastNames.every((p) => axis[p] >= 0)) {
          bufs = {};
          for (const p of pastNames) {
            const t0 = past[p];
            const per = t0.dims.reduce((x, y, i) => (i === axis[p] ? x : x * y), 1);
            bufs[p] = [new t0.data.constructor(per * total), new t0.data.constructor(per * total)];
            bufs[p][0].set(t0.data); // once, untimed
            past[p] = new ort.Tensor(t0.type, bufs[p][0].subarray(0, t0.data.length), t0.dims);
          }
        }
        d.last = out.logits.data;
        pastLen += 1;
        s += 1;
        return ms;
      }
      let fetches;
      if (bufs) {
        // The logits' own dtype (float32 in every graph here); only the caches may be float16.
        fetches = { logits: new ort.Tensor('float32', logitsBuf, [1, 1, vocab]) };
        for (const p of pastNames) {
          const dims = past[p].dims.map((dd, i) => (i === axis[p] ? dd + 1 : dd));
          const m = dims.reduce((x, y) => x * y, 1);
          fetches[presentOf(p)] = new ort.Tensor(past[p].type, bufs[p][s % 2].subarray(0, m), dims);
        }
      }
      const f = feeds([id], past, pastLen);
      const t = performance.now();
      const out = fetches ? await session.run(f, fetches) : await session.run(f);
      const ms = performance.now() - t;
      if (fetches) {
        for (const p of pastNames) past[p] = fetches[presentOf(p)];
        d.last = logitsBuf;
      } else {
        past = pastFrom(out);
        d.last = out.logits.data;
      }
      pastLen += 1;
      s += 1;
      return ms;
    };
    return d;
  }

  return { dir, vocab, session, createS, create, prefill, decoder };
}

// ---------------------------------------------------------------------------------------------
// The child: one model, one measurement.

async function child(opts) {
  const ort = require('onnxruntime-node');
  const cpu0 = cpuJiffies();
  const m = await openModel(ort, opts.models[0], opts);
  const rssCreate = statusKiB('VmHWM');

  // Decode `2 + steps` tokens after a prefill's outputs; returns the median of the timed steps,
  // the logits of the first `keep` steps and the fastest step.
  async function decode(prefillOut, pastLen, stepIds, keep) {
    const d = m.decoder(prefillOut, pastLen, stepIds.length);
    const logits = [];
    const times = [];
    for (let s = 0; s < stepIds.length; s++) {
      const ms = await d.step(stepIds[s]);
      if (s > 0) times.push(ms);
      if (logits.length < keep) logits.push(d.last.slice());
    }
    return [median(times.slice(1)), logits, Math.min(...times.slice(1))]; // the first is one more warm-up
  }

  const res = { model: m.dir, create_s: m.createS, rss_create_mib: rssCreate / 1024 };
  const P = opts.prompt;
  const prompt = tokens(Math.max(P, opts.long), m.vocab, 1);
  const steps = tokens(opts.steps + 2, m.vocab, 2);

  // Prefill of the prompt: one warm-up, the best of three.
  let [, out] = await m.prefill(prompt.slice(0, P));
  const prefillLogits = out.logits.data.slice();
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    let ms;
    [ms, out] = await m.prefill(prompt.slice(0, P));
    best = Math.min(best, ms);
  }
  res.prefill_ms = best;
  const [dms, decodeLogits, dmin] = await decode(out, P, steps, 4);
  res.decode_ms = dms;
  res.decode_min_ms = dmin;
  out = null;
  if (opts.dump) {
    mkdirSync(opts.dump, { recursive: true });
    const name = basename(m.dir);
    writeFileSync(join(opts.dump, `${name}.prefill.f32`), Buffer.from(prefillLogits.buffer));
    const d = new Float32Array(decodeLogits.length * m.vocab);
    decodeLogits.forEach((l, i) => d.set(l, i * m.vocab));
    writeFileSync(join(opts.dump, `${name}.decode.f32`), Buffer.from(d.buffer));
  }
  if (opts.long > 0) {
    const [ms, outLong] = await m.prefill(prompt.slice(0, opts.long));
    res.prefill_long_ms = ms;
    [res.decode_long_ms, , res.decode_long_min_ms] = await decode(outLong, opts.long, steps, 0);
  }
  res.peak_rss_mib = statusKiB('VmHWM') / 1024;
  const cpu1 = cpuJiffies();
  // Share of the machine's CPU capacity other processes used meanwhile (0: a quiet machine).
  res.other_cpu = Math.max(0, (cpu1.busy - cpu0.busy) - (cpu1.self - cpu0.self)) / Math.max(1, cpu1.total - cpu0.total);
  process.stdout.write(JSON.stringify(res) + '\n');
}

// ---------------------------------------------------------------------------------------------
// The paired child: two models in one process, their steps interleaved (A B, then B A, ...), so
// both see the same machine from one moment to the next. Memory bandwidth on a shared machine
// drifts by 10% or more between processes; a ratio of neighbouring steps does not.

async function paired(opts) {
  const ort = require('onnxruntime-node');
  const cpu0 = cpuJiffies();
  const [A, B] = [await openModel(ort, opts.models[0], opts), await openModel(ort, opts.models[1], opts)];
  const res = { a: A.dir, b: B.dir };
  // Session creation: alternately (A B, then B A: an even count), each new session released
  // before the next; the sessions opened above were the warm-up.
  const ca = [], cb = [];
  for (let i = 0; i < 2 * Math.ceil(opts.creations / 2); i++) {
    for (const [m, xs] of i % 2 ? [[B, cb], [A, ca]] : [[A, ca], [B, cb]]) {
      const [s, sec] = await m.create();
      xs.push(sec);
      await s.release();
    }
  }
  res.create_a_s = median(ca);
  res.create_b_s = median(cb);
  res.create_ratio = median(ca) / median(cb);
  const contexts = [opts.prompt, ...(opts.long > 0 ? [opts.long] : [])];
  res.contexts = [];
  for (const P of contexts) {
    const prompt = tokens(P, A.vocab, 1);
    const steps = tokens(opts.steps + 2, A.vocab, 2);
    const da = A.decoder((await A.prefill(prompt))[1], P, steps.length);
    const db = B.decoder((await B.prefill(prompt))[1], P, steps.length);
    const ta = [], tb = [], ratios = [];
    for (let s = 0; s < steps.length; s++) {
      let a, b;
      if (s % 2) {
        b = await db.step(steps[s]);
        a = await da.step(steps[s]);
      } else {
        a = await da.step(steps[s]);
        b = await db.step(steps[s]);
      }
      if (s < 2) continue; // the untimed first step and one warm-up
      ta.push(a);
      tb.push(b);
      ratios.push(a / b);
    }
    res.contexts.push({ past: P, a_ms: median(ta), b_ms: median(tb), ratio: median(ratios),
      a_min_ms: Math.min(...ta), b_min_ms: Math.min(...tb) });
  }
  const cpu1 = cpuJiffies();
  res.other_cpu = Math.max(0, (cpu1.busy - cpu0.busy) - (cpu1.self - cpu0.self)) / Math.max(1, cpu1.total - cpu0.total);
  process.stdout.write(JSON.stringify(res) + '\n');
}
// ---------------------------------------------------------------------------------------------
// The parent: one fresh child per measurement.

function runChild(model, opts) {
  const args = [self, '--child', '--steps', String(opts.steps), '--prompt', String(opts.prompt), '--long', String(opts.long),
    '--threads', String(opts.threads)];
  if (opts.dump) args.push('--dump', opts.dump);
  if (opts.paired) args.push('--paired', '--creations', String(opts.creations));
  args.push(...[model].flat());
  return new Promise((res, rej) => {
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('close', (code) => {
      // ONNX Runtime's warnings (loading the graph) are counted, not echoed; anything else is shown.
      const lines = err.split('\n').filter((l) => l.trim());
      const warn = lines.filter((l) => /\[W:onnxruntime/.test(l));
      const other = lines.filter((l) => !/\[W:onnxruntime/.test(l));
      if (code !== 0) {
        process.stderr.write(err);
        return rej(new Error(`${model}: child exited with ${code}`));
      }
      if (other.length) process.stderr.write(other.join('\n') + '\n');
      try {
        const r = JSON.parse(out.trim().split('\n').pop());
        r.ort_warnings = warn.length;
        if (warn.length) r.ort_warning_first = warn[0].replace(/\x1b\[[0-9;]*m/g, '').replace(/^.*?\[W:onnxruntime:[^\]]*\]\s*/, '');
        res(r);
      } catch (e) {
        rej(new Error(`${model}: no result (${e.message})`));
      }
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The machine's busy share over a 2-second window.
async function busyShare() {
  const a = cpuJiffies();
  await sleep(2000);
  const b = cpuJiffies();
  return (b.busy - a.busy) / Math.max(1, b.total - a.total);
}

async function waitQuiet(opts) {
  const until = Date.now() + opts.quietWait * 1000;
  let said = false;
  for (;;) {
    const share = await busyShare();
    if (share <= opts.maxOther || Date.now() > until) return share;
    if (!said) console.error(`decode.mjs: the machine is busy (${(100 * share).toFixed(0)}% CPU), waiting`);
    said = true;
    await sleep(3000);
  }
}

// One measurement (of a model, or with --paired of a pair), repeated while other processes took more than --max-other of the CPU.
async function measure(model, opts) {
  let least = null;
  for (let attempt = 0; attempt <= opts.retries; attempt++) {
    await waitQuiet(opts);
    const r = await runChild(model, opts);
    if (!least || r.other_cpu < least.other_cpu) least = r;
    if (r.other_cpu <= opts.maxOther) break;
    console.error(`decode.mjs: ${[model].flat().map((x) => basename(x)).join(" vs ")}: other processes took ${(100 * r.other_cpu).toFixed(0)}% of the CPU` +
      (attempt < opts.retries ? ', measuring again' : ', keeping the least contended measurement'));
  }
  return least;
}

async function parent(opts) {
  if (opts.waitQuiet) {
    const share = await waitQuiet(opts);
    if (share > opts.maxOther) console.error(`decode.mjs: still busy (${(100 * share).toFixed(0)}% CPU), going on`);
    return;
  }
  if (opts.paired) return parentPaired(opts);
  const best = new Map();
  for (let rep = 0; rep < opts.reps; rep++) {
    const order = rep % 2 ? [...opts.models].reverse() : opts.models;
    for (const m of order) {
      const r = await measure(m, opts);
      const b = best.get(m);
      if (!b) best.set(m, r);
      else
        for (const [k, v] of Object.entries(r))
          if (typeof v === 'number' && (k === 'other_cpu' ? v > b[k] : v < b[k])) b[k] = v;
    }
  }
  const all = opts.models.map((m) => best.get(m));
  for (const r of all) process.stdout.write(JSON.stringify(r) + '\n');
  if (opts.out) writeFileSync(opts.out, JSON.stringify(all, null, 1) + '\n');
}

// --paired: each pair measured in 2 * ceil(--reps / 2) fresh children, the second of every two
// with the models opened in the other order: the session opened first in a process decodes
// measurably slower than the second (about 6% here, whichever graph it is; the memory each
// gets), so the order alternates and each ratio is the geometric mean over the children (A/B
// in every one), which cancels that. Times are medians over the children.
async function parentPaired(opts) {
  const all = [];
  const geo = (xs) => Math.exp(xs.reduce((a, x) => a + Math.log(x), 0) / xs.length);
  for (let i = 0; i < opts.models.length; i += 2) {
    const [A, B] = [opts.models[i], opts.models[i + 1]];
    const reps = [];
    for (let rep = 0; rep < 2 * Math.ceil(opts.reps / 2); rep++) {
      const swapped = rep % 2 === 1;
      const x = await measure(swapped ? [B, A] : [A, B], opts);
      if (!swapped) {
        reps.push({ ...x, swapped });
        continue;
      }
      // Back to A and B: a child's "a" was B.
      reps.push({
        a: x.b, b: x.a, swapped, other_cpu: x.other_cpu,
        create_a_s: x.create_b_s, create_b_s: x.create_a_s, create_ratio: 1 / x.create_ratio,
        contexts: x.contexts.map((c) => ({ past: c.past, a_ms: c.b_ms, b_ms: c.a_ms, ratio: 1 / c.ratio })),
      });
    }
    const med = (get) => median(reps.map(get));
    const r = {
      a: resolve(A), b: resolve(B), reps: reps.length,
      create_a_s: med((x) => x.create_a_s), create_b_s: med((x) => x.create_b_s),
      create_ratio: geo(reps.map((x) => x.create_ratio)),
      contexts: reps[0].contexts.map((c, k) => ({
        past: c.past,
        a_ms: med((x) => x.contexts[k].a_ms), b_ms: med((x) => x.contexts[k].b_ms),
        ratio: geo(reps.map((x) => x.contexts[k].ratio)),
        ratio_each: reps.map((x) => x.contexts[k].ratio),
      })),
      other_cpu: Math.max(...reps.map((x) => x.other_cpu)),
    };
    process.stdout.write(JSON.stringify(r) + '\n');
    all.push(r);
  }
  if (opts.out) writeFileSync(opts.out, JSON.stringify(all, null, 1) + '\n');
}

const opts = parseArgs(process.argv.slice(2));
(opts.child ? (opts.paired ? paired(opts) : child(opts)) : parent(opts)).catch((e) => {
  console.error(`decode.mjs: ${e.stack || e.message}`);
  process.exit(1);
});
