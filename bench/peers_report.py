"""peers_report.py - bench/peers.sh's markdown tables, from the files it leaves in its work folder:
  versions.json                      the tools' versions and the mobius commit
  CKPT/convert/NAME.json             bench/peak_rss.py's measurement of the conversion into CKPT/NAME
  CKPT/convert/NAME.bytes            the output folder's size (bytes of its files)
  CKPT/convert/NAME.error            why a conversion failed (its cells then read n/a)
  CKPT/convert/NAME.note             what was done instead of the plain command
  CKPT/decode/A--B.json              bench/decode.mjs --paired --out (a list of one pair)
  CKPT/decode/A--B.error             why a paired decode failed
  CKPT/genai/A--B.json               bench/genai_tokens.py --out (a list of one pair)
  CKPT/genai/A--B.error              why a generator run failed

usage: python3 bench/peers_report.py WORK_DIR CKPT...   (standard library only)
"""

import json
import os
import sys

# What each output folder is: the tool and the runtime it is laid out for.
LABELS = {
    "mobius-genai-f32": "mobius f32 (ort-genai)",
    "mobius-genai-int4": "mobius int4 (ort-genai)",
    "mobius-ort-f32": "mobius f32 (--runtime onnxruntime)",
    "builder-f32": "GenAI builder fp32",
    "builder-int4": "GenAI builder int4",
    "mobius-onnx-f32": "mobius-onnx f32 (--ep cpu --runtime ort-genai)",
    "optimum-f32": "Optimum (text-generation-with-past)",
}
# The comparisons: mobius's output against the peer's output for the same runtime.
PAIRS = [
    ("mobius-genai-f32", "builder-f32"),
    ("mobius-genai-int4", "builder-int4"),
    ("mobius-genai-f32", "mobius-onnx-f32"),
    ("mobius-ort-f32", "optimum-f32"),
]
CKPT_TITLES = {
    "llama": "llama 207 M (hidden 1024, 12 layers, 16/8 heads, vocab 32000, untied, f32: 790 MiB)",
    "qwen3": "Qwen3-0.6B-shaped (hidden 1024, 28 layers, 16/8 heads, head_dim 128, vocab 151936, "
             "q/k norms, tied embeddings, f32: 2273 MiB)",
}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def fmt(v, d):
    return "n/a" if v is None else f"{v:.{d}f}"


def cell(a, b, d, ratio=None):
    """'a vs b (a/b)', or with `ratio` given (a paired figure), that ratio."""
    if a is None and b is None:
        return "n/a"
    r = ratio if ratio is not None else (a / b if a is not None and b else None)
    return f"{fmt(a, d)} vs {fmt(b, d)} (**{fmt(r, 2)}**)" if r is not None else f"{fmt(a, d)} vs {fmt(b, d)}"


def pair_name(a, b):
    return f"{a}--{b}"


def contention(out, others):
    """Ends a table; with measurements, the most CPU other processes took during a kept run."""
    out.append("")
    if others:
        out.append(f"Other processes took up to {100 * max(others):.0f}% of the machine's CPU during a kept run.")
        out.append("")


def paired(base, kind, a, b, columns, ck, out, notes):
    """The paired measurement of a against b in base/kind ("decode" or "genai"), or None after
    a row of n/a in out; an error file's text goes to notes."""
    path = os.path.join(base, kind, pair_name(a, b))
    err = read_text(path + ".error")
    res = read_json(path + ".json")
    if err:
        what = "decode" if kind == "decode" else "generator"
        notes.append(f"{ck}: {what} {LABELS[a]} vs {LABELS[b]}: {err}")
    if not res:
        out.append(f"| {LABELS[a]} vs {LABELS[b]} |" + " n/a |" * columns)
        return None
    return res[0]


