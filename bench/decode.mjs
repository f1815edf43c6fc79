// decode.mjs - decode-speed measurements of one or more model folders (model.onnx + config.json)
// with onnxruntime-node on the CPU, each measurement in a fresh child process so its peak RSS is
// that model's alone.
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
//   --max-other F   a measurement during which other processes used more than F of the machine's
//                CPU (default 0.05) is repeated, up to --retries N times (default 4), keeping the
//                least contended; before each one, waits up to --quiet-wait S seconds (default 600)
//                for a 2-second window under F. For shared machines.
//   --wait-quiet only waits for such a window, then exits (bench/decode.sh runs it before the floor)
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
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const self = fileURLToPath(import.meta.url);

function parseArgs(argv) {
  const o = {
    reps: 1, steps: 16, prompt: 128, long: 1024, out: '', dump: '', child: false, models: [],
    maxOther: 0.05, retries: 4, quietWait: 600, waitQuiet: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--child') o.child = true;
    else if (a === '--wait-quiet') o.waitQuiet = true;
    else if (['--reps', '--steps', '--prompt', '--long', '--retries'].includes(a)) o[a.slice(2)] = Number(argv[++i]);
    else if (a === '--max-other') o.maxOther = Number(argv[++i]);
    else if (a === '--quiet-wait') o.quietWait = Number(argv[++i]);
    else if (a === '--out' || a === '--dump') o[a.slice(2)] = argv[++i];
    else if (a.startsWith('--')) throw new Error(`unknown option ${a}`);
    else o.models.push(a);
  }
  if (!o.models.length && !o.waitQuiet) throw new Error('usage: node bench/decode.mjs [options] MODEL_DIR...');
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
// The child: one model, one measurement.

async function child(opts) {
  const ort = require('onnxruntime-node');
  const dir = resolve(opts.models[0]);
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  const headDim = cfg.head_dim ?? cfg.hidden_size / cfg.num_attention_heads;
  const kvHeads = cfg.num_key_value_heads ?? cfg.num_attention_heads;
  const vocab = cfg.vocab_size;
  const maxPos = cfg.max_position_embeddings ?? Infinity;
  if (Math.max(opts.prompt, opts.long) + opts.steps + 2 > maxPos)
    throw new Error(`${dir}: max_position_embeddings ${maxPos} is shorter than the longest context ` +
      `(${Math.max(opts.prompt, opts.long)} + ${opts.steps + 2} decode steps)`);

  const cpu0 = cpuJiffies();
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(join(dir, 'model.onnx'), {
    intraOpNumThreads: 2,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const createS = (performance.now() - t0) / 1000;
  const rssCreate = statusKiB('VmHWM');

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

  // Decode `2 + steps` tokens after a prefill's outputs; returns the median of the timed steps and
  // the logits of the first `keep` steps.
  async function decode(prefillOut, pastLen, stepIds, keep) {
    const logits = [];
    let past = pastFrom(prefillOut);
    // Step 1, ORT-allocated: shows which axis of each present grows with the context.
    let out = await session.run(feeds([stepIds[0]], past, pastLen));
    logits.push(out.logits.data.slice());
    const axis = {};
    for (const p of pastNames) {
      const a = past[p].dims, b = out[presentOf(p)].dims;
      axis[p] = a.findIndex((d, i) => b[i] === d + 1);
    }
    past = pastFrom(out);
    pastLen += 1;
    const growing = pastNames.every((p) => axis[p] >= 0);
    const total = pastLen + stepIds.length + 1;
    let bufs = null;
    if (growing) {
      // Two buffers per past input, sized for the longest context, of the past's own element type;
      // a step reads its past from one and writes its present into the other.
      bufs = {};
      for (const p of pastNames) {
        const t = past[p];
        const per = t.dims.reduce((x, y, i) => (i === axis[p] ? x : x * y), 1);
        bufs[p] = [new t.data.constructor(per * total), new t.data.constructor(per * total)];
        bufs[p][0].set(t.data); // once, untimed
        past[p] = new ort.Tensor(t.type, bufs[p][0].subarray(0, t.data.length), t.dims);
      }
    }
    const logitsBuf = new Float32Array(vocab);
    const times = [];
    for (let s = 1; s < stepIds.length; s++) {
      let fetches;
      if (growing) {
        // The logits' own dtype (float32 in every graph here); only the caches may be float16.
        fetches = { logits: new ort.Tensor('float32', logitsBuf, [1, 1, vocab]) };
        for (const p of pastNames) {
          const dims = past[p].dims.map((d, i) => (i === axis[p] ? d + 1 : d));
          const n = dims.reduce((x, y) => x * y, 1);
          fetches[presentOf(p)] = new ort.Tensor(past[p].type, bufs[p][s % 2].subarray(0, n), dims);
        }
      }
      const f = feeds([stepIds[s]], past, pastLen);
      const t = performance.now();
      out = fetches ? await session.run(f, fetches) : await session.run(f);
      times.push(performance.now() - t);
      if (logits.length < keep) logits.push((fetches ? logitsBuf : out.logits.data).slice());
      if (fetches) {
        for (const p of pastNames) past[p] = fetches[presentOf(p)];
      } else {
        past = pastFrom(out);
      }
      pastLen += 1;
    }
    return [median(times.slice(1)), logits, Math.min(...times.slice(1))]; // the first is one more warm-up
  }

  const res = { model: dir, create_s: createS, rss_create_mib: rssCreate / 1024 };
  const P = opts.prompt;
  const prompt = tokens(Math.max(P, opts.long), vocab, 1);
  const steps = tokens(opts.steps + 2, vocab, 2);

  // Prefill of the prompt: one warm-up, the best of three.
  let [, out] = await prefill(prompt.slice(0, P));
  const prefillLogits = out.logits.data.slice();
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    let ms;
    [ms, out] = await prefill(prompt.slice(0, P));
    best = Math.min(best, ms);
  }
  res.prefill_ms = best;
  const [dms, decodeLogits, dmin] = await decode(out, P, steps, 4);
  res.decode_ms = dms;
  res.decode_min_ms = dmin;
  out = null;
  if (opts.dump) {
    mkdirSync(opts.dump, { recursive: true });
    const name = basename(dir);
    writeFileSync(join(opts.dump, `${name}.prefill.f32`), Buffer.from(prefillLogits.buffer));
    const d = new Float32Array(decodeLogits.length * vocab);
    decodeLogits.forEach((l, i) => d.set(l, i * vocab));
    writeFileSync(join(opts.dump, `${name}.decode.f32`), Buffer.from(d.buffer));
  }
  if (opts.long > 0) {
    const [ms, outLong] = await prefill(prompt.slice(0, opts.long));
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
// The parent: one fresh child per measurement.

function runChild(model, opts) {
  const args = [self, '--child', '--steps', String(opts.steps), '--prompt', String(opts.prompt), '--long', String(opts.long)];
  if (opts.dump) args.push('--dump', opts.dump);
  args.push(model);
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

// One measurement, repeated while other processes took more than --max-other of the CPU.
async function measure(model, opts) {
  let least = null;
  for (let attempt = 0; attempt <= opts.retries; attempt++) {
    await waitQuiet(opts);
    const r = await runChild(model, opts);
    if (!least || r.other_cpu < least.other_cpu) least = r;
    if (r.other_cpu <= opts.maxOther) break;
    console.error(`decode.mjs: ${basename(model)}: other processes took ${(100 * r.other_cpu).toFixed(0)}% of the CPU` +
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

const opts = parseArgs(process.argv.slice(2));
(opts.child ? child(opts) : parent(opts)).catch((e) => {
  console.error(`decode.mjs: ${e.stack || e.message}`);
  process.exit(1);
});
