"""A notebook-sized tour of mobius from Python.

    python examples/python_quickstart.py [MODEL] [OUT]

MODEL is a hub id or a checkpoint folder (default: HuggingFaceTB/SmolLM2-135M), OUT the folder
to write (default: out/quickstart). Each step is a cell of a notebook.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import mobius
from mobius import ModelRegistry, build, registry

model = sys.argv[1] if len(sys.argv) > 1 else "HuggingFaceTB/SmolLM2-135M"
out = Path(sys.argv[2] if len(sys.argv) > 2 else "out/quickstart")

# 1. What can be built: the default registry holds every plugin's model types.
print(f"mobius {mobius.__version__}: {len(registry)} model types")
print("llama" in registry, registry.get("llama"))

# 2. Build (nothing is written yet), look at the graph, then save. int4 is the smallest and
#    fastest on the CPU; the folder is laid out for ONNX Runtime GenAI by default.
pkg = build(model, dtype="int4", progress=True)
graph = pkg.graphs[0]
print(pkg)
print("inputs: ", [(t.name, t.dtype, t.shape) for t in graph.inputs][:3], "...")
print("outputs:", [(t.name, t.dtype, t.shape) for t in graph.outputs][:1], "...")
print("provenance:", json.dumps({k: pkg.provenance[k] for k in ("model_type", "weight_dtype", "runtime")}))
pkg.save(out)

# 3. What the saved folder holds, as `mobius info --json` says it.
facts = mobius.info(out)
print(facts["runtime"], [g["file"] for g in facts["graphs"]], facts["problems"])

# 4. The same checkpoint for transformers.js, with a callable for progress.
def report(stage, done, total):
    print(f"\r{stage}: {done / max(total, 1):6.1%}", end="", file=sys.stderr)

build(model, runtime="transformers.js", dtype="f16", progress=report).save(out.with_name(out.name + "-tjs"))
print(file=sys.stderr)

# 5. A model type of your own that is an existing architecture under another name: registered
#    in an isolated registry, which nothing else sees.
mine = ModelRegistry()
mine.register("my_new_arch", "llama")
print("my_new_arch" in mine, "my_new_arch" in registry)
if registry.get(pkg.model_type).model_type == "llama" and Path(pkg.source["path"]).is_dir():
    with tempfile.TemporaryDirectory() as tmp:
        renamed = Path(tmp) / "my_new_arch"
        shutil.copytree(pkg.source["path"], renamed)
        config = json.loads((renamed / "config.json").read_text())
        config["model_type"] = "my_new_arch"
        (renamed / "config.json").write_text(json.dumps(config))
        print(build(renamed, registry=mine, load_weights=False))

# 6. Errors are exceptions that say what is wrong.
try:
    build(out)  # a built folder is not a checkpoint
except mobius.Error as e:
    print(type(e).__name__, e)
