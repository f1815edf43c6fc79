// decode_report.mjs - the decode benchmark's markdown table, from the files bench/decode.sh leaves
// in its work folder:
//   results.json        bench/decode.mjs --out (best of the repetitions, per model)
//   floor.json          bench/floor output, one JSON line per size
//   logits/NAME.*.f32   bench/decode.mjs --dump
//   NAME/model.onnx     the graphs, NAME in mobius-f32, builder-f32, mobius-int4, builder-int4
//   NAME.error          why a model is missing (its column then reads n/a)
//
// usage: node bench/decode_report.mjs WORK_DIR
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { onnxStats } from './onnx_stats.mjs';
import { compareLogits } from './compare_logits.mjs';

const work = process.argv[2];
const names = ['mobius-f32', 'builder-f32', 'mobius-int4', 'builder-int4'];
const results = JSON.parse(readFileSync(join(work, 'results.json'), 'utf8'));
const byName = Object.fromEntries(results.map((r) => [r.model.split('/').pop(), r]));
const floors = readFileSync(join(work, 'floor.json'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const floorMs = (bytes) => floors.find((f) => f.bytes === bytes)?.ms;

const cols = {};
for (const n of names) {
  const onnx = join(work, n, 'model.onnx');
  if (!byName[n] || !existsSync(onnx)) continue;
  const s = onnxStats(onnx);
  const perToken = s.initializer_bytes - s.gather_table_bytes;
  cols[n] = { ...byName[n], stats: s, per_token_bytes: perToken, floor_ms: floorMs(perToken) };
}

const vocab = JSON.parse(readFileSync(join(work, 'ckpt-llama-207m', 'config.json'), 'utf8')).vocab_size;
const fmt = (v, d) => (v === undefined || v === null || Number.isNaN(v) ? 'n/a' : v.toFixed(d));
const ratio = (a, b) => (a === undefined || b === undefined || !b ? 'n/a' : (a / b).toFixed(2));
const rows = [
  ['session creation s', (c) => c.create_s, 2],
  ['peak RSS MiB', (c) => c.peak_rss_mib, 0],
  ['RSS after session creation MiB', (c) => c.rss_create_mib, 0],
  ['prefill 128 ms', (c) => c.prefill_ms, 1],
  ['prefill 1024 ms', (c) => c.prefill_long_ms, 0],
  ['decode ms/token @128', (c) => c.decode_ms, 2],
  ['decode ms/token @1024', (c) => c.decode_long_ms, 2],
  ['bandwidth floor ms/token', (c) => c.floor_ms, 2],
  ['weights read per token MiB', (c) => c.per_token_bytes / 1048576, 0],
  ['node count', (c) => c.stats.nodes, 0],
  ['initializer-fed Transpose/Identity/Cast', (c) => c.stats.initializer_fed, 0],
];
const out = [];
out.push('| | mobius f32 | builder f32 | ratio | mobius int4 | builder int4 | ratio |');
out.push('|---|---|---|---|---|---|---|');
for (const [label, get, d] of rows) {
  const v = (n) => (cols[n] ? get(cols[n]) : undefined);
  out.push(
    `| ${label} | ${fmt(v('mobius-f32'), d)} | ${fmt(v('builder-f32'), d)} | ${ratio(v('mobius-f32'), v('builder-f32'))} ` +
      `| ${fmt(v('mobius-int4'), d)} | ${fmt(v('builder-int4'), d)} | ${ratio(v('mobius-int4'), v('builder-int4'))} |`,
  );
}
out.push('');
const bw = floors.length ? Math.max(...floors.map((f) => f.gib_s)) : NaN;
out.push(
  `Bandwidth floor: reading each graph's weights once (every initializer but the embedding table, ` +
    `of which a step gathers one row) at ${fmt(bw, 1)} GiB/s (2 threads summing a buffer of that size, ` +
    `best of 10 after a warm-up): ` +
    names.filter((n) => cols[n]).map((n) => `${n} ${fmt(cols[n].floor_ms, 2)} ms`).join(', ') + '.',
);
const noisy = Math.max(...Object.values(cols).map((c) => c.other_cpu ?? 0));
out.push(
  `Other processes used up to ${(100 * noisy).toFixed(0)}% of the machine's CPU during a kept measurement ` +
    `(one over MAX_OTHER, default 5%, is measured again; each number is the best of the repetitions).`,
);
for (const n of names) {
  if (cols[n]?.ort_warnings)
    out.push(`${n}: ONNX Runtime logged ${cols[n].ort_warnings} warnings per session, the first: ${cols[n].ort_warning_first}`);
}
for (const n of names) {
  const e = join(work, `${n}.error`);
  if (existsSync(e)) out.push(`${n}: n/a, \`mobius build\` failed: ${readFileSync(e, 'utf8').trim()}`);
}
out.push('');
const cmp = (a, b, kind) => {
  const pa = join(work, 'logits', `${a}.${kind}.f32`), pb = join(work, 'logits', `${b}.${kind}.f32`);
  return existsSync(pa) && existsSync(pb) ? compareLogits(pa, pb, vocab) : null;
};
const line = (label, a, b) => {
  const p = cmp(a, b, 'prefill'), d = cmp(a, b, 'decode');
  if (!p) return `${label}: n/a`;
  return (
    `${label}: max |logit diff| ${p.max_abs_diff.toExponential(2)} over the prompt's ${p.positions} positions ` +
    `(logits up to ${p.max_abs.toFixed(2)}; rms of the difference ${(100 * p.rel_rms).toPrecision(2)}% of the logits' rms), ` +
    `top-1 agreement ${p.top1_agree}/${p.top1_total}` +
    (d ? `; first ${d.positions} decode steps: ${d.max_abs_diff.toExponential(2)}, top-1 ${d.top1_agree}/${d.top1_total}` : '')
  );
};
// The paired runs (decode.mjs --paired): the ratios of one process, creations alternating and
// decode steps interleaved.
const pairedFile = join(work, 'paired.json');
if (existsSync(pairedFile)) {
  const paired = JSON.parse(readFileSync(pairedFile, 'utf8'));
  const of = (dt) => paired.find((p) => p.a.endsWith(`/mobius-${dt}`));
  const f32 = of('f32'), int4 = of('int4');
  const cell = (p, get, each) => (p ? get(p).toFixed(2) + (each ? ` (${each(p).map((x) => x.toFixed(2)).join(', ')})` : '') : 'n/a');
  out.push('Measured in pairs (mobius / builder, one process per pair and run: session creations ' +
    'alternating, decode steps interleaved, the median step ratio; runs alternate which model is ' +
    'opened first, and the figure is the geometric mean over them, each run in brackets):');
  out.push('');
  out.push('| | f32 ratio | int4 ratio |');
  out.push('|---|---|---|');
  out.push(`| session creation | ${cell(f32, (p) => p.create_ratio)} | ${cell(int4, (p) => p.create_ratio)} |`);
  for (const k of [0, 1]) {
    const c = (p) => p?.contexts[k];
    if (!c(f32) && !c(int4)) continue;
    const past = (c(f32) ?? c(int4)).past;
    out.push(`| decode @${past} | ${cell(c(f32), (x) => x.ratio, (x) => x.ratio_each)} | ${cell(c(int4), (x) => x.ratio, (x) => x.ratio_each)} |`);
    out.push(`| decode @${past} ms/token, mobius vs builder | ${c(f32) ? `${c(f32).a_ms.toFixed(2)} vs ${c(f32).b_ms.toFixed(2)}` : 'n/a'} ` +
      `| ${c(int4) ? `${c(int4).a_ms.toFixed(2)} vs ${c(int4).b_ms.toFixed(2)}` : 'n/a'} |`);
  }
  out.push('');
}
const parity = cmp('mobius-f32', 'builder-f32', 'prefill');
out.push(
  line('Parity, mobius f32 vs builder f32', 'mobius-f32', 'builder-f32') +
    (parity ? (parity.max_abs_diff <= 1e-4 ? ' (within 1e-4: the same model)' : ' (NOT within 1e-4: the graphs disagree)') : ''),
);
out.push(line('int4 quantization error, mobius int4 vs mobius f32', 'mobius-f32', 'mobius-int4'));
out.push(line('int4 quantization error, builder int4 vs builder f32', 'builder-f32', 'builder-int4'));
console.log(out.join('\n'));
