// validate_genai.mjs - checks genai_config.json files against a JSON schema (genai_schema.json),
// with no npm package: it implements the subset of JSON Schema the schema uses.
//
//   node tests/runtime/validate_genai.mjs [--genai-checks] SCHEMA FILE...
//   node tests/runtime/validate_genai.mjs --self-check SCHEMA
//
// Keywords: type (a name or a list; "integer" is an integral number), required, properties,
// additionalProperties (false, or a schema for the other keys), enum, items (one schema),
// minimum, maximum, anyOf, $ref ("#/$defs/NAME"), and the annotations $schema, $id, title,
// description, $comment, $defs. A schema using any other keyword is refused (exit 2) rather than
// half-checked.
//
// --genai-checks adds what onnxruntime-genai checks beyond parsing (src/generators.cpp, config.cpp),
// which no schema keyword of this subset says: search.max_length <= model.context_length; every
// eos id in [0, vocab_size); when sampling, top_k <= vocab_size and top_p in [0, 1];
// num_return_sequences <= num_beams; decoder.filename relative, without "..", and present beside
// the file.
//
// --self-check validates a known-good config and mutations of it that GenAI rejects (a list
// pad_token_id, an unknown type, a string where an int is required, ...), and fails unless every
// mutation is caught at the expected JSON path and the good config passes.
//
// Exit status: 0 every file is valid (or the self-check passed); 1 a file is invalid, unreadable
// or not JSON (each problem printed as "FILE: JSON_PATH: reason"); 2 usage or schema error.
import fs from 'fs';
import path from 'path';

const ANNOTATIONS = new Set(['$schema', '$id', 'title', 'description', '$comment', '$defs']);
const KEYWORDS = new Set(['type', 'required', 'properties', 'additionalProperties', 'enum', 'items',
  'minimum', 'maximum', 'anyOf', '$ref']);
const TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);

function usage(msg) {
  process.stderr.write(`validate_genai: ${msg}\n` +
    'usage: validate_genai.mjs [--genai-checks] SCHEMA FILE... | --self-check SCHEMA\n');
  process.exit(2);
}

// --- JSON paths -------------------------------------------------------------------------------

function childPath(p, key) {
  if (typeof key === 'number') return `${p}[${key}]`;
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `${p}.${key}` : `${p}[${JSON.stringify(key)}]`;
}

function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;  // string, boolean, object
}

function show(v) {
  const s = JSON.stringify(v);
  return s.length > 60 ? s.slice(0, 57) + '...' : s;
}

// --- the schema ---------------------------------------------------------------------------------

function resolveRef(root, ref) {
  const m = /^#\/\$defs\/([^/]+)$/.exec(ref);
  if (!m || !root.$defs || !Object.prototype.hasOwnProperty.call(root.$defs, m[1]))
    throw new Error(`unresolvable $ref '${ref}' (only "#/$defs/NAME" is supported)`);
  return root.$defs[m[1]];
}

// Every subschema uses only the keywords implemented here, with values of the right shape.
function checkSchema(root, s, where) {
  if (typeof s === 'boolean') return;
  if (typeOf(s) !== 'object') throw new Error(`${where}: a schema must be an object or a boolean`);
  for (const [k, v] of Object.entries(s)) {
    if (ANNOTATIONS.has(k)) continue;
    if (!KEYWORDS.has(k)) throw new Error(`${where}: keyword '${k}' is not implemented by this validator`);
    const at = `${where}/${k}`;
    switch (k) {
      case 'type':
        for (const t of Array.isArray(v) ? v : [v])
          if (!TYPES.has(t)) throw new Error(`${at}: unknown type '${t}'`);
        break;
      case 'required':
        if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw new Error(`${at}: must be a list of strings`);
        break;
      case 'properties':
        if (typeOf(v) !== 'object') throw new Error(`${at}: must be an object`);
        for (const [pk, ps] of Object.entries(v)) checkSchema(root, ps, `${at}/${pk}`);
        break;
      case 'additionalProperties':
      case 'items':
        checkSchema(root, v, at);
        break;
      case 'anyOf':
        if (!Array.isArray(v) || !v.length) throw new Error(`${at}: must be a non-empty list`);
        v.forEach((b, i) => checkSchema(root, b, `${at}/${i}`));
        break;
      case 'enum':
        if (!Array.isArray(v)) throw new Error(`${at}: must be a list`);
        break;
      case 'minimum':
      case 'maximum':
        if (typeof v !== 'number') throw new Error(`${at}: must be a number`);
        break;
      case '$ref':
        resolveRef(root, v);
        break;
    }
  }
  if (s.$defs) for (const [dk, ds] of Object.entries(s.$defs)) checkSchema(root, ds, `${where}/$defs/${dk}`);
}

