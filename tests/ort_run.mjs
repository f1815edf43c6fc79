// ort_run.mjs - runs an ONNX model in ONNX Runtime (CPU) for the tests.
// usage: node ort_run.mjs MODEL.onnx INPUTS.json  -> prints {"output": {"dims": [...], "data": [...]}}
// INPUTS.json: {"name": {"type": "float32"|"int64"|"bool", "dims": [...], "data": [...]}}
import { createRequire } from 'module';
import fs from 'fs';
import path from 'path';

const require = createRequire(path.join(process.cwd(), 'noop.js'));
let ort;
for (const base of [process.cwd(), ...(process.env.NODE_PATH || '').split(':').filter(Boolean)]) {
  try {
    ort = require(path.join(base, base.endsWith('node_modules') ? '' : 'node_modules', 'onnxruntime-node'));
    break;
  } catch (e) { /* try the next place */ }
}
if (!ort) {
  console.error('ort_run: onnxruntime-node not found (NODE_PATH=' + (process.env.NODE_PATH || '') + ')');
  process.exit(2);
}

const [model, inputsFile] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(inputsFile, 'utf8'));
const feeds = {};
for (const [name, t] of Object.entries(spec)) {
  let data;
  if (t.type === 'int64') data = BigInt64Array.from(t.data.map((v) => BigInt(v)));
  else if (t.type === 'bool') data = Uint8Array.from(t.data.map((v) => (v ? 1 : 0)));
  else data = Float32Array.from(t.data);
  feeds[name] = new ort.Tensor(t.type, data, t.dims);
}
const session = await ort.InferenceSession.create(model, { logSeverityLevel: 3 });
const results = await session.run(feeds);
const out = {};
for (const [name, t] of Object.entries(results)) {
  out[name] = { dims: t.dims, type: t.type, data: Array.from(t.data, (v) => (typeof v === 'bigint' ? Number(v) : v)) };
}
process.stdout.write(JSON.stringify(out) + '\n');
