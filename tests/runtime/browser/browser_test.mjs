// browser_test.mjs - transformers.js in a real browser (headless Chromium driven by puppeteer-core)
// loads mobius's transformers.js folders and computes what transformers computed (the golden
// case's reference) and what transformers.js computes in Node from the same folder.
//
//   node tests/runtime/browser/browser_test.mjs CHROMIUM MODELS_DIR KIND:CASE_DIR [KIND:CASE_DIR ...]
//
// MODELS_DIR/<case name> is `mobius build --runtime transformers.js` of CASE_DIR. KIND is
//   generate  a text-generation case (tests/golden): greedy generate from greedy.input_ids gives
//             greedy.tokens in Chromium, the same tokens as in Node; the model's forward on the
//             case's prefill inputs (a left-padded batch; transformers.js computes the positions)
//             gives prefill.logits at real tokens within the case's atol/rtol, and Node's logits
//             within BROWSER_ATOL/RTOL
//   encode    an encoder case (tests/golden-encoders): the Auto class of its task on the case's
//             inputs gives every output case.json lists within the case's atol/rtol (per-token
//             outputs at real tokens only) and within BROWSER_ATOL/RTOL of Node's; when the
//             folder has tokenizer files, the task's pipeline on a short text gives Node's
//             token ids and output too (labels and token ids equal, scores within tolerance)
//
// The page and its files come from server.mjs on 127.0.0.1 (transformers.js's browser bundle,
// ONNX Runtime Web's WASM files, the model folders, page.mjs and jobs.mjs). Every request the page
// or its workers make for anything else is aborted and fails the test; the guard is shown to work
// first (a fetch of a remote URL from the page must be aborted). Chromium's proxy is the server
// itself, so nothing from the browser leaves 127.0.0.1: a request from web content that reaches
// it fails the test too; the browser's own background requests are refused there and listed.
// Prints one line per check; exit 0 when all pass, 1 otherwise, 2 on a usage error (or without
// @huggingface/transformers), 77 (skipped) when puppeteer-core is not installed.
import fs from 'fs';
import os from 'os';
import path from 'path';
import { fileURLToPath, pathToFileURL } from 'url';
import { TJS_AUTO_CLASS, importTransformersJs, nodeModulesDirs, readSafetensors } from '../../parity/golden_io.mjs';
import { runJob } from './jobs.mjs';
import { startServer } from './server.mjs';

// Chromium's WASM kernels against onnxruntime-node's native ones: float outputs agree to within
// |chromium - node| <= BROWSER_ATOL + BROWSER_RTOL * |node|.
const BROWSER_ATOL = 1e-5, BROWSER_RTOL = 1e-4;

const usage = (msg) => {
  process.stderr.write(`browser_test: error: ${msg}\n`);
  process.exit(2);
};
const [chromium, modelsDir, ...specs] = process.argv.slice(2);
if (!chromium || !modelsDir || specs.length === 0) usage('expected CHROMIUM MODELS_DIR KIND:CASE_DIR...');

const here = path.dirname(fileURLToPath(import.meta.url));
const bases = [process.env.MOBIUS_SOURCE_ROOT, process.cwd(), ...(process.env.NODE_PATH || '').split(':'),
  path.join(here, '..', '..', '..')];

