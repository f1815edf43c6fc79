"""moe_decode.py - decode latency of two builds of one mixture-of-experts checkpoint, timed paired
and interleaved in ONNX Runtime (bench/ort_paired.py's sessions): a prompt is prefilled once in
each, then every decode step runs both graphs on the same token and cache length.

    python bench/moe_decode.py A_DIR B_DIR [--prompt N] [--steps N] [--threads N]

Each DIR holds model.onnx of a `--runtime onnxruntime` build (position_ids input, the caches
past_key_values.<i>.key/value). Prints one JSON object: the median ms per decoded token of each,
B over A, and the largest difference of their last logits (the two must compute the same model).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_paired import median_ms, paired, session  # noqa: E402


def feeds(sess, ids, past, total):
    f = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64)}
    names = {i.name for i in sess.get_inputs()}
    if "position_ids" in names:
        f["position_ids"] = np.arange(total - ids.shape[1], total, dtype=np.int64)[None, :]
    f.update(past)
    return f


def empty_past(sess):
    past = {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            dims = [1 if d == "batch_size" else 0 if isinstance(d, str) else d for d in i.shape]
            dtype = np.float16 if "float16" in i.type else np.float32
            past[i.name] = np.zeros(dims, dtype)
    return past


def step(sess, ids, past, total):
    outs = sess.run(None, feeds(sess, ids, past, total))
    names = [o.name for o in sess.get_outputs()]
    new = {n.replace("present.", "past_key_values."): v for n, v in zip(names, outs) if n.startswith("present.")}
    return outs[names.index("logits")], new


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    sessions = [session(os.path.join(d, "model.onnx"), args.threads, spinning=False) for d in (args.a, args.b)]
    rng = np.random.default_rng(0)
    vocab = None
    state = []
    prompt = rng.integers(0, 1000, size=(1, args.prompt), dtype=np.int64)
    for s in sessions:
        logits, past = step(s, prompt, empty_past(s), args.prompt)
        vocab = logits.shape[-1]
        state.append([logits, past])
    token = np.array([[int(np.argmax(state[0][0][0, -1]))]], np.int64)
    times = [[], []]
    diff = 0.0
    for t in range(args.steps):
        total = args.prompt + t + 1

        def run(k):
            return lambda: state[k].__setitem__(slice(0, 2), step(sessions[k], token, state[k][1], total))

        a, b = paired([run(0), run(1)], 1)
        times[0] += a
        times[1] += b
        diff = max(diff, float(np.abs(state[0][0] - state[1][0]).max()))
        token = np.array([[int(np.argmax(state[0][0][0, -1])) % vocab]], np.int64)
    ma, mb = median_ms(times[0]), median_ms(times[1])
    print(json.dumps({"a_ms_per_token": round(ma, 2), "b_ms_per_token": round(mb, 2),
                      "b_over_a": round(mb / ma, 3), "max_abs_logit_diff": diff}))


if __name__ == "__main__":
    main()
