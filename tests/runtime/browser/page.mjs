// page.mjs - transformers.js's browser bundle on the test's own server, set up to read nothing but
// that server: models from /models/ (env.localModelPath, no remote models, no browser cache) and
// ONNX Runtime Web's WASM files from /ort/ (env.backends.onnx.wasm.wasmPaths), on one thread
// (the page is not cross-origin isolated). window.mobius.run(job) runs jobs.mjs's runJob; it
// resolves to { result } or { error }. window.mobiusReady (or window.mobiusError) says the page
// is ready.
import * as tjs from '/tjs/transformers.js';
import { runJob } from './jobs.mjs';

try {
  const { env } = tjs;
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  // A path on this origin, not an absolute URL: transformers.js 4.3.2 looks for a local file at an
  // http(s) localModelPath only when remote models are allowed (get_file_metadata), so the
  // tokenizer files of a folder would not be found there.
  env.localModelPath = '/models/';
  env.useBrowserCache = false;
  env.useWasmCache = false;
  env.backends.onnx.wasm.wasmPaths = new URL('/ort/', location.href).href;
  env.backends.onnx.wasm.numThreads = 1;
  env.backends.onnx.wasm.proxy = false;
  window.mobius = {
    versions: { transformers: env.version, onnxruntime: env.backends.onnx.versions },
    run: async (job) => {
      try {
        return { result: await runJob(tjs, job) };
      } catch (e) {
        return { error: String(e && (e.stack || e.message) || e) };
      }
    },
  };
  window.mobiusReady = true;
} catch (e) {
  window.mobiusError = String(e && (e.stack || e.message) || e);
}