// The first node_modules that holds `name`, as [folder, package.json].
const findPackage = (name, within = nodeModulesDirs(bases)) => {
  for (const dir of within) {
    const file = path.join(dir, name, 'package.json');
    if (fs.existsSync(file)) return [path.join(dir, name), JSON.parse(fs.readFileSync(file, 'utf8'))];
  }
  return [null, null];
};
const [puppeteerDir, puppeteerPkg] = findPackage('puppeteer-core');
const [tjsDir, tjsPkg] = findPackage('@huggingface/transformers');
if (!puppeteerDir) {
  process.stdout.write('browser_test: SKIP: puppeteer-core is not installed\n');
  process.exit(77);
}
if (!tjsDir) usage('@huggingface/transformers is not installed');
// ONNX Runtime Web as transformers.js resolves it: its own node_modules first, then the hoisted one.
const [ortWebDir, ortWebPkg] = findPackage('onnxruntime-web', [path.join(tjsDir, 'node_modules'), ...nodeModulesDirs(bases)]);
if (!ortWebDir) usage('onnxruntime-web (a dependency of @huggingface/transformers) is not installed');
// The browser bundle carries ONNX Runtime Web's JavaScript; its WASM files must be of that version.
if (ortWebPkg.version !== tjsPkg.dependencies?.['onnxruntime-web']) {
  usage(`onnxruntime-web ${ortWebPkg.version} is installed, transformers.js ${tjsPkg.version} was built with ${tjsPkg.dependencies?.['onnxruntime-web']}`);
}
const bundle = path.join(tjsDir, 'dist', 'transformers.js');
if (!fs.existsSync(bundle)) usage(`no browser bundle at ${bundle}`);
const puppeteer = (await import(pathToFileURL(path.join(puppeteerDir, puppeteerPkg.exports?.['.']?.import ?? puppeteerPkg.module)).href)).default;
const tjs = await importTransformersJs(bases);

// The jobs, from the cases.
const jobs = [];
for (const spec of specs) {
  const [kind, caseDir] = [spec.slice(0, spec.indexOf(':')), spec.slice(spec.indexOf(':') + 1)];
  const name = path.basename(path.resolve(caseDir));
  const folder = path.join(modelsDir, name);
  if (!fs.existsSync(path.join(folder, 'config.json'))) usage(`${folder}: no config.json (build ${caseDir} there first)`);
  const ref = readSafetensors(path.join(caseDir, 'reference.safetensors'), usage);
  if (kind === 'generate') {
    for (const t of ['greedy.input_ids', 'greedy.tokens', 'prefill.input_ids', 'prefill.attention_mask', 'prefill.logits']) {
      if (!ref[t]) usage(`${caseDir}: no ${t} in reference.safetensors`);
    }
    const caseJson = JSON.parse(fs.readFileSync(path.join(caseDir, 'case.json'), 'utf8'));
    const expected = Array.from(ref['greedy.tokens'].data, Number);
    const plain = (t) => ({ data: Array.from(t.data, Number), dims: t.shape });
    jobs.push({
      label: `generate ${name}`, expected, caseJson, ref,
      job: {
        kind, model: name, ids: Array.from(ref['greedy.input_ids'].data, Number), max_new_tokens: expected.length,
        prefill: { input_ids: plain(ref['prefill.input_ids']), attention_mask: plain(ref['prefill.attention_mask']) },
      },
    });
  } else if (kind === 'encode') {
    const caseJson = JSON.parse(fs.readFileSync(path.join(caseDir, 'case.json'), 'utf8'));
    const config = JSON.parse(fs.readFileSync(path.join(folder, 'config.json'), 'utf8'));
    const autoClass = TJS_AUTO_CLASS[caseJson.task];
    if (!autoClass) usage(`${caseDir}: no transformers.js Auto class for task '${caseJson.task}'`);
    const feeds = {};
    for (const input of ['input_ids', 'attention_mask', 'token_type_ids']) {
      const t = ref[`encode.${input}`];
      if (t) feeds[input] = { data: Array.from(t.data, Number), dims: t.shape };
    }
    jobs.push({
      label: `encode ${name}`, caseJson, ref,
      job: { kind, model: name, auto_class: autoClass, dtype: config['transformers.js_config']?.dtype, feeds, outputs: caseJson.outputs },
    });
    if (fs.existsSync(path.join(folder, 'tokenizer.json'))) {
      const [task, text, options] = {
        'feature-extraction': ['feature-extraction', 'hello world', { pooling: 'mean', normalize: true }],
        'sequence-classification': ['text-classification', 'hello world', { top_k: 5 }],
        'token-classification': ['token-classification', 'hello world', { ignore_labels: [] }],
        'fill-mask': ['fill-mask', '[MASK] world', { top_k: 5 }],
      }[caseJson.task];
      jobs.push({ label: `pipeline ${task} ${name}`, job: { kind: 'pipeline', model: name, task, text, options } });
    }
  } else {
    usage(`unknown kind '${kind}' in '${spec}' (generate or encode)`);
  }
}