def main() -> None:
    work, ckpts = sys.argv[1], sys.argv[2:]
    versions = read_json(os.path.join(work, "versions.json")) or {}
    out = []
    notes = []
    for ck in ckpts:
        base = os.path.join(work, ck)
        conv = {}
        for name in LABELS:
            r = read_json(os.path.join(base, "convert", f"{name}.json"))
            err = read_text(os.path.join(base, "convert", f"{name}.error"))
            size = read_text(os.path.join(base, "convert", f"{name}.bytes"))
            note = read_text(os.path.join(base, "convert", f"{name}.note"))
            if err:
                notes.append(f"{ck}: {LABELS[name]}: conversion failed: {err}")
            if note:
                notes.append(f"{ck}: {LABELS[name]}: {note}")
            if r and not err:
                r["mib"] = float(size) / 1048576 if size else None
                conv[name] = r
        out.append(f"### {CKPT_TITLES.get(ck, ck)}")
        out.append("")
        out.append("Conversion (one run each, the checkpoint in the page cache; peak RSS of the whole "
                   "process tree). Each cell: mobius vs peer (mobius / peer):")
        out.append("")
        out.append("| mobius vs peer | wall s | peak RSS MiB | output MiB |")
        out.append("|---|---|---|---|")
        for a, b in PAIRS:
            ca, cb = conv.get(a), conv.get(b)
            get = lambda c, k: c[k] if c else None
            out.append(f"| {LABELS[a]} vs {LABELS[b]} | {cell(get(ca, 'wall_s'), get(cb, 'wall_s'), 1)} "
                       f"| {cell(get(ca, 'peak_rss_mib'), get(cb, 'peak_rss_mib'), 0)} "
                       f"| {cell(get(ca, 'mib'), get(cb, 'mib'), 0)} |")
        out.append("")

        out.append("ONNX Runtime (onnxruntime-node, CPU, 2 intra-op threads), each pair in one process: "
                   "session creations alternating, decode steps interleaved (one new token after a KV "
                   "cache of the given length); times are medians, the ratio in bold is the paired "
                   "figure (geometric mean over the runs of the median ratio of neighbouring steps):")
        out.append("")
        out.append("| mobius vs peer | session creation s | decode ms/token @128 | decode ms/token @1024 |")
        out.append("|---|---|---|---|")
        others = []
        for a, b in PAIRS:
            p = paired(base, "decode", a, b, 3, ck, out, notes)
            if p is None:
                continue
            others.append(p.get("other_cpu", 0))
            ctx = {c["past"]: c for c in p["contexts"]}
            c128, c1024 = ctx.get(128), ctx.get(1024)
            dec = lambda c: cell(c["a_ms"], c["b_ms"], 2, c["ratio"]) if c else "n/a"
            out.append(f"| {LABELS[a]} vs {LABELS[b]} | {cell(p['create_a_s'], p['create_b_s'], 2, p['create_ratio'])} "
                       f"| {dec(c128)} | {dec(c1024)} |")
        contention(out, others)

        out.append("ONNX Runtime GenAI's generator (og.Generator, greedy, python), each pair in one process, "
                   "tokens generated in alternating blocks of 8; tokens/s from the median token time, the "
                   "ratio in bold mobius / peer (above 1: mobius faster), paired as above:")
        out.append("")
        out.append("| mobius vs peer | og.Model load s | tokens/s after 128 | tokens/s after 1024 | same greedy tokens (128; 1024) |")
        out.append("|---|---|---|---|---|")
        others = []
        for a, b in PAIRS:
            if b not in ("builder-f32", "builder-int4", "mobius-onnx-f32"):
                continue
            p = paired(base, "genai", a, b, 4, ck, out, notes)
            if p is None:
                continue
            others.append(p.get("other_cpu", 0))
            ctx = {c["past"]: c for c in p["contexts"]}
            tps = lambda c: cell(1000 / c["a_ms"], 1000 / c["b_ms"], 1, 1 / c["ratio"]) if c else "n/a"
            agree = "; ".join(f"{c['agree']}/{c['tokens']}" for c in p["contexts"])
            out.append(f"| {LABELS[a]} vs {LABELS[b]} | {cell(p['a_load_s'], p['b_load_s'], 2)} "
                       f"| {tps(ctx.get(128))} | {tps(ctx.get(1024))} | {agree} |")
        contention(out, others)
    if notes:
        out.append("Failures and notes:")
        out.append("")
        out += [f"- {n}" for n in notes]
        out.append("")
    if versions:
        out.append("Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    print("\n".join(out))


if __name__ == "__main__":
    main()
