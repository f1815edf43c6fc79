"""genai_parse.py - checks model folders' genai_config.json as ONNX Runtime GenAI reads it.

    python tests/runtime/genai_parse.py FOLDER...
    python tests/runtime/genai_parse.py --self-check

Two stages, both with the onnxruntime_genai package of this python (tests/runtime/requirements.txt
pins 0.18.0):

1. GenAI's own parser: og.Config(FOLDER) reads genai_config.json exactly as og.Model does and
   refuses text that is not JSON, keys it does not know (in model, decoder, its inputs and outputs,
   session_options, search, and objects at the root), values of the wrong type, ints that are not
   integral or do not fit int32, a missing or non-positive context_length, and a decoder filename
   that is absolute or contains "..".
2. What GenAI checks only later, when og.Model opens the folder or a Generator is made from the
   model, which og.Config accepts (each was tried on a built llama-tiny folder):
   - model.type must be one GenAI runs as a single decoder-only model (LLM_TYPES); og.Model
     refuses any other ("Unsupported model_type"), or wants the vision, speech or pipeline parts
     of its multimodal types, which mobius does not write;
   - model.decoder.filename must name a file beside genai_config.json (og.Model opens it);
   - model.vocab_size >= 1, and every eos id in [0, vocab_size);
   - search.max_length <= model.context_length;
   - search.num_beams in [1, 32], search.num_return_sequences in [1, num_beams];
   - when sampling (do_sample, with top_k != 1 and temperature != 0): no beam search, top_k in
     [0, vocab_size], top_p in [0, 1].

Each problem is printed as "FOLDER: reason" (GenAI's parser stops at its first; the later checks
report every one).

--self-check writes a known-good folder (TEMPLATE, and a decoder file that is not ONNX) in a temp
folder, and fails unless the good config passes and each mutation of it is refused by the
expected stage: GenAI's parser for syntax, keys and types, the later checks for the rest (and a few
values GenAI accepts are accepted). It also checks LLM_TYPES against the installed GenAI: og.Model
on the folder with each listed type gets as far as opening the decoder file, and with a type
outside the list does not.

Exit status: 0 every folder passed (or the self-check did), 1 a problem, 2 usage, 77 (skipped)
without onnxruntime_genai.
"""

import copy
import json
import os
import shutil
import sys
import tempfile

try:
    import onnxruntime_genai as og
except ImportError as e:
    print(f"genai_parse: onnxruntime_genai is not importable in {sys.executable} ({e}); skipped")
    sys.exit(77)

CONFIG = "genai_config.json"

# The types GenAI 0.18.0 runs as one decoder-only model (ModelType::IsLLM, and "decoder"): og.Model
# on a llama-tiny folder loads and generates with each. The self-check keeps this list honest.
LLM_TYPES = frozenset("""
    chatglm decoder ernie4_5 gemma gemma2 gemma3_text gemma3_vl_text gemma4_text gpt2 gptoss granite
    granitemoehybrid hunyuandensev1 internlm2 lfm2 lfm2_audio_text lfm2_moe lfm2_vl_text llama
    mistral mistral3_text nemotron olmo phi phi3 phi3small phimoe qwen2 qwen2_5_vl_text qwen3
    qwen3_5_moe_text qwen3_5_text qwen3_vl_text smollm3
""".split())


# --- stage 1: GenAI's parser ---------------------------------------------------------------------

def parser_problem(folder):
    """GenAI's parser's refusal of FOLDER's genai_config.json, or None when it accepts it."""
    try:
        og.Config(folder)
    except Exception as e:  # og raises RuntimeError; anything else is a refusal too
        msg = " ".join(str(e).split())
        prefix = f"Error encountered while parsing '{os.path.join(folder, CONFIG)}' "
        return msg[len(prefix):] if msg.startswith(prefix) else msg
    return None


# --- stage 2: what GenAI checks after parsing ----------------------------------------------------