// The largest |a - b| over two flat lists, and whether every pair is within atol + rtol*|b|
// (`skip(i)` leaves an index out).
const compare = (a, b, atol, rtol, skip = () => false) => {
  let worst = 0, bad = 0, count = 0;
  for (let i = 0; i < b.length; ++i) {
    if (skip(i)) continue;
    const d = Math.abs(a[i] - b[i]);
    ++count;
    if (!(d <= worst)) worst = d;  // NaN propagates
    if (!(d <= atol + rtol * Math.abs(b[i]))) ++bad;
  }
  return { worst, bad, count, ok: bad === 0 && count > 0 && a.length === b.length };
};
// Two JSON values alike: numbers within the browser tolerance, everything else equal. Returns the
// first difference's path, or null.
const differ = (a, b, at = '') => {
  if (typeof a === 'number' && typeof b === 'number') {
    return Math.abs(a - b) <= BROWSER_ATOL + BROWSER_RTOL * Math.abs(b) ? null : `${at || '.'}: ${a} against ${b}`;
  }
  if (Array.isArray(a) !== Array.isArray(b) || typeof a !== typeof b || (a === null) !== (b === null)) return `${at || '.'}: ${JSON.stringify(a)} against ${JSON.stringify(b)}`;
  if (Array.isArray(a)) {
    if (a.length !== b.length) return `${at || '.'}: ${a.length} items against ${b.length}`;
    for (let i = 0; i < a.length; ++i) { const d = differ(a[i], b[i], `${at}[${i}]`); if (d) return d; }
    return null;
  }
  if (a && typeof a === 'object') {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    for (const k of keys) { const d = differ(a[k], b[k], `${at}.${k}`); if (d) return d; }
    return null;
  }
  return a === b ? null : `${at || '.'}: ${JSON.stringify(a)} against ${JSON.stringify(b)}`;
};
const exp = (x) => x.toExponential(2);

