#!/usr/bin/env python3
"""A golden vision case's reference at another image size, computed by real transformers.

The oracle (shared/tools/oracle/gen.py) draws its images at the config's image_size, one number
for both sides. This recomputes a case it made for images of HEIGHT x WIDTH: the case's model
class (AutoModel or AutoModelForImageClassification, from its task) loaded from the saved
checkpoint (eager attention, float32), two images drawn as gen.py draws them (a generator seeded
with the case's seed + 1, standard normal), the model called on them (with
interpolate_pos_encoding=True when --interpolate), and reference.safetensors and case.json
rewritten (case.json's `image_size_run`, `interpolate_pos_encoding` and `reference` say so).

    python other_size.py CASE HEIGHT WIDTH [--interpolate]
    python other_size.py CASE HEIGHT WIDTH --task TASK --seed N [--exercises "a;b"] [--overrides JSON]

The second form completes a case gen.py stopped making after saving its checkpoint (its square
images do not fit a [height, width] image_size): case.json is written from the arguments.
Run in the oracle's venv (torch, transformers, safetensors).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

AUTO = {"image-feature-extraction": "AutoModel", "image-classification": "AutoModelForImageClassification"}
OUTPUTS = ("last_hidden_state", "pooler_output", "logits")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("height", type=int)
    ap.add_argument("width", type=int)
    ap.add_argument("--interpolate", action="store_true")
    ap.add_argument("--task", choices=sorted(AUTO))
    ap.add_argument("--seed", type=int)
    ap.add_argument("--exercises", default="")
    ap.add_argument("--overrides", default="{}")
    a = ap.parse_args()
    torch.set_num_threads(1)  # bit-reproducible references
    case_file = os.path.join(a.case, "case.json")
    if os.path.exists(case_file):
        with open(case_file) as f:
            case = json.load(f)
    else:
        if a.task is None or a.seed is None:
            ap.error(f"{case_file} does not exist: give --task and --seed")
        case = {"task": a.task, "seed": a.seed, "exercises": [e for e in a.exercises.split(";") if e],
                "overrides": json.loads(a.overrides)}
    task, seed = case["task"], case["seed"]
    torch.manual_seed(seed)
    model = getattr(transformers, AUTO[task]).from_pretrained(a.case, attn_implementation="eager",
                                                              dtype=torch.float32).eval()
    cfg = model.config
    g = torch.Generator().manual_seed(seed + 1)
    px = torch.randn(2, getattr(cfg, "num_channels", 3), a.height, a.width, generator=g)
    kw = {"interpolate_pos_encoding": True} if a.interpolate else {}
    with torch.no_grad():
        out = model(pixel_values=px, **kw)
    ref = {"encode.pixel_values": px}
    outputs = []
    for k in OUTPUTS:
        v = getattr(out, k, None)
        if isinstance(v, torch.Tensor):
            ref[f"encode.{k}"] = v.float().contiguous()
            outputs.append(k)
    for k, v in ref.items():
        if not torch.isfinite(v).all():
            raise SystemExit(f"{k} has non-finite values")
    save_file(ref, os.path.join(a.case, "reference.safetensors"))
    name = type(model).__name__
    how = " with interpolate_pos_encoding=True" if a.interpolate else ""
    ordered = {
        "model_type": cfg.model_type,
        "task": task,
        "architecture": name,
        "exercises": case.get("exercises", []),
        "reference": f"transformers {transformers.__version__} (torch {torch.__version__}), {name} from the saved "
                     f"checkpoint, eager attention, float32, images of {a.height}x{a.width}{how} "
                     f"(tests/golden-vision/other_size.py)",
        "weights": case.get("weights", "safetensors"),
        "dtype": case.get("dtype", "float32"),
        "atol": case.get("atol", 1e-4),
        "rtol": case.get("rtol", 1e-3),
        "seed": seed,
        "overrides": case.get("overrides", {}),
        "image_size_run": [a.height, a.width],
        "interpolate_pos_encoding": a.interpolate,
        "steps": ["encode"],
        "outputs": outputs,
    }
    with open(case_file, "w") as f:
        json.dump(ordered, f, indent=2)
        f.write("\n")
    for root, _, files in os.walk(a.case):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    print(f"{a.case}: {name} at {a.height}x{a.width}{how}: " +
          ", ".join(f"{k} {list(ref['encode.' + k].shape)}" for k in outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
