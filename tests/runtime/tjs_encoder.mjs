// tjs_encoder.mjs - transformers.js loads an encoder folder mobius laid out for it, with the
// Auto class of its task, and computes the golden case's outputs from the case's own inputs.
//
//   node tests/runtime/tjs_encoder.mjs OUT_DIR CASE_DIR [ATOL RTOL]
//
// AutoModel (or AutoModelFor<Task>).from_pretrained(OUT_DIR) (local files only, the dtype the folder's
// transformers.js_config names) is called on encode.input_ids, encode.attention_mask and, when the
// reference has them, encode.token_type_ids; every output case.json lists is compared with
// encode.<output> (per-token outputs at real tokens only): |tjs - expected| <= atol + rtol*|expected|.
// A speech case (tests/golden-speech, task ctc) is called as transformers.js's
// Wav2Vec2FeatureExtractor hands a clip over: encode.input_values (float32) with an all-ones
// int64 attention_mask of its shape (the model feeds the graph only the inputs it declares);
// every frame is compared. A model type the task's Auto class does not know (AutoModelForCTC
// has no Data2VecAudio) is loaded by AutoModel, whose base class runs the folder's one graph and
// returns its outputs by name; the line saying so is printed. A vision case (tests/golden-vision:
// image-classification, image-feature-extraction) is called on encode.pixel_values (float32, as
// transformers.js's image processors hand it over) with AutoModelForImageClassification or
// AutoModel; every element is compared. A zero-shot case (CLIPModel, SiglipModel) is called on
// pixel_values, input_ids and (CLIP) attention_mask with AutoModel (the folder's model.onnx); then
// each tower runs alone as transformers.js's tower classes load it (text_model.onnx and
// vision_model.onnx: CLIPTextModelWithProjection and CLIPVisionModelWithProjection, SiglipTextModel
// and SiglipVisionModel), its embeddings divided by their L2 norm and compared with text_embeds
// and image_embeds.
// Exit status: 0 every output agrees; 1 it does not, or the model did not load or run; 2 usage;
// 77 (skipped) when @huggingface/transformers is not installed.
import fs from 'fs';
import path from 'path';
import { fileURLToPath } from 'url';
import { TJS_AUTO_CLASS, halfToFloat, importTransformersJs, readSafetensors } from '../parity/golden_io.mjs';

const [out, caseDir, atolArg, rtolArg] = process.argv.slice(2);
if (!out || !caseDir) {
  process.stderr.write('usage: tjs_encoder.mjs OUT_DIR CASE_DIR [ATOL RTOL]\n');
  process.exit(2);
}
const fail = (m) => { process.stdout.write(`tjs_encoder: FAIL: ${m}\n`); process.exit(1); };

const here = path.dirname(fileURLToPath(import.meta.url));
const tjs = await importTransformersJs([process.env.MOBIUS_SOURCE_ROOT, process.cwd(), path.join(here, '..', '..')]);
if (!tjs) {
  process.stdout.write('tjs_encoder: SKIP: @huggingface/transformers is not installed\n');
  process.exit(77);
}

const spec = JSON.parse(fs.readFileSync(path.join(caseDir, 'case.json'), 'utf8'));
const ref = readSafetensors(path.join(caseDir, 'reference.safetensors'), (m) => fail(m));
const atol = Number(atolArg ?? spec.atol), rtol = Number(rtolArg ?? spec.rtol);

tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
tjs.env.localModelPath = path.dirname(path.resolve(out));
const cfg = JSON.parse(fs.readFileSync(path.join(out, 'config.json'), 'utf8'));
// The Auto class transformers.js loads a model of the case's task with.
const IMAGE_AUTO_CLASS = {
  'image-classification': 'AutoModelForImageClassification', 'image-feature-extraction': 'AutoModel',
  'zero-shot-image-classification': 'AutoModel',
};
let autoClass = TJS_AUTO_CLASS[spec.task] ?? IMAGE_AUTO_CLASS[spec.task];
if (!autoClass) fail(`no transformers.js Auto class for task '${spec.task}'`);
if (autoClass !== 'AutoModel' && tjs[autoClass].supports && !tjs[autoClass].supports(cfg.model_type)) {
  process.stdout.write(`tjs_encoder: ${autoClass} has no class for model type '${cfg.model_type}'; loading it with AutoModel\n`);
  autoClass = 'AutoModel';
}
let model;
try {
  model = await tjs[autoClass].from_pretrained(path.basename(path.resolve(out)), {
    local_files_only: true, dtype: cfg['transformers.js_config']?.dtype,
  });
} catch (e) {
  fail(`${autoClass}.from_pretrained: ${e.message}`);
}
const tensor = (t) => new tjs.Tensor('int64', BigInt64Array.from(t.data, (v) => BigInt(v)), t.shape);
let feeds;
if (ref['encode.pixel_values']) {
  const px = ref['encode.pixel_values'];
  feeds = { pixel_values: new tjs.Tensor('float32', Float32Array.from(px.data), px.shape) };
  // Zero-shot: the texts too (the model feeds the graph the inputs it declares).
  if (ref['encode.input_ids']) {
    feeds.input_ids = tensor(ref['encode.input_ids']);
    feeds.attention_mask = tensor(ref['encode.attention_mask']);
  }
} else if (ref['encode.input_values']) {
  const audio = ref['encode.input_values'];
  feeds = {
    input_values: new tjs.Tensor('float32', Float32Array.from(audio.data), audio.shape),
    attention_mask: new tjs.Tensor('int64', new BigInt64Array(audio.data.length).fill(1n), audio.shape),
  };
} else {
  feeds = { input_ids: tensor(ref['encode.input_ids']), attention_mask: tensor(ref['encode.attention_mask']) };
  if (ref['encode.token_type_ids']) feeds.token_type_ids = tensor(ref['encode.token_type_ids']);
}
let result;
try {
  result = await model(feeds);
} catch (e) {
  fail(`the model did not run: ${e.message}`);
}
const values = (got) => got.type === 'float16' ? Float32Array.from(got.data, (h) => (typeof h === 'number' && got.data instanceof Uint16Array ? halfToFloat(h) : Number(h))) : got.data;
// The towers of a zero-shot folder, each loaded by its transformers.js class: their embeddings,
// divided by their L2 norm, are the model's text_embeds and image_embeds.
const towers = [];
if (spec.task === 'zero-shot-image-classification') {
  const clip = cfg.model_type === 'clip';
  for (const [cls, output, name, inputs] of [
    [clip ? 'CLIPTextModelWithProjection' : 'SiglipTextModel', clip ? 'text_embeds' : 'pooler_output', 'text_embeds',
     clip ? ['input_ids', 'attention_mask'] : ['input_ids']],
    [clip ? 'CLIPVisionModelWithProjection' : 'SiglipVisionModel', clip ? 'image_embeds' : 'pooler_output', 'image_embeds',
     ['pixel_values']]]) {
    let res;
    try {
      const tower = await tjs[cls].from_pretrained(path.basename(path.resolve(out)), {
        local_files_only: true, dtype: cfg['transformers.js_config']?.dtype,
      });
      res = await tower(Object.fromEntries(inputs.map((k) => [k, feeds[k]])));
    } catch (e) {
      fail(`${cls}: ${e.message}`);
    }
    if (!res[output]) fail(`${cls} gave no '${output}' (it gave ${Object.keys(res).join(', ')})`);
    const v = Float32Array.from(values(res[output]));
    const width = res[output].dims.at(-1);
    for (let r = 0; r < v.length / width; ++r) {
      let n = 0;
      for (let k = 0; k < width; ++k) n += v[r * width + k] ** 2;
      for (let k = 0; k < width; ++k) v[r * width + k] /= Math.sqrt(n);
    }
    process.stdout.write(`${cls} ${cfg.model_type}\n`);
    towers.push([`${cls}.${output} (normalized)`, name, { type: 'float32', data: v }]);
  }
}
const mask = ref['encode.attention_mask'];
let failed = 0;
const checks = [...spec.outputs.map((name) => [name, name, result[name]]), ...towers];
for (const [name, refName, got] of checks) {
  const want = ref[`encode.${refName}`];
  if (!got) fail(`transformers.js gave no '${name}' (it gave ${Object.keys(result).join(', ')})`);
  const g = values(got);
  const perToken = mask && want.shape.length >= 3;
  const inner = perToken ? want.shape.slice(2).reduce((a, b) => a * b, 1) : 1;
  let bad = 0, worst = 0, compared = 0;
  for (let i = 0; i < want.data.length; ++i) {
    if (perToken && Number(mask.data[Math.floor(i / inner)]) === 0) continue;
    const d = Math.abs(Number(g[i]) - want.data[i]);
    compared++;
    worst = Math.max(worst, d);
    if (!(d <= atol + rtol * Math.abs(want.data[i]))) bad++;
  }
  process.stdout.write(`${name}: ${bad ? 'FAIL' : 'PASS'}: max |diff| ${worst.toExponential(3)} over ${compared} values\n`);
  if (bad || !compared) failed++;
}
process.stdout.write(`tjs_encoder: ${checks.length - failed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);
