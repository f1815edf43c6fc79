// tjs_pipelines.mjs - transformers.js's pipelines run mobius's encoder folders unchanged:
// feature-extraction (with a sentence-transformers folder's pooling), text-classification,
// token-classification and fill-mask, each checked against its Auto class run on the same text.
//
//   node tests/runtime/tjs_pipelines.mjs FEATURE_DIR SEQCLS_DIR TOKCLS_DIR MLM_DIR
//
// Each folder is a `mobius build` of an encoder checkpoint with tokenizer files. Exit status: 0
// every pipeline ran and agreed; 1 otherwise; 77 (skipped) when @huggingface/transformers is not
// installed.
import fs from 'fs';
import path from 'path';
import { pathToFileURL, fileURLToPath } from 'url';
import { nodeModulesDirs } from '../parity/golden_io.mjs';

const dirs = process.argv.slice(2);
const fail = (m) => { process.stdout.write(`tjs_pipelines: FAIL: ${m}\n`); process.exit(1); };
if (dirs.length !== 4) fail('usage: tjs_pipelines.mjs FEATURE_DIR SEQCLS_DIR TOKCLS_DIR MLM_DIR');
const here = path.dirname(fileURLToPath(import.meta.url));
let tjs = null;
for (const dir of nodeModulesDirs([process.env.MOBIUS_SOURCE_ROOT, process.cwd(), path.join(here, '..', '..')])) {
  const pkgFile = path.join(dir, '@huggingface', 'transformers', 'package.json');
  if (!fs.existsSync(pkgFile)) continue;
  const pkg = JSON.parse(fs.readFileSync(pkgFile, 'utf8'));
  tjs = await import(pathToFileURL(path.join(dir, '@huggingface', 'transformers', pkg.exports?.node?.import?.default ?? './dist/transformers.node.mjs')).href);
  break;
}
if (!tjs) { process.stdout.write('tjs_pipelines: SKIP: @huggingface/transformers is not installed\n'); process.exit(77); }
tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
const load = (dir) => {
  tjs.env.localModelPath = path.dirname(path.resolve(dir));
  return path.basename(path.resolve(dir));
};
const close = (a, b, tol, what) => {
  if (!(Math.abs(a - b) <= tol)) fail(`${what}: ${a} against ${b}`);
};
const softmax = (xs) => { const m = Math.max(...xs); const e = xs.map((x) => Math.exp(x - m)); const s = e.reduce((p, q) => p + q, 0); return e.map((x) => x / s); };
const text = 'hello world';
const opts = { local_files_only: true };

// feature-extraction: the pipeline's mean pooling and normalization against the folder's own
// sentence_embedding output on the same tokens.
{
  const id = load(dirs[0]);
  const pipe = await tjs.pipeline('feature-extraction', id, opts);
  const pooled = await pipe(text, { pooling: 'mean', normalize: true });
  const tok = await tjs.AutoTokenizer.from_pretrained(id, opts);
  const model = await tjs.AutoModel.from_pretrained(id, opts);
  const out = await model(tok(text));
  if (!out.sentence_embedding) fail('the folder gave no sentence_embedding');
  if (pooled.data.length !== out.sentence_embedding.data.length) fail('feature-extraction: sizes differ');
  for (let i = 0; i < pooled.data.length; ++i) close(pooled.data[i], out.sentence_embedding.data[i], 1e-5, `feature-extraction [${i}]`);
  process.stdout.write(`feature-extraction: PASS (${pooled.data.length} values)\n`);
}
// text-classification: the top label's score is the softmax of the logits.
{
  const id = load(dirs[1]);
  const [top] = await (await tjs.pipeline('text-classification', id, opts))(text);
  const tok = await tjs.AutoTokenizer.from_pretrained(id, opts);
  const logits = Array.from((await (await tjs.AutoModelForSequenceClassification.from_pretrained(id, opts))(tok(text))).logits.data);
  const p = softmax(logits);
  const best = p.indexOf(Math.max(...p));
  if (top.label !== `LABEL_${best}`) fail(`text-classification: ${top.label}, expected LABEL_${best}`);
  close(top.score, p[best], 1e-5, 'text-classification score');
  process.stdout.write(`text-classification: PASS (${top.label} ${top.score.toFixed(4)})\n`);
}
// token-classification: an entry per token that is not special, each a label of the config's
// (the tiny vocabulary makes every word [UNK], which the pipeline leaves out: it must still run).
{
  const id = load(dirs[2]);
  const out = await (await tjs.pipeline('token-classification', id, opts))(text, { ignore_labels: [] });
  if (!Array.isArray(out)) fail('token-classification gave no list');
  for (const e of out) if (!/^LABEL_\d$/.test(e.entity) || !(e.score > 0 && e.score <= 1)) fail(`token-classification: ${JSON.stringify(e)}`);
  process.stdout.write(`token-classification: PASS (${out.length} tokens)\n`);
}
// fill-mask: the best candidate's score is the softmax of the mask position's logits.
{
  const id = load(dirs[3]);
  const out = await (await tjs.pipeline('fill-mask', id, opts))('[MASK] world');
  const tok = await tjs.AutoTokenizer.from_pretrained(id, opts);
  const enc = tok('[MASK] world');
  const logits = (await (await tjs.AutoModelForMaskedLM.from_pretrained(id, opts))(enc)).logits;
  const ids = Array.from(enc.input_ids.data, Number), at = ids.indexOf(tok.mask_token_id), vocab = logits.dims[2];
  const p = softmax(Array.from(logits.data.slice(at * vocab, (at + 1) * vocab)));
  close(out[0].score, Math.max(...p), 1e-5, 'fill-mask score');
  process.stdout.write(`fill-mask: PASS (${out.length} candidates)\n`);
}
process.stdout.write('tjs_pipelines: 4 passed, 0 failed\n');
