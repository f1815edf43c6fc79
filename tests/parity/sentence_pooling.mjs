// sentence_pooling.mjs - a sentence-transformers build's sentence_embedding against the pooling
// sentence-transformers computes from the same run's last_hidden_state (its Pooling and
// Normalize modules, written out here from sentence_transformers' pooling.py and normalize.py):
//
//   node tests/parity/sentence_pooling.mjs MODEL_DIR CASE_DIR MODES [normalize]
//
// MODES: comma-separated pooling modes, in sentence-transformers' concatenation order's names
// (cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken). The case's encode.input_ids
// and encode.attention_mask are fed (zeros for token_type_ids); every element must agree to 1e-5
// (absolute) + 1e-4 (relative). Exit status: 0 agree; 1 they do not or the model did not run.
import fs from 'fs';
import path from 'path';
import { loadOrt, modelFile, readSafetensors } from './golden_io.mjs';

const [modelDir, caseDir, modesArg, norm] = process.argv.slice(2);
const fail = (m) => { process.stdout.write(`sentence_pooling: FAIL: ${m}\n`); process.exit(1); };
if (!modelDir || !caseDir || !modesArg) fail('usage: sentence_pooling.mjs MODEL_DIR CASE_DIR MODES [normalize]');
const order = ['cls', 'max', 'mean', 'mean_sqrt_len_tokens', 'weightedmean', 'lasttoken'];
const modes = modesArg.split(',');
for (const m of modes) if (!order.includes(m)) fail(`unknown mode '${m}'`);

const ort = loadOrt(fail);
const ref = readSafetensors(path.join(caseDir, 'reference.safetensors'), fail);
const ids = ref['encode.input_ids'], mask = ref['encode.attention_mask'];
const [b, s] = ids.shape;
const i64 = (t) => new ort.Tensor('int64', BigInt64Array.from(t.data, (v) => BigInt(v)), t.shape);
const session = await ort.InferenceSession.create(modelFile(modelDir, fail));
const feeds = { input_ids: i64(ids), attention_mask: i64(mask) };
if (session.inputNames.includes('token_type_ids')) feeds.token_type_ids = i64({ data: new Array(b * s).fill(0), shape: [b, s] });
const out = await session.run(feeds);
const h = out.last_hidden_state, got = out.sentence_embedding;
if (!h || !got) fail(`the model gave ${Object.keys(out).join(', ')}; expected last_hidden_state and sentence_embedding`);
const d = h.dims[2];
const at = (bi, t, k) => h.data[(bi * s + t) * d + k];
const m = (bi, t) => Number(mask.data[bi * s + t]);

const expected = [];
for (let bi = 0; bi < b; ++bi) {
  let row = [];
  for (const mode of order.filter((o) => modes.includes(o))) {
    const v = new Array(d).fill(0);
    if (mode === 'cls') for (let k = 0; k < d; ++k) v[k] = at(bi, 0, k);
    if (mode === 'max') for (let k = 0; k < d; ++k) {
      v[k] = -Infinity;
      for (let t = 0; t < s; ++t) v[k] = Math.max(v[k], m(bi, t) ? at(bi, t, k) : -1e9);
    }
    if (mode === 'mean' || mode === 'mean_sqrt_len_tokens' || mode === 'weightedmean') {
      let count = 0;
      for (let t = 0; t < s; ++t) {
        const w = m(bi, t) * (mode === 'weightedmean' ? t + 1 : 1);
        count += w;
        for (let k = 0; k < d; ++k) v[k] += at(bi, t, k) * w;
      }
      count = Math.max(count, 1e-9);
      for (let k = 0; k < d; ++k) v[k] /= mode === 'mean_sqrt_len_tokens' ? Math.sqrt(count) : count;
    }
    if (mode === 'lasttoken') {
      let last = 0;
      for (let t = 0; t < s; ++t) if (m(bi, t)) last = t;
      for (let k = 0; k < d; ++k) v[k] = at(bi, last, k);
    }
    row = row.concat(v);
  }
  if (norm === 'normalize') {
    const n = Math.max(Math.sqrt(row.reduce((a, x) => a + x * x, 0)), 1e-12);
    row = row.map((x) => x / n);
  }
  expected.push(...row);
}
if (got.dims.join() !== [b, expected.length / b].join()) fail(`sentence_embedding is [${got.dims}], expected [${b}, ${expected.length / b}]`);
let worst = 0, bad = 0;
for (let i = 0; i < expected.length; ++i) {
  const diff = Math.abs(got.data[i] - expected[i]);
  worst = Math.max(worst, diff);
  if (!(diff <= 1e-5 + 1e-4 * Math.abs(expected[i]))) bad++;
}
process.stdout.write(`sentence_pooling: ${modes.join('+')}${norm ? ' normalized' : ''}: ${bad ? 'FAIL' : 'PASS'}: ` +
                     `max |diff| ${worst.toExponential(3)} over ${expected.length} values\n`);
process.exit(bad ? 1 : 0);