def as_int(v):
    """V as an int when it is integral (GenAI reads ints as doubles: 128.0 is 128), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v) if float(v).is_integer() else None


def later_checks(cfg, folder):
    """[(json path, reason)] for what og.Model or a Generator refuses in a config the parser took."""
    errors = []
    m = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    s = cfg.get("search") if isinstance(cfg.get("search"), dict) else {}

    t = m.get("type", "")
    if t not in LLM_TYPES:
        errors.append(("$.model.type", f"{t!r} is not a type GenAI runs as a decoder-only model "
                                        "(og.Model refuses it)"))

    d = m.get("decoder") if isinstance(m.get("decoder"), dict) else {}
    f = d.get("filename", "")
    if not f:
        errors.append(("$.model.decoder.filename", "no decoder file is named (og.Model opens it)"))
    elif not os.path.isfile(os.path.join(folder, f)):
        errors.append(("$.model.decoder.filename", f"{f!r} does not exist beside {CONFIG}"))

    vocab = as_int(m.get("vocab_size", 0))
    if vocab is not None and vocab < 1:
        errors.append(("$.model.vocab_size", f"{vocab} is below 1 (the Generator refuses it)"))
    eos = m.get("eos_token_id")
    ids = [] if eos is None else eos if isinstance(eos, list) else [eos]
    for i, v in enumerate(ids):
        v = as_int(v)
        if v is not None and vocab is not None and not 0 <= v < vocab:
            where = f"$.model.eos_token_id[{i}]" if isinstance(eos, list) else "$.model.eos_token_id"
            errors.append((where, f"eos id {v} is outside [0, vocab_size {vocab}) (the Generator refuses it)"))

    max_length, context = as_int(s.get("max_length")), as_int(m.get("context_length"))
    if max_length is not None and context is not None and max_length > context:
        errors.append(("$.search.max_length", f"{max_length} is above model.context_length {context} "
                                              "(the Generator refuses it)"))

    beams = as_int(s.get("num_beams", 1))
    if beams is not None and not 1 <= beams <= 32:
        errors.append(("$.search.num_beams", f"{beams} is not in [1, 32]"))
    sequences = as_int(s.get("num_return_sequences", 1))
    if sequences is not None and beams is not None and not 1 <= sequences <= beams:
        errors.append(("$.search.num_return_sequences", f"{sequences} is not in [1, num_beams {beams}]"))

    top_k = as_int(s.get("top_k", 50))
    if s.get("do_sample", False) and top_k != 1 and s.get("temperature", 1.0) != 0:
        if beams != 1:
            errors.append(("$.search.do_sample", "sampling cannot be used with a beam search"))
        top_p = s.get("top_p", 1.0)
        if isinstance(top_p, (int, float)) and not 0 <= top_p <= 1:
            errors.append(("$.search.top_p", f"{top_p} is not in [0, 1] (sampling refuses it)"))
        if top_k is not None and vocab is not None and not 0 <= top_k <= vocab:
            errors.append(("$.search.top_k", f"{top_k} is not in [0, vocab_size {vocab}] (sampling refuses it)"))
    return errors


# --- both ----------------------------------------------------------------------------------------

def problems(folder):
    """[(stage, reason)] for FOLDER: stage 'parser' (GenAI's parser) or 'later' (the later checks)."""
    file = os.path.join(folder, CONFIG)
    if not os.path.isfile(file):
        return [("parser", f"no {CONFIG}")]
    refusal = parser_problem(folder)
    if refusal is not None:
        return [("parser", f"GenAI's parser refuses it: {refusal}")]
    try:
        with open(file, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError) as e:
        return [("later", f"GenAI's parser accepts it but it is not JSON: {e}")]
    if not isinstance(cfg, dict):
        return [("later", "the top level is not an object")]
    return [("later", f"{p}: {r}") for p, r in later_checks(cfg, folder)]


# --- self-check ----------------------------------------------------------------------------------

TEMPLATE = {
    "model": {
        "type": "llama", "context_length": 128, "vocab_size": 256, "bos_token_id": 1,
        "eos_token_id": [2, 3], "pad_token_id": 2,
        "decoder": {
            "filename": "model.onnx",
            "session_options": {"log_id": "onnxruntime-genai",
                                "provider_options": [{"cuda": {"enable_cuda_graph": "0"}}]},
            "head_size": 16, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2,
            "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                       "position_ids": "position_ids", "past_key_names": "past_key_values.%d.key",
                       "past_value_names": "past_key_values.%d.value"},
            "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                        "present_value_names": "present.%d.value"},
        },
    },
    "search": {
        "do_sample": True, "temperature": 0.6, "top_k": 50, "top_p": 0.9, "max_length": 128,
        "min_length": 0, "num_beams": 1, "num_return_sequences": 1, "past_present_share_buffer": False,
        "repetition_penalty": 1.0, "early_stopping": True, "diversity_penalty": 0.0,
        "length_penalty": 1.0, "no_repeat_ngram_size": 0,
    },
}


