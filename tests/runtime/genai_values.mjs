// genai_values.mjs - every number genai_config.json states, checked against the checkpoint's
// config.json (its text_config for a composite model) and generation_config.json, as
// transformers defines them:
//   num_attention_heads, hidden_size, num_hidden_layers, vocab_size: the config's own, under the
//   family's spelling (transformers' attribute_map: GPT-2's n_head, n_embd, n_layer, MPT's
//   n_heads, d_model, n_layers, XGLM's attention_heads, d_model, num_layers, ...);
//   num_key_value_heads: num_key_value_heads (Falcon's num_kv_heads), else num_attention_heads;
//   one for the multi-query forms (GPT-BigCode's multi_query, Falcon's outside its new decoder);
//   head_size: head_dim, else hidden_size / num_attention_heads;
//   context_length: max_position_embeddings (n_positions, MPT's max_seq_len);
//   bos, eos and pad token ids: generation_config.json's, else config.json's (eos ids outside the
//   vocabulary dropped; pad, when there is none, the first eos).
//
//   node genai_values.mjs CHECKPOINT_DIR GENAI_CONFIG
// Prints one line per mismatch; exit 0 when all agree, 1 otherwise.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";

const [dir, file] = process.argv.slice(2);
const read = (p) => JSON.parse(readFileSync(p, "utf8"));
const cfg = read(path.join(dir, "config.json"));
const gen = existsSync(path.join(dir, "generation_config.json")) ? read(path.join(dir, "generation_config.json")) : {};
const tc = cfg.text_config && typeof cfg.text_config === "object" ? { ...cfg, ...cfg.text_config } : cfg;
const g = read(file);
const m = g.model, d = m.decoder;
const bad = [];
const expect = (what, got, want) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(`${what}: genai_config.json has ${JSON.stringify(got)}, config.json gives ${JSON.stringify(want)}`);
};
// The first of the spellings present in the config.
const first = (...keys) => { for (const k of keys) if (tc[k] !== undefined && tc[k] !== null) return tc[k]; return undefined; };
const heads = first("num_attention_heads", "n_head", "n_heads", "num_heads", "attention_heads");
const hidden = first("hidden_size", "n_embd", "d_model");
let kv = first("num_key_value_heads", "num_kv_heads") ?? heads;
if (tc.model_type === "gpt_bigcode") kv = tc.multi_query === false ? heads : 1;
if (tc.model_type === "falcon" && !tc.new_decoder_architecture) kv = tc.multi_query === false ? heads : 1;
expect("decoder.num_attention_heads", d.num_attention_heads, heads);
expect("decoder.num_key_value_heads", d.num_key_value_heads, kv);
expect("decoder.head_size", d.head_size, tc.head_dim ?? hidden / heads);
expect("decoder.hidden_size", d.hidden_size, hidden);
expect("decoder.num_hidden_layers", d.num_hidden_layers, first("num_hidden_layers", "n_layer", "n_layers", "num_layers"));
expect("vocab_size", m.vocab_size, tc.vocab_size);
// BLOOM names no length (ALiBi has none): it was trained on 2048 tokens.
expect("context_length", m.context_length,
       first("max_position_embeddings", "n_positions", "max_seq_len") ?? (tc.model_type === "bloom" ? 2048 : 4096));
const pick = (k) => (gen[k] !== undefined && gen[k] !== null ? gen[k] : tc[k] ?? cfg[k]);
const ids = (v) => (v === undefined || v === null ? [] : Array.isArray(v) ? v : [v]).filter((x) => Number.isInteger(x) && x >= 0 && x < tc.vocab_size);
const bos = ids(pick("bos_token_id"));
if (bos.length) expect("bos_token_id", m.bos_token_id, bos[0]);
const eos = ids(pick("eos_token_id"));
if (eos.length) expect("eos_token_id", Array.isArray(m.eos_token_id) ? m.eos_token_id : [m.eos_token_id], eos);
const pad = ids(pick("pad_token_id"));
if (pad.length || eos.length) expect("pad_token_id", m.pad_token_id, pad.length ? pad[0] : eos[0]);
if (bad.length) {
  for (const b of bad) console.log(b);
  process.exit(1);
}
