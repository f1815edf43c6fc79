"""genai_tokens.py - tokens per second of ONNX Runtime GenAI's own generator (og.Model, og.Generator,
greedy) on two model folders at once, for bench/peers.sh: the two models in one process, their
tokens generated in alternating blocks, so both see the same machine from one moment to the next.

For each pair A B and each prompt length P (the same deterministic token ids for both): a generator
per model with max_length P + 1 + STEPS (GenAI sizes its KV cache buffer from it), the prompt
appended (prefill, untimed), then STEPS tokens each generated with generate_next_token(), in blocks
of BLOCK tokens: A's block then B's, then B's then A's, and so on. A block's first token is not
kept (the other model's thread pool may still be spinning then). Each model's figure is the median
time of its kept tokens; the ratio is the median over block pairs of A's block median over B's.
Runs (--reps, rounded up to even) alternate which model is loaded first, each in a fresh process;
the reported times are medians over runs and the ratios geometric means. As bench/decode.mjs does
on a shared machine, each run first waits (up to --quiet-wait seconds) for a 2-second window in
which the machine's CPU is busy under --max-other, and a run during which other processes took
more than --max-other of the CPU is repeated, up to --retries times, the least contended kept.
min_length equals max_length, so no end-of-sequence token stops a run early. Also reported: the
og.Model load seconds (the median over runs of one load each) and, per prompt length, how many of
the first run's generated tokens the two models agree on (greedy, so the same model agrees on all).

usage: python bench/genai_tokens.py [--prompt 128 --long 1024] [--steps 64] [--block 8]
                                    [--reps 2] [--threads 2] [--max-other 0.05] [--retries 4]
                                    [--quiet-wait 600] [--out FILE] A B [C D ...]
Prints one JSON object per pair (other_cpu: the most other processes took during a kept run).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time


def tokens(n: int, vocab: int, seed: int) -> list[int]:
    """Deterministic ids in [3, vocab): the same LCG as bench/decode.mjs."""
    out, s = [], (seed * 6364136223846793005 + 1442695040888963407) % 2**64
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(3 + (s >> 33) % (vocab - 3))
    return out


def cpu_jiffies() -> tuple[int, int, int]:
    """Busy and total CPU time of the machine, and this process's (with its children's)."""
    with open("/proc/stat") as f:
        all_ = [int(x) for x in f.readline().split()[1:]]
    total = sum(all_)
    busy = total - all_[3] - (all_[4] if len(all_) > 4 else 0)
    t = os.times()
    mine = round((t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK"))
    return busy, total, mine


def other_share(a, b) -> float:
    """The share of the machine's CPU other processes took between two cpu_jiffies()."""
    return max(0, (b[0] - a[0]) - (b[2] - a[2])) / max(1, b[1] - a[1])


def wait_quiet(max_other: float, quiet_wait: float) -> None:
    until = time.monotonic() + quiet_wait
    said = False
    while True:
        a = cpu_jiffies()
        time.sleep(2)
        b = cpu_jiffies()
        share = (b[0] - a[0]) / max(1, b[1] - a[1])
        if share <= max_other or time.monotonic() > until:
            return
        if not said:
            print(f"genai_tokens.py: the machine is busy ({100 * share:.0f}% CPU), waiting", file=sys.stderr)
            said = True
        time.sleep(3)


def load(og, folder: str, threads: int):
    config = og.Config(folder)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    t = time.perf_counter()
    model = og.Model(config)
    return model, time.perf_counter() - t