def model(c):
    return c["model"]


def decoder(c):
    return c["model"]["decoder"]


def search(c):
    return c["search"]


# (what, mutation of the template, expected stage (None: accepted), words the reason must hold).
# A string instead of a mutation is the text of genai_config.json.
CASES = [
    ("the good config", lambda c: None, None, ""),
    ("an unknown scalar at the root", lambda c: c.update(comment="x"), None, ""),
    ("qwen3_5_text type", lambda c: model(c).update(type="qwen3_5_text"), None, ""),
    ("a scalar eos_token_id", lambda c: model(c).update(eos_token_id=2), None, ""),
    ("an integral double where an int is read", lambda c: model(c).update(vocab_size=256.0), None, ""),
    ("top_k above vocab_size when greedy", lambda c: search(c).update(do_sample=False, top_k=1000), None, ""),
    ("top_p above 1 at temperature 0", lambda c: search(c).update(top_p=1.5, temperature=0.0), None, ""),
    ("a beam search of 32 returning 32", lambda c: search(c).update(do_sample=False, num_beams=32, num_return_sequences=32), None, ""),
    ("max_length equal to context_length", lambda c: search(c).update(max_length=128), None, ""),
    # GenAI's parser
    ("text that is not JSON", '{"model": ', "parser", "Unexpected end of JSON"),
    ("a list pad_token_id", lambda c: model(c).update(pad_token_id=[2, 3]), "parser", '"pad_token_id"'),
    ("a string where an int is read", lambda c: decoder(c).update(head_size="16"), "parser", "head_size - Expected a number"),
    ("a non-integral int", lambda c: search(c).update(top_k=2.5), "parser", "is not an integer"),
    ("an int beyond int32", lambda c: model(c).update(vocab_size=3e9), "parser", "vocab_size"),
    ("context_length 0", lambda c: model(c).update(context_length=0), "parser", "context_length must be > 0"),
    ("no context_length", lambda c: model(c).pop("context_length"), "parser", "context_length is 0 or was not set"),
    ("null bos_token_id", lambda c: model(c).update(bos_token_id=None), "parser", "bos_token_id - Expected a number"),
    ("a string in the eos list", lambda c: model(c).update(eos_token_id=[2, "3"]), "parser", "eos_token_id"),
    ("an unknown model key", lambda c: model(c).update(rope_theta=10000), "parser", 'Unknown value "rope_theta"'),
    ("an unknown decoder key", lambda c: decoder(c).update(rope_theta=10000), "parser", 'Unknown value "rope_theta"'),
    ("an unknown decoder input", lambda c: decoder(c)["inputs"].update(past_conv_state_names="x"), "parser", 'Unknown value "past_conv_state_names"'),
    ("an unknown search key", lambda c: search(c).update(max_new_tokens=10), "parser", 'Unknown value "max_new_tokens"'),
    ("a string for a bool", lambda c: search(c).update(do_sample="true"), "parser", "Expected a bool"),
    ("an unknown object at the root", lambda c: c.update(generation={}), "parser", 'Unknown value "generation"'),
    ("a non-string session option", lambda c: decoder(c)["session_options"].update(threads=4), "parser", "Expected a string"),
    ("a decoder filename outside the folder", lambda c: decoder(c).update(filename="../model.onnx"), "parser", "path traversal"),
    ("an absolute decoder filename", lambda c: decoder(c).update(filename="/tmp/model.onnx"), "parser", "relative path"),
    # the later checks
    ("an unknown model type", lambda c: model(c).update(type="olmo2"), "later", "$.model.type: 'olmo2'"),
    ("an HF composite type GenAI runs as a VLM", lambda c: model(c).update(type="qwen3_5"), "later", "$.model.type: 'qwen3_5'"),
    ("no model type", lambda c: model(c).pop("type"), "later", "$.model.type: ''"),
    ("a decoder file that is not there", lambda c: decoder(c).update(filename="other.onnx"), "later", "'other.onnx' does not exist"),
    ("no decoder filename", lambda c: decoder(c).pop("filename"), "later", "no decoder file"),
    ("no vocab_size", lambda c: model(c).pop("vocab_size"), "later", "$.model.vocab_size: 0 is below 1"),
    ("an eos id outside the vocabulary", lambda c: model(c).update(eos_token_id=[2, 256]), "later", "$.model.eos_token_id[1]: eos id 256"),
    ("a negative eos id", lambda c: model(c).update(eos_token_id=-1), "later", "$.model.eos_token_id: eos id -1"),
    ("max_length above context_length", lambda c: search(c).update(max_length=129), "later", "$.search.max_length: 129"),
    ("num_beams 0", lambda c: search(c).update(do_sample=False, num_beams=0), "later", "$.search.num_beams: 0"),
    ("num_beams 33", lambda c: search(c).update(do_sample=False, num_beams=33), "later", "$.search.num_beams: 33"),
    ("num_return_sequences above num_beams", lambda c: search(c).update(num_return_sequences=2), "later", "$.search.num_return_sequences: 2"),
    ("num_return_sequences 0", lambda c: search(c).update(num_return_sequences=0), "later", "$.search.num_return_sequences: 0"),
    ("sampling with a beam search", lambda c: search(c).update(num_beams=2), "later", "$.search.do_sample: sampling cannot"),
    ("top_k above vocab_size when sampling", lambda c: search(c).update(top_k=1000), "later", "$.search.top_k: 1000"),
    ("a negative top_k when sampling", lambda c: search(c).update(top_k=-1), "later", "$.search.top_k: -1"),
    ("top_p above 1 when sampling", lambda c: search(c).update(top_p=1.5), "later", "$.search.top_p: 1.5"),
]

