# genai_greedy.py - ONNX Runtime GenAI's own generator, greedy, on mobius's default (ort-genai)
# folders, gives the tokens transformers' generate gave (a golden case's greedy.input_ids ->
# greedy.tokens).
#
#   python genai_greedy.py CASE_DIR OUT_DIR [CASE_DIR OUT_DIR ...]
#
# The reference's generate had no end-of-sequence token, so GenAI is given none that could stop
# it early either: each folder is run from a copy whose genai_config.json names as eos and pad an
# id that neither the prompt nor the reference's tokens hold (GenAI stops at its eos; asking it for
# a minimum length instead would forbid the eos token, which transformers could still choose).
# Prints one line per case and "genai_greedy: P passed, F failed"; exit 0 when every case passes.
import json
import os
import shutil
import struct
import sys
import tempfile

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


def main(args):
    if not args or len(args) % 2:
        print("genai_greedy: usage: genai_greedy.py CASE_DIR OUT_DIR [...]", file=sys.stderr)
        return 2
    passed = failed = 0
    work = tempfile.mkdtemp(prefix="mobius-genai-")
    try:
        for case, folder in zip(args[0::2], args[1::2]):
            name = os.path.basename(os.path.normpath(case))
            ids, want = greedy_reference(os.path.join(case, "reference.safetensors"))
            copy = os.path.join(work, name)
            shutil.copytree(folder, copy)
            cfg_file = os.path.join(copy, "genai_config.json")
            cfg = json.load(open(cfg_file))
            unused = next(t for t in range(cfg["model"]["vocab_size"]) if t not in ids and t not in want)
            cfg["model"]["eos_token_id"] = unused
            cfg["model"]["pad_token_id"] = unused
            json.dump(cfg, open(cfg_file, "w"))
            try:
                model = og.Model(copy)
                params = og.GeneratorParams(model)
                params.set_search_options(max_length=len(ids) + len(want), do_sample=False)
                gen = og.Generator(model, params)
                gen.append_tokens(np.array([ids], dtype=np.int32))
                while not gen.is_done():
                    gen.generate_next_token()
                got = [int(t) for t in gen.get_sequence(0)][len(ids) :]
            except Exception as e:  # a folder GenAI cannot load or run
                got = "error: " + str(e).splitlines()[0][:300]
            if got == want:
                passed += 1
                print(f"ok   {name}: {got}")
            else:
                failed += 1
                print(f"FAIL {name}: {got} (transformers: {want})")
            shutil.rmtree(copy)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"genai_greedy: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