let failed = 0, passed = 0;
const report = (ok, line) => {
  ok ? ++passed : ++failed;
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${line}\n`);
};

// Node first: transformers.js's Node build on the same folders.
tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
tjs.env.useFSCache = false;
tjs.env.localModelPath = path.resolve(modelsDir) + path.sep;
const nodeResults = [];
for (const { job } of jobs) {
  try {
    nodeResults.push({ result: await runJob(tjs, job) });
  } catch (e) {
    nodeResults.push({ error: String(e && e.message || e) });
  }
}

const server = await startServer({
  '/tjs/': path.join(tjsDir, 'dist'),
  '/ort/': path.join(ortWebDir, 'dist'),
  '/page/': here,
  '/models/': modelsDir,
});
const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'mobius-chromium-'));
let browser = null;
const blocked = [];
const pageErrors = [];
const cleanup = async () => {
  if (browser) await browser.close().catch(() => {});
  browser = null;
  await server.close();
  fs.rmSync(profile, { recursive: true, force: true });
};
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => { cleanup().finally(() => process.exit(1)); });

try {
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,  // --headless=new
    userDataDir: profile,
    args: [
      ...(process.getuid?.() === 0 ? ['--no-sandbox'] : []),
      '--disable-gpu',
      // Loopback bypasses a proxy: anything else goes to the test's server and is refused there.
      `--proxy-server=${server.origin}`,
    ],
  });
  const page = await browser.newPage();
  await page.setRequestInterception(true);
  page.on('request', (req) => {
    const url = req.url();
    if (url.startsWith(`${server.origin}/`) || url.startsWith('data:') || url.startsWith('blob:')) {
      req.continue();
    } else {
      blocked.push(url);
      req.abort('blockedbyclient');
    }
  });
  page.on('pageerror', (e) => pageErrors.push(String(e && e.message || e)));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(m.text());
  });
  await page.goto(`${server.origin}/page/index.html`, { waitUntil: 'load' });
  await page.waitForFunction(() => window.mobiusReady || window.mobiusError, { timeout: 60000 }).catch(() => {});
  const ready = await page.evaluate(() => (window.mobiusReady ? null : window.mobiusError ?? 'page.mjs did not run'));
  if (ready) throw new Error(`the page did not load transformers.js: ${ready}${pageErrors.length ? ` (${pageErrors.join('; ')})` : ''}`);
  const versions = await page.evaluate(() => window.mobius.versions);
  process.stdout.write(`browser: ${await browser.version()} (headless), transformers.js ${versions.transformers} ` +
    `(${path.relative(tjsDir, bundle)}), onnxruntime-web ${versions.onnxruntime?.web} (wasm, 1 thread), served from ${server.origin}\n`);

  // The guard: a remote fetch from the page is aborted before it leaves the browser.
  const canary = 'https://huggingface.co/api/models?mobius-browser-test-canary';
  const fetched = await page.evaluate((u) => fetch(u).then(() => 'answered', (e) => `refused (${e.message})`), canary);
  const caught = blocked.indexOf(canary);
  report(caught >= 0 && fetched.startsWith('refused'), `the page's requests are guarded: fetch(${canary}) ${fetched}, ${caught >= 0 ? 'aborted' : 'NOT seen'} by the request interception`);
  if (caught >= 0) blocked.splice(caught, 1);
  pageErrors.length = 0;

  for (let k = 0; k < jobs.length; ++k) {
    const { label, job, expected, caseJson, ref } = jobs[k];
    const started = Date.now();
    const browserRun = await page.evaluate((j) => window.mobius.run(j), job);
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    const nodeRun = nodeResults[k];
    if (browserRun.error) { report(false, `${label}: Chromium: ${browserRun.error.split('\n')[0]}`); continue; }
    if (nodeRun.error) { report(false, `${label}: Node: ${nodeRun.error.split('\n')[0]}`); continue; }
    const b = browserRun.result, n = nodeRun.result;
    // Per-token outputs are compared at real tokens only (`step`.attention_mask 1).
    const realTokens = (step, shape) => {
      const mask = ref[`${step}.attention_mask`];
      const inner = shape.length >= 3 ? shape.slice(2).reduce((x, y) => x * y, 1) : 0;
      return (i) => inner > 0 && Number(mask.data[Math.floor(i / inner)]) === 0;
    };
    if (job.kind === 'generate') {
      const same = (x, y) => x.length === y.length && x.every((t, i) => t === y[i]);
      const want = ref['prefill.logits'], padded = realTokens('prefill', want.shape);
      const vsRef = compare(b.logits.data, Array.from(want.data), caseJson.atol, caseJson.rtol, padded);
      const nodeVsRef = compare(n.logits.data, Array.from(want.data), caseJson.atol, caseJson.rtol, padded);
      const vsNode = compare(b.logits.data, n.logits.data, BROWSER_ATOL, BROWSER_RTOL, padded);
      const okTokens = same(b.tokens, expected) && same(b.tokens, n.tokens);
      report(okTokens, `${label}: Chromium ${JSON.stringify(b.tokens)}` +
        (okTokens ? ' = Node = transformers' : `, Node ${JSON.stringify(n.tokens)}, transformers ${JSON.stringify(expected)}`) + ` [${seconds}s]`);
      const okLogits = vsRef.ok && nodeVsRef.ok && vsNode.ok && differ(b.logits.dims, want.shape) === null;
      report(okLogits, `${label} prefill logits ${JSON.stringify(b.logits.dims)}: max |Chromium - transformers| ${exp(vsRef.worst)}` +
        `${vsRef.ok ? '' : ` (${vsRef.bad} of ${vsRef.count} beyond atol ${caseJson.atol} rtol ${caseJson.rtol})`}` +
        `, max |Node - transformers| ${exp(nodeVsRef.worst)}, max |Chromium - Node| ${exp(vsNode.worst)}` +
        `${vsNode.ok ? '' : ` (${vsNode.bad} of ${vsNode.count} beyond ${BROWSER_ATOL} + ${BROWSER_RTOL}*|Node|)`} over ${vsRef.count} values`);
    } else if (job.kind === 'encode') {
      for (const name of job.outputs) {
        const want = ref[`encode.${name}`];
        const got = b.outputs[name], fromNode = n.outputs[name];
        if (!got || !fromNode) { report(false, `${label} ${name}: no '${name}' output (Chromium gave ${b.gave.join(', ')}; Node ${n.gave.join(', ')})`); continue; }
        const padded = realTokens('encode', want.shape);
        const vsRef = compare(got.data, Array.from(want.data), caseJson.atol, caseJson.rtol, padded);
        const nodeVsRef = compare(fromNode.data, Array.from(want.data), caseJson.atol, caseJson.rtol, padded);
        const vsNode = compare(got.data, fromNode.data, BROWSER_ATOL, BROWSER_RTOL, padded);
        const ok = vsRef.ok && vsNode.ok && nodeVsRef.ok && differ(got.dims, want.shape) === null;
        report(ok, `${label} ${name} ${JSON.stringify(got.dims)}: max |Chromium - transformers| ${exp(vsRef.worst)}` +
          `${vsRef.ok ? '' : ` (${vsRef.bad} of ${vsRef.count} beyond atol ${caseJson.atol} rtol ${caseJson.rtol})`}` +
          `, max |Node - transformers| ${exp(nodeVsRef.worst)}, max |Chromium - Node| ${exp(vsNode.worst)}` +
          `${vsNode.ok ? '' : ` (${vsNode.bad} of ${vsNode.count} beyond ${BROWSER_ATOL} + ${BROWSER_RTOL}*|Node|)`}` +
          ` over ${vsRef.count} values [${seconds}s]`);
      }
    } else {
      const d = differ(b.ids, n.ids) ?? differ(b.output, n.output);
      const summary = Array.isArray(b.output) ? `${b.output.length} items` : `${JSON.stringify(b.output.dims)}`;
      report(!d, `${label} '${job.text}' (ids ${JSON.stringify(b.ids)}): Chromium ${d ? `differs from Node at ${d}` : `= Node (${summary})`} [${seconds}s]`);
    }
  }
} catch (e) {
  report(false, `browser: ${String(e && e.message || e).split('\n')[0]}`);
} finally {
  await cleanup();
}

const foreign = [...blocked.map((u) => `page request ${u}`),
  ...server.foreign.filter((f) => f.web).map((f) => `web request through the proxy ${f.request}`)];
report(foreign.length === 0, foreign.length
  ? `the pages asked for something not on ${server.origin} ${foreign.length} times (aborted): ${foreign.slice(0, 5).join(', ')}`
  : `the pages read only ${server.origin} (${server.served.length} files served, ${server.missing.length} not found: ${[...new Set(server.missing.map((m) => path.basename(m)))].join(', ') || 'none'})`);
const own = server.foreign.filter((f) => !f.web).map((f) => f.request.replace(/^(\S+ )(\w+:\/\/)?([^/?]+).*$/, '$1$3'));
if (own.length) process.stdout.write(`note Chromium's own background requests, refused at the proxy: ${[...new Set(own)].join(', ')}\n`);
process.stdout.write(`browser_test: ${passed} passed, ${failed} failed\n`);
process.exit(failed ? 1 : 0);