// --- validation ---------------------------------------------------------------------------------

function validate(root, s, v, p, errors) {
  if (s === true) return;
  if (s === false) {
    errors.push([p, 'no value is allowed here']);
    return;
  }
  if (s.$ref) validate(root, resolveRef(root, s.$ref), v, p, errors);
  const t = typeOf(v);
  if (s.type !== undefined) {
    const allowed = Array.isArray(s.type) ? s.type : [s.type];
    const ok = allowed.some((a) => a === t || (a === 'number' && t === 'integer'));
    if (!ok) {
      errors.push([p, `expected ${allowed.join(' or ')}, got ${t === 'number' ? 'non-integral number' : t}${t === 'null' ? '' : ' ' + show(v)}`]);
      return;  // the other keywords would only repeat it
    }
  }
  if (s.enum !== undefined && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v)))
    errors.push([p, `${show(v)} is not one of ${s.enum.map((e) => JSON.stringify(e)).join(', ')}`]);
  if (typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) errors.push([p, `${v} is below the minimum ${s.minimum}`]);
    if (s.maximum !== undefined && v > s.maximum) errors.push([p, `${v} is above the maximum ${s.maximum}`]);
  }
  if (t === 'object') {
    for (const r of s.required || [])
      if (!Object.prototype.hasOwnProperty.call(v, r)) errors.push([p, `missing required key '${r}'`]);
    const props = s.properties || {};
    for (const [k, val] of Object.entries(v)) {
      if (Object.prototype.hasOwnProperty.call(props, k)) validate(root, props[k], val, childPath(p, k), errors);
      else if (s.additionalProperties === false) errors.push([childPath(p, k), 'unknown key (GenAI rejects keys it does not know here)']);
      else if (s.additionalProperties !== undefined) validate(root, s.additionalProperties, val, childPath(p, k), errors);
    }
  }
  if (t === 'array' && s.items !== undefined) v.forEach((e, i) => validate(root, s.items, e, childPath(p, i), errors));
  if (s.anyOf) {
    const branches = s.anyOf.map((b) => {
      const e = [];
      validate(root, b, v, p, e);
      return e;
    });
    if (branches.every((e) => e.length)) {
      const why = branches.map((e) => e.map(([bp, r]) => (bp === p ? r : `${bp}: ${r}`)).join('; ')).join(' | ');
      errors.push([p, `matches none of the allowed forms (${why})`]);
    }
  }
}

// What GenAI checks after parsing (see the header).
function genaiChecks(cfg, file, errors) {
  const m = cfg && cfg.model;
  const s = (cfg && cfg.search) || {};
  if (typeOf(m) !== 'object') return;
  const vocab = m.vocab_size;
  const eos = m.eos_token_id === undefined ? [] : Array.isArray(m.eos_token_id) ? m.eos_token_id : [m.eos_token_id];
  eos.forEach((id, i) => {
    if (Number.isInteger(id) && Number.isInteger(vocab) && (id < 0 || id >= vocab))
      errors.push([Array.isArray(m.eos_token_id) ? `$.model.eos_token_id[${i}]` : '$.model.eos_token_id',
        `eos id ${id} is outside [0, vocab_size ${vocab}) (Generator rejects it)`]);
  });
  if (Number.isInteger(s.max_length) && Number.isInteger(m.context_length) && s.max_length > m.context_length)
    errors.push(['$.search.max_length', `${s.max_length} is above model.context_length ${m.context_length} (Generator rejects it)`]);
  const beams = s.num_beams === undefined ? 1 : s.num_beams;
  if (Number.isInteger(beams) && (beams < 1 || beams > 32)) errors.push(['$.search.num_beams', `${beams} is not in [1, 32]`]);
  if (Number.isInteger(s.num_return_sequences) && Number.isInteger(beams) && (s.num_return_sequences < 1 || s.num_return_sequences > beams))
    errors.push(['$.search.num_return_sequences', `${s.num_return_sequences} is not in [1, num_beams ${beams}]`]);
  const topK = s.top_k === undefined ? 50 : s.top_k;
  const greedy = !s.do_sample || topK === 1 || s.temperature === 0;
  if (!greedy) {
    if (beams !== 1) errors.push(['$.search.do_sample', 'sampling cannot be used with a beam search']);
    if (typeof s.top_p === 'number' && (s.top_p < 0 || s.top_p > 1)) errors.push(['$.search.top_p', `${s.top_p} is not in [0, 1]`]);
    if (Number.isInteger(topK) && Number.isInteger(vocab) && (topK < 0 || topK > vocab))
      errors.push(['$.search.top_k', `${topK} is not in [0, vocab_size ${vocab}] (sampling rejects it)`]);
  }
  const d = m.decoder;
  if (typeOf(d) === 'object' && typeof d.filename === 'string') {
    const f = d.filename;
    if (!f || f.startsWith('/') || f.startsWith('\\') || /^[A-Za-z]:/.test(f) || f.split(/[\\/]/).includes('..'))
      errors.push(['$.model.decoder.filename', `'${f}' is not a relative path under the model folder`]);
    else if (file && !fs.existsSync(path.join(path.dirname(file), f)))
      errors.push(['$.model.decoder.filename', `'${f}' does not exist beside ${path.basename(file)}`]);
  }
}