# Types outside LLM_TYPES that og.Model knows or refuses: none may open as one decoder-only model.
NOT_LLM_TYPES = ["olmo2", "qwen3_5", "gemma3", "phi3v", "whisper", "multimodal", ""]


def write_folder(folder, text):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.onnx"), "w", encoding="utf-8") as fh:
        fh.write("not an ONNX model\n")
    with open(os.path.join(folder, CONFIG), "w", encoding="utf-8") as fh:
        fh.write(text)


def opens_decoder(folder):
    """(True when og.Model gets as far as opening the decoder file, og.Model's message)."""
    try:
        og.Model(og.Config(folder))
    except Exception as e:
        msg = " ".join(str(e).split())
        return f"Load model from {os.path.join(folder, 'model.onnx')} failed" in msg, msg
    return False, "og.Model opened a file that is not ONNX"


def self_check():
    failed = 0
    total = 0
    tmp = tempfile.mkdtemp(prefix="genai-parse-selfcheck-")
    try:
        for i, (what, mutate, want_stage, want_words) in enumerate(CASES):
            c = copy.deepcopy(TEMPLATE)
            if not isinstance(mutate, str):
                mutate(c)
            folder = os.path.join(tmp, f"case{i}")
            write_folder(folder, mutate if isinstance(mutate, str) else json.dumps(c, indent=2))
            got = problems(folder)
            if want_stage is None:
                ok = not got
            else:
                ok = any(stage == want_stage and want_words in reason for stage, reason in got)
            shown = "; ".join(f"[{stage}] {reason}" for stage, reason in got) or "accepted"
            print(f"{'ok  ' if ok else 'FAIL'} {what}: {shown}")
            total += 1
            failed += not ok

        # LLM_TYPES against the installed GenAI.
        folder = os.path.join(tmp, "types")
        wrong = []
        for t in sorted(LLM_TYPES) + NOT_LLM_TYPES:
            c = copy.deepcopy(TEMPLATE)
            model(c)["type"] = t
            decoder(c)["session_options"]["provider_options"] = []  # the CPU alone
            write_folder(folder, json.dumps(c))
            opened, msg = opens_decoder(folder)
            if opened != (t in LLM_TYPES):
                wrong.append(f"{t!r}: {msg.replace(folder + os.sep, '')}")
        print(f"{'FAIL' if wrong else 'ok  '} og.Model opens the decoder for the {len(LLM_TYPES)} listed "
              f"types and not for {', '.join(repr(t) for t in NOT_LLM_TYPES)}"
              + (": " + "; ".join(wrong) if wrong else ""))
        total += 1
        failed += bool(wrong)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"self-check: {total - failed} passed, {failed} failed (onnxruntime_genai {og.__version__})")
    return 1 if failed else 0


def main(argv):
    if argv == ["--self-check"]:
        return self_check()
    if not argv or any(a.startswith("--") for a in argv):
        print("usage: genai_parse.py FOLDER... | --self-check", file=sys.stderr)
        return 2
    bad = 0
    for folder in argv:
        found = problems(folder)
        bad += bool(found)
        for _, reason in found:
            print(f"{folder}: {reason}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
