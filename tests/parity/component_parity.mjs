// component_parity.mjs - runs one graph of a multi-component golden case (tests/golden-diffusers:
// text_encoder, unet, vae_encoder, vae_decoder) once in ONNX Runtime (CPU) and compares every
// output that has a reference with it.
//
//   node tests/parity/component_parity.mjs --model OUT_DIR|model.onnx --case CASE_DIR --graph GRAPH
//                                          [--atol X] [--rtol Y] [--json]
//
// The case folder holds case.json (atol, rtol, and graphs.<GRAPH>.outputs.<name>.aliases) and
// reference.safetensors with the tensors of each graph named <GRAPH>.<tensor>; see
// tests/golden-diffusers/README.md.
//
// Inputs: every input of the model is fed the reference tensor <GRAPH>.<input>, converted to the
// type the model declares (an int64 reference, such as a timestep, into a float input; float32
// into a float16 one); a model input without a reference tensor is an error. Reference tensors
// the model has no input for are left out.
// Outputs: each model output <name> is compared with <GRAPH>.<name>, or with <GRAPH>.<ref> when
// case.json lists <name> among graphs.<GRAPH>.outputs.<ref>.aliases; every element must satisfy
// |onnx - expected| <= atol + rtol * |expected|. The tolerance is case.json's atol/rtol, or
// --atol/--rtol where they are larger (reduced-precision builds). A model output without a
// reference is listed and not compared; at least one output must be compared.
//
// Format-v2 cases of a task (tests/golden-encoders, `--graph encode`): the reference holds
// `encode.attention_mask` (1 = a real token); per-token outputs ([batch, seq, ...] with the mask's
// batch and seq) are compared only at real tokens, and a token_type_ids input the reference lacks
// is fed zeros, as transformers does.
//
// Exit status: 0 every compared output passed; 1 an output failed, or the model did not load or
// run, or nothing could be compared; 2 a usage or I/O error, or a model input with no reference.
// The last line is "component parity: N passed, M failed" (counting outputs).
import fs from 'fs';
import path from 'path';
import { compare, feedFor, finishReport, loadOrt, modelFile, parseOptions, readSafetensors } from './golden_io.mjs';

const USAGE = 'usage: component_parity.mjs --model OUT_DIR|model.onnx --case CASE_DIR --graph GRAPH ' +
              '[--atol X] [--rtol Y] [--json]';

function die(msg) {
  process.stderr.write(`component_parity: error: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  return parseOptions(argv, {
    '--model': ['model', 'string'], '--case': ['caseDir', 'string'], '--graph': ['graph', 'string'],
    '--atol': ['atol', 'number'], '--rtol': ['rtol', 'number'], '--json': ['json', 'flag'],
  }, ['model', 'caseDir', 'graph'], USAGE, die);
}

// case.json and reference.safetensors of a case, with the graph's reference tensors.
function loadComponentCase(caseDir, graph) {
  const caseFile = path.join(caseDir, 'case.json');
  if (!fs.existsSync(caseFile)) die(`no case.json in ${caseDir}`);
  let spec;
  try {
    spec = JSON.parse(fs.readFileSync(caseFile, 'utf8'));
  } catch (e) {
    die(`${caseFile}: ${e.message}`);
  }
  const refFile = path.join(caseDir, 'reference.safetensors');
  if (!fs.existsSync(refFile)) die(`no reference.safetensors in ${caseDir}`);
  const ref = readSafetensors(refFile, die);
  const prefix = `${graph}.`;
  const tensors = {};
  for (const [name, t] of Object.entries(ref)) if (name.startsWith(prefix)) tensors[name.slice(prefix.length)] = t;
  if (!Object.keys(tensors).length) die(`${refFile} has no tensor of graph '${graph}' (no '${prefix}*')`);
  const outputs = (spec.graphs && spec.graphs[graph] && spec.graphs[graph].outputs) || {};
  return { tensors, outputs, atol: Number(spec.atol) || 0, rtol: Number(spec.rtol) || 0 };
}

// The reference name for model output `name`: itself, or the case.json output listing it as an alias.
function referenceName(name, c) {
  if (c.tensors[name]) return name;
  for (const [refName, o] of Object.entries(c.outputs))
    if (o && Array.isArray(o.aliases) && o.aliases.includes(name) && c.tensors[refName]) return refName;
  return null;
}

async function run(args, ort) {
  const c = loadComponentCase(args.caseDir, args.graph);
  const atol = Math.max(c.atol, args.atol || 0);
  const rtol = Math.max(c.rtol, args.rtol || 0);
  const file = modelFile(args.model, die);
  const report = { graph: args.graph, model: file, atol, rtol, results: [], uncompared: [] };
  const failAll = (error) => report.results.push({ output: '(model)', pass: false, error });

  let session;
  try {
    session = await ort.InferenceSession.create(file, { logSeverityLevel: 3, executionProviders: ['cpu'] });
  } catch (e) {
    failAll(`the model does not load: ${e.message}`);
    return report;
  }
  const feeds = {};
  for (const meta of session.inputMetadata) {
    let t = c.tensors[meta.name];
    if (!t && meta.name === 'token_type_ids' && c.tensors.input_ids)
      t = { shape: c.tensors.input_ids.shape, data: new BigInt64Array(c.tensors.input_ids.data.length) };
    if (!t) die(`model input '${meta.name}' has no reference tensor '${args.graph}.${meta.name}' in ${args.caseDir}`);
    try {
      feeds[meta.name] = feedFor(ort, meta, t);
    } catch (e) {
      die(e.message);
    }
  }
  report.inputs = Object.keys(feeds);
  let out;
  try {
    out = await session.run(feeds, { logSeverityLevel: 4 });
  } catch (e) {
    failAll(`run failed: ${e.message}`);
    return report;
  }
  for (const name of session.outputNames) {
    const refName = referenceName(name, c);
    if (!refName) {
      report.uncompared.push(name);
      continue;
    }
    report.results.push(compare(name, refName, out[name], c.tensors[refName], atol, rtol, c.tensors.attention_mask));
  }
  if (!report.results.length)
    failAll(`no output of the model (${session.outputNames.join(', ')}) has a reference tensor '${args.graph}.<name>'`);
  return report;
}

const args = parseArgs(process.argv.slice(2));
const ort = loadOrt(die);
ort.env.logLevel = 'fatal';  // failures are reported by the harness itself
const report = await run(args, ort);
finishReport(report, args, 'component parity',
             (r) => `${args.graph}.${r.output}` + (r.reference && r.reference !== r.output ? ` (reference ${r.reference})` : ''),
             () => null, report.uncompared.map((name) => `${args.graph}.${name}: no reference, not compared`));
