#!/usr/bin/env python3
"""vision_latency.py - two image-classification graphs (pixel_values [batch, 3, H, W] -> logits) in
ONNX Runtime (CPU), timed paired and interleaved in one process on the same images, for
bench/vision.sh.

    python vision_latency.py --a A.onnx --b B.onnx [--names A,B] [--batches 1,8] [--size 224]
                             [--reps 30] [--threads 2] [--create-rounds 4] [--atol 1e-4]
                             [--rtol 1e-3] [--label L] [--out FILE]

Sessions (bench/ort_paired.py, as bench/encoder_latency.py makes them): CPU provider,
ORT_ENABLE_ALL graph optimizations, --threads intra-op threads, the intra-op pool not spinning (the
two sessions share the cores; with spinning the pool of the model that ran last holds them while
the other runs).
  creation   each graph's session created once untimed (the process's first session pays ONNX
             Runtime's start-up, the first read of a file the page cache), then --create-rounds
             times each, in alternating order (A then B, then B then A); the median seconds
  agreement  per batch, both graphs on the same pixel_values (uniform in [-1, 1), as the image
             processor's normalisation leaves them; seeded): every logit within
             atol + rtol * |B's| of B's (the tolerance of tests/golden-vision), and the same argmax
             per image; a graph that disagrees is not timed (exit 1)
  latency    per batch, after the agreement run and one more untimed run each, --reps repetitions
             of A and B, A first in even repetitions and B first in odd ones; the median ms of each,
             and the ratio A / B as the median of the ratios of the two runs of a repetition (which
             the load of other processes moves less than the ratio of the medians)
Prints a markdown table (batch, A ms, B ms, A / B, max |diff|) with the session creation row, and
with --out the figures as JSON.
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

from ort_paired import median_ms, paired, session

ap = argparse.ArgumentParser()
ap.add_argument("--a", required=True)
ap.add_argument("--b", required=True)
ap.add_argument("--names", default="A,B")
ap.add_argument("--batches", default="1,8")
ap.add_argument("--size", type=int, default=224)
ap.add_argument("--reps", type=int, default=30)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--create-rounds", type=int, default=4)
ap.add_argument("--atol", type=float, default=1e-4)
ap.add_argument("--rtol", type=float, default=1e-3)
ap.add_argument("--label", default="")
ap.add_argument("--out")
a = ap.parse_args()
names = a.names.split(",")
paths = [a.a, a.b]


def io_names(s, path):
    """The graph's image input and its logits output."""
    ins = [i for i in s.get_inputs() if len(i.shape) == 4 and i.type == "tensor(float)"]
    if len(s.get_inputs()) != 1 or len(ins) != 1:
        sys.exit(f"vision_latency.py: {path}: inputs {[(i.name, i.type, i.shape) for i in s.get_inputs()]}, "
                 "not one float [batch, channels, height, width] image")
    outs = [o.name for o in s.get_outputs()]
    if "logits" not in outs:
        sys.exit(f"vision_latency.py: {path}: no logits output ({outs})")
    return ins[0].name, "logits"


def make(k):
    return session(paths[k], a.threads, spinning=False)


# Session creation: once each untimed, then timed in alternating order.
sessions = [make(0), make(1)]
create = [[], []]
for r in range(a.create_rounds):
    for k in ((0, 1) if r % 2 == 0 else (1, 0)):
        sessions[k] = None  # the previous one freed before the next is made
        t0 = time.perf_counter()
        sessions[k] = make(k)
        create[k].append(time.perf_counter() - t0)
io = [io_names(s, p) for s, p in zip(sessions, paths)]

res = {"names": names, "graphs": paths, "threads": a.threads, "reps": a.reps, "onnxruntime": ort.__version__,
       "create_s": [statistics.median(c) for c in create] if a.create_rounds else None, "batches": []}
rng = np.random.default_rng(0)
for batch in (int(x) for x in a.batches.split(",")):
    pixels = rng.uniform(-1, 1, size=(batch, 3, a.size, a.size)).astype(np.float32)
    runs = [lambda s=s, x=x: s.run([x[1]], {x[0]: pixels})[0] for s, x in zip(sessions, io)]
    outs = [r() for r in runs]  # warm-up, and agreement
    for k in (0, 1):
        if outs[k].ndim != 2 or outs[k].shape[0] != batch:
            sys.exit(f"vision_latency.py: {paths[k]}: logits of shape {outs[k].shape} for batch {batch}")
    if outs[0].shape != outs[1].shape:
        sys.exit(f"vision_latency.py: logits of shape {outs[0].shape} ({names[0]}) and {outs[1].shape} ({names[1]})")
    diff = np.abs(outs[0] - outs[1])
    bad = diff > a.atol + a.rtol * np.abs(outs[1])
    same_top = bool(np.all(outs[0].argmax(-1) == outs[1].argmax(-1)))
    if bad.any() or not same_top:
        sys.exit(f"vision_latency.py: batch {batch}: {names[0]}'s logits differ from {names[1]}'s: {int(bad.sum())} "
                 f"beyond atol {a.atol} + rtol {a.rtol}, max |diff| {diff.max():.2e}, argmax "
                 f"{'the same' if same_top else 'different'}; not timed")
    for r in runs:
        r()
    times = paired(runs, a.reps)
    res["batches"].append({
        "batch": batch, "ms": [median_ms(t) for t in times],
        "ratio": statistics.median(x / y for x, y in zip(*times)),
        "max_abs_diff": float(diff.max()), "max_abs_logit": float(np.abs(outs[1]).max()),
    })

if a.out:
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
print(f"| {a.label} | {names[0]} ms | {names[1]} ms | {names[0]} / {names[1]} | max abs diff |")
print("|---|---|---|---|---|")
for b in res["batches"]:
    print(f"| batch {b['batch']} x {a.size} x {a.size} | {b['ms'][0]:.1f} | {b['ms'][1]:.1f} | {b['ratio']:.3f} "
          f"| {b['max_abs_diff']:.1e} |")
if a.create_rounds:
    ca, cb = res["create_s"]
    print(f"| session creation, s | {ca:.2f} | {cb:.2f} | {ca / cb:.3f} | |")
