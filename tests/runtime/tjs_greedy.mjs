// tjs_greedy.mjs - transformers.js's own generate, greedy, on mobius's transformers.js folders,
// gives the tokens transformers' generate gave (a golden case's greedy.input_ids -> greedy.tokens).
//
//   node tests/runtime/tjs_greedy.mjs CASE_DIR OUT_DIR [CASE_DIR OUT_DIR ...]
//
// OUT_DIR is `mobius build --runtime transformers.js` of CASE_DIR. Each prompt is fed with an
// all-ones attention mask, max_new_tokens as many as the reference has, no sampling, and no
// end-of-sequence stop (the reference's generate had none: its eos logits compete like any other).
// Prints one line per case; exit 0 when every case gives the reference tokens, 1 otherwise, 2 on
// a usage error.
import { fileURLToPath } from 'url';
import path from 'path';
import { importTransformersJs, readSafetensors } from '../parity/golden_io.mjs';

const usage = (msg) => {
  process.stderr.write(`tjs_greedy: error: ${msg}\n`);
  process.exit(2);
};

const args = process.argv.slice(2);
if (args.length === 0 || args.length % 2) usage('expected CASE_DIR OUT_DIR pairs');

const here = path.dirname(fileURLToPath(import.meta.url));
const tjs = await importTransformersJs([process.env.MOBIUS_SOURCE_ROOT, process.cwd(),
  ...(process.env.NODE_PATH || '').split(':'), path.join(here, '..', '..')]);
if (!tjs) usage('@huggingface/transformers not found');
const { env, AutoModelForCausalLM, Tensor } = tjs;
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.useFSCache = false;

let failed = 0;
for (let i = 0; i < args.length; i += 2) {
  const [caseDir, outDir] = [args[i], args[i + 1]];
  const name = path.basename(caseDir);
  const ref = readSafetensors(path.join(caseDir, 'reference.safetensors'), usage);
  const prompt = ref['greedy.input_ids'], want = ref['greedy.tokens'];
  if (!prompt || !want) usage(`${caseDir}: no greedy.input_ids / greedy.tokens`);
  const ids = Array.from(prompt.data, Number);
  const expected = Array.from(want.data, Number);
  try {
    env.localModelPath = path.dirname(outDir) + path.sep;
    const model = await AutoModelForCausalLM.from_pretrained(path.resolve(outDir), { local_files_only: true });
    const input_ids = new Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]);
    const attention_mask = new Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
    const out = await model.generate({
      input_ids, attention_mask, max_new_tokens: expected.length, do_sample: false,
      eos_token_id: -1,  // no id: nothing stops the loop early
    });
    const got = out.tolist()[0].slice(ids.length).map(Number);
    await model.dispose();
    const same = got.length === expected.length && got.every((t, k) => t === expected[k]);
    if (!same) ++failed;
    process.stdout.write(`${same ? 'ok  ' : 'FAIL'} ${name}: ${JSON.stringify(got)}${same ? '' : ` (transformers: ${JSON.stringify(expected)})`}\n`);
  } catch (e) {
    ++failed;
    process.stdout.write(`FAIL ${name}: ${String(e && e.message || e).split('\n')[0]}\n`);
  }
}
process.stdout.write(`tjs_greedy: ${args.length / 2 - failed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);