def child(args) -> None:
    import numpy as np
    import onnxruntime_genai as og

    a_dir, b_dir = args.models
    (a, a_load), (b, b_load) = load(og, a_dir, args.threads), load(og, b_dir, args.threads)
    with open(os.path.join(a_dir, "genai_config.json")) as f:
        vocab = json.load(f)["model"]["vocab_size"]
    res = {"a": a_dir, "b": b_dir, "a_load_s": a_load, "b_load_s": b_load, "contexts": []}
    for p in [args.prompt] + ([args.long] if args.long > 0 else []):
        prompt = np.array([tokens(p, vocab, 1)], dtype=np.int32)
        gens = []
        for m in (a, b):
            params = og.GeneratorParams(m)
            n = p + 1 + args.steps
            params.set_search_options(max_length=n, min_length=n, do_sample=False)
            g = og.Generator(m, params)
            g.append_tokens(prompt)
            gens.append(g)
        times = ([], [])
        ratios = []
        done = 0
        k = 0
        while done < args.steps:
            block = min(args.block, args.steps - done)
            order = (0, 1) if k % 2 == 0 else (1, 0)
            med = {}
            for i in order:
                ts = []
                for _ in range(block):
                    t = time.perf_counter()
                    gens[i].generate_next_token()
                    ts.append((time.perf_counter() - t) * 1000)
                kept = ts[1:] if block > 1 else ts
                times[i].extend(kept)
                med[i] = statistics.median(kept)
            ratios.append(med[0] / med[1])
            done += block
            k += 1
        seqs = [list(g.get_sequence(0))[p:] for g in gens]
        res["contexts"].append({
            "past": p,
            "a_ms": statistics.median(times[0]),
            "b_ms": statistics.median(times[1]),
            "ratio": statistics.median(ratios),
            "agree": int(sum(int(x) == int(y) for x, y in zip(*seqs))),
            "tokens": len(seqs[0]),
        })
        del gens
    print(json.dumps(res), flush=True)


def parent(args) -> None:
    if len(args.models) % 2:
        sys.exit("genai_tokens.py: models come in pairs: A B [C D ...]")
    geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    all_ = []
    for i in range(0, len(args.models), 2):
        a, b = os.path.abspath(args.models[i]), os.path.abspath(args.models[i + 1])
        runs = []
        for rep in range(2 * math.ceil(args.reps / 2)):
            swapped = rep % 2 == 1
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--prompt", str(args.prompt),
                   "--long", str(args.long), "--steps", str(args.steps), "--block", str(args.block),
                   "--threads", str(args.threads)] + ([b, a] if swapped else [a, b])
            r = None
            for attempt in range(args.retries + 1):
                wait_quiet(args.max_other, args.quiet_wait)
                c0 = cpu_jiffies()
                p = subprocess.run(cmd, capture_output=True, text=True)
                c1 = cpu_jiffies()
                if p.returncode != 0:
                    sys.stderr.write(p.stderr)
                    sys.exit(f"genai_tokens.py: {a} vs {b}: the run failed")
                x = json.loads(p.stdout.strip().splitlines()[-1])
                x["other_cpu"] = other_share(c0, c1)
                if r is None or x["other_cpu"] < r["other_cpu"]:
                    r = x
                if x["other_cpu"] <= args.max_other:
                    break
                print(f"genai_tokens.py: {os.path.basename(a)} vs {os.path.basename(b)}: other processes took "
                      f"{100 * x['other_cpu']:.0f}% of the CPU" +
                      (", measuring again" if attempt < args.retries else ", keeping the least contended run"),
                      file=sys.stderr)
            if swapped:  # back to A and B
                r = {"a": a, "b": b, "a_load_s": r["b_load_s"], "b_load_s": r["a_load_s"], "other_cpu": r["other_cpu"],
                     "contexts": [dict(c, a_ms=c["b_ms"], b_ms=c["a_ms"], ratio=1 / c["ratio"])
                                  for c in r["contexts"]]}
            runs.append(r)
        med = lambda get: statistics.median(get(r) for r in runs)
        out = {
            "a": a, "b": b, "reps": len(runs), "other_cpu": max(r["other_cpu"] for r in runs),
            "a_load_s": med(lambda r: r["a_load_s"]), "b_load_s": med(lambda r: r["b_load_s"]),
            "contexts": [{
                "past": c["past"],
                "a_ms": med(lambda r: r["contexts"][k]["a_ms"]),
                "b_ms": med(lambda r: r["contexts"][k]["b_ms"]),
                "ratio": geo([r["contexts"][k]["ratio"] for r in runs]),
                "ratio_each": [r["contexts"][k]["ratio"] for r in runs],
                "agree": runs[0]["contexts"][k]["agree"], "tokens": runs[0]["contexts"][k]["tokens"],
            } for k, c in enumerate(runs[0]["contexts"])],
        }
        print(json.dumps(out), flush=True)
        all_.append(out)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(all_, f, indent=1)
            f.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--long", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-other", type=float, default=0.05)
    ap.add_argument("--retries", type=int, default=4)
    ap.add_argument("--quiet-wait", type=float, default=600)
    ap.add_argument("--out", default="")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    (child if args.child else parent)(args)


if __name__ == "__main__":
    main()
