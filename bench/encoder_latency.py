#!/usr/bin/env python3
"""encoder_latency.py - two encoder graphs in ONNX Runtime (CPU), timed paired and interleaved on
the same inputs: each repetition runs A then B (the order alternating), and the medians and their
ratio are printed as a markdown row.

    python encoder_latency.py --a A.onnx --b B.onnx --batch N --seq S [--reps R] [--threads T] [--label L]

Inputs: input_ids drawn from [1000, 30000), attention_mask all ones, token_type_ids zeros (fed to
a graph that has them). Sessions use ORT_ENABLE_ALL graph optimizations, intra-op threads T
(bench/ort_paired.py, shared with bench/vision_latency.py).
"""
import argparse

import numpy as np

from ort_paired import median_ms, paired, session

ap = argparse.ArgumentParser()
ap.add_argument("--a", required=True)
ap.add_argument("--b", required=True)
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--seq", type=int, required=True)
ap.add_argument("--reps", type=int, default=30)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--label", default="")
a = ap.parse_args()

rng = np.random.default_rng(0)
ids = rng.integers(1000, 30000, size=(a.batch, a.seq), dtype=np.int64)
feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
sessions = [session(a.a, a.threads), session(a.b, a.threads)]
inputs = [{i.name: feeds[i.name] for i in s.get_inputs()} for s in sessions]
outs = [s.run(["last_hidden_state"], f)[0] for s, f in zip(sessions, inputs)]  # warm-up, and agreement
diff = float(np.max(np.abs(outs[0] - outs[1])))
times = paired([lambda s=s, f=f: s.run(["last_hidden_state"], f) for s, f in zip(sessions, inputs)], a.reps)
ma, mb = (median_ms(t) for t in times)
print(f"| {a.label} | {a.batch} x {a.seq} | {ma:.1f} | {mb:.1f} | {ma / mb:.3f} | {diff:.1e} |")
