# genai_greedy.py - ONNX Runtime GenAI's own generator, greedy, on mobius's default (ort-genai)
# folders, loaded as they are written, against transformers' greedy generate (a golden case's
# greedy.input_ids -> greedy.tokens).
#
#   python genai_greedy.py [--agreement FLOOR [--overall FLOOR]] CASE_DIR OUT_DIR [CASE_DIR OUT_DIR ...]
#
# GenAI stops at an end-of-sequence token of genai_config.json; the reference's generate had
# none, so its tokens are compared up to and including the first that GenAI would stop at.
# Without --agreement, GenAI's tokens must be the reference's. With it (a quantized folder, whose
# greedy path may part from float32's at a near tie and then never meet it again), the generation
# must run to its end, and the model's next-token choice along the reference's tokens (prompt and
# reference continuation appended at once, one choice per position: top-1 agreement) must agree
# at a share of at least FLOOR of the positions (and, with --overall, of all cases' positions
# together).
# Prints one line per case and "genai_greedy: P passed, F failed"; exit 0 when every case passes.
import json
import os
import struct
import sys

import numpy as np
import onnxruntime_genai as og


def greedy_reference(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for key in ("greedy.input_ids", "greedy.tokens"):
        m = header[key]
        a, b = m["data_offsets"]
        out[key] = np.frombuffer(data[a:b], dtype=np.int64).reshape(m["shape"])[0].tolist()
    return out["greedy.input_ids"], out["greedy.tokens"]


def eos_ids(folder):
    eos = json.load(open(os.path.join(folder, "genai_config.json")))["model"].get("eos_token_id", [])
    return set(eos if isinstance(eos, list) else [eos])


def until_eos(tokens, eos):
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def generate(model, ids, n):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + n, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array([ids], dtype=np.int32))
    # Each step's token, the end-of-sequence one included (the sequence leaves it out).
    out = []
    while not gen.is_done():
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out


def top1_along(model, ids, want):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + len(want), do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array([ids + want[:-1]], dtype=np.int32))
    choice = np.asarray(gen.get_output("logits"))[0].argmax(-1)[len(ids) - 1 :]
    return sum(int(c) == t for c, t in zip(choice, want))


def main(args):
    floor = overall = None
    if args[:1] == ["--agreement"]:
        floor, args = float(args[1]), args[2:]
    if args[:1] == ["--overall"]:
        overall, args = float(args[1]), args[2:]
    agreed = positions = 0
    if not args or len(args) % 2:
        print("genai_greedy: usage: genai_greedy.py [--agreement FLOOR] CASE_DIR OUT_DIR [...]", file=sys.stderr)
        return 2
    passed = failed = 0
    for case, folder in zip(args[0::2], args[1::2]):
        name = os.path.basename(os.path.normpath(case))
        ids, want = greedy_reference(os.path.join(case, "reference.safetensors"))
        try:
            want = until_eos(want, eos_ids(folder))
            model = og.Model(folder)
            got = generate(model, ids, len(want))
            agree = top1_along(model, ids, want) if floor is not None else None
        except Exception as e:  # a folder GenAI cannot load or run
            got, agree = "error: " + str(e).splitlines()[0][:300], None
        if floor is None:
            ok = got == want
            detail = f"{got}" + ("" if ok else f" (transformers: {want})")
        else:
            ok = agree is not None and agree >= floor * len(want)
            detail = (f"top-1 agreement {agree}/{len(want)} (floor {floor}), generated {got}"
                      if agree is not None else f"{got}")
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if agree is not None:
            agreed, positions = agreed + agree, positions + len(want)
    if overall is not None:
        ok = positions > 0 and agreed >= overall * positions
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} every case: top-1 agreement {agreed}/{positions} (floor {overall})")
    print(f"genai_greedy: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