function validateValue(schema, cfg, { checks = false, file = null } = {}) {
  const errors = [];
  validate(schema, schema, cfg, '$', errors);
  if (checks) genaiChecks(cfg, file, errors);
  return errors;
}

function loadSchema(file) {
  let schema;
  try {
    schema = JSON.parse(fs.readFileSync(file, 'utf8'));
    checkSchema(schema, schema, '#');
  } catch (e) {
    process.stderr.write(`validate_genai: schema ${file}: ${e.message}\n`);
    process.exit(2);
  }
  return schema;
}

// --- self-check ---------------------------------------------------------------------------------

function goodConfig() {
  return {
    model: {
      type: 'llama', context_length: 128, vocab_size: 256, bos_token_id: 1,
      eos_token_id: [2, 3], pad_token_id: 2,
      decoder: {
        filename: 'model.onnx',
        session_options: { log_id: 'onnxruntime-genai', provider_options: [{ cuda: { enable_cuda_graph: '0' } }] },
        head_size: 16, hidden_size: 64, num_attention_heads: 4, num_key_value_heads: 2, num_hidden_layers: 2,
        inputs: { input_ids: 'input_ids', attention_mask: 'attention_mask', position_ids: 'position_ids',
          past_key_names: 'past_key_values.%d.key', past_value_names: 'past_key_values.%d.value' },
        outputs: { logits: 'logits', present_key_names: 'present.%d.key', present_value_names: 'present.%d.value' },
      },
    },
    search: { do_sample: true, temperature: 0.6, top_k: 50, top_p: 0.9, max_length: 128, min_length: 0,
      num_beams: 1, num_return_sequences: 1, past_present_share_buffer: false, repetition_penalty: 1.0,
      early_stopping: true, diversity_penalty: 0.0, length_penalty: 1.0, no_repeat_ngram_size: 0 },
  };
}

function selfCheck(schema) {
  // [what, mutation, expected path (null: valid), expected words in the reason, --genai-checks]
  const cases = [
    ['the good config', () => {}, null],
    ['an unknown scalar at the root (Root_Element ignores it)', (c) => { c.comment = 'x'; }, null],
    ['qwen3_5_text type', (c) => { c.model.type = 'qwen3_5_text'; }, null],
    ['a scalar eos_token_id', (c) => { c.model.eos_token_id = 2; }, null],
    ['a list pad_token_id', (c) => { c.model.pad_token_id = [2, 3]; }, '$.model.pad_token_id', 'expected integer, got array'],
    ['an unknown model type', (c) => { c.model.type = 'olmo2'; }, '$.model.type', 'is not one of'],
    ['an HF composite type GenAI runs as a VLM', (c) => { c.model.type = 'qwen3_5'; }, '$.model.type', 'is not one of'],
    ['a string where an int is required', (c) => { c.model.decoder.head_size = '16'; }, '$.model.decoder.head_size', 'expected integer, got string'],
    ['a non-integral int', (c) => { c.search.top_k = 2.5; }, '$.search.top_k', 'non-integral'],
    ['an int beyond int32', (c) => { c.model.vocab_size = 3e9; }, '$.model.vocab_size', 'above the maximum'],
    ['context_length 0', (c) => { c.model.context_length = 0; }, '$.model.context_length', 'below the minimum'],
    ['no context_length', (c) => { delete c.model.context_length; }, '$.model', "missing required key 'context_length'"],
    ['no decoder filename', (c) => { delete c.model.decoder.filename; }, '$.model.decoder', "missing required key 'filename'"],
    ['null bos_token_id', (c) => { c.model.bos_token_id = null; }, '$.model.bos_token_id', 'got null'],
    ['a string in the eos list', (c) => { c.model.eos_token_id = [2, '3']; }, '$.model.eos_token_id', 'matches none'],
    ['an unknown decoder key', (c) => { c.model.decoder.rope_theta = 10000; }, '$.model.decoder.rope_theta', 'unknown key'],
    ['an unknown decoder input', (c) => { c.model.decoder.inputs.past_conv_state_names = 'x'; }, '$.model.decoder.inputs.past_conv_state_names', 'unknown key'],
    ['an unknown search key', (c) => { c.search.max_new_tokens = 10; }, '$.search.max_new_tokens', 'unknown key'],
    ['a string for a bool', (c) => { c.search.do_sample = 'true'; }, '$.search.do_sample', 'expected boolean'],
    ['an unknown object at the root', (c) => { c.generation = {}; }, '$.generation', 'expected string or number or boolean or null'],
    ['a non-string session config entry', (c) => { c.model.decoder.session_options.threads = 4; }, '$.model.decoder.session_options.threads', 'expected string'],
    ['max_length above context_length', (c) => { c.search.max_length = 4096; }, '$.search.max_length', 'above model.context_length', true],
    ['an eos id outside the vocabulary', (c) => { c.model.eos_token_id = [2, 256]; }, '$.model.eos_token_id[1]', 'outside [0, vocab_size', true],
    ['top_k above vocab_size when sampling', (c) => { c.search.top_k = 1000; }, '$.search.top_k', 'sampling rejects', true],
    ['a filename outside the folder', (c) => { c.model.decoder.filename = '../model.onnx'; }, '$.model.decoder.filename', 'not a relative path', true],
  ];
  let failed = 0;
  for (const [what, mutate, wantPath, wantWords, checks] of cases) {
    const c = goodConfig();
    mutate(c);
    const errors = validateValue(schema, c, { checks: !!checks });
    let ok;
    if (wantPath === null) ok = errors.length === 0;
    else ok = errors.some(([p, r]) => p === wantPath && r.includes(wantWords));
    const got = errors.length ? errors.map(([p, r]) => `${p}: ${r}`).join('; ') : 'valid';
    process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${what}: ${got}\n`);
    if (!ok) failed++;
  }
  // Text that is not JSON is reported, not thrown.
  const tmp = path.join(fs.mkdtempSync(path.join(process.env.TMPDIR || '/tmp', 'genai-selfcheck-')), 'genai_config.json');
  fs.writeFileSync(tmp, '{"model": ');
  const notJson = validateFile(schema, tmp, false);
  fs.rmSync(path.dirname(tmp), { recursive: true, force: true });
  const jsonOk = notJson.length === 1 && notJson[0][0] === '$' && notJson[0][1].startsWith('not JSON');
  process.stdout.write(`${jsonOk ? 'ok  ' : 'FAIL'} text that is not JSON: ${notJson.map(([p, r]) => `${p}: ${r}`).join('; ')}\n`);
  if (!jsonOk) failed++;
  process.stdout.write(`self-check: ${cases.length + 1 - failed} passed, ${failed} failed\n`);
  process.exit(failed ? 1 : 0);
}

function validateFile(schema, file, checks) {
  let text;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    return [['$', `cannot read: ${e.message}`]];
  }
  let cfg;
  try {
    cfg = JSON.parse(text);
  } catch (e) {
    return [['$', `not JSON: ${e.message}`]];
  }
  return validateValue(schema, cfg, { checks, file });
}

// --- main ---------------------------------------------------------------------------------------

const args = process.argv.slice(2);
if (args[0] === '--self-check') {
  if (args.length !== 2) usage('--self-check takes the schema alone');
  selfCheck(loadSchema(args[1]));
} else {
  let checks = false;
  if (args[0] === '--genai-checks') {
    checks = true;
    args.shift();
  }
  if (args.length < 2) usage('a schema and at least one file are needed');
  if (args.some((a) => a.startsWith('--'))) usage(`unknown option in ${args.join(' ')}`);
  const schema = loadSchema(args[0]);
  let bad = 0;
  for (const file of args.slice(1)) {
    const errors = validateFile(schema, file, checks);
    if (errors.length) bad++;
    for (const [p, r] of errors) process.stderr.write(`${file}: ${p}: ${r}\n`);
  }
  process.stdout.write(`validate_genai: ${args.length - 1 - bad} valid, ${bad} invalid\n`);
  process.exit(bad ? 1 : 0);
}
