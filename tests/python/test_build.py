"""mobius.build and ModelPackage.save give the CLI's folders, byte for byte."""

import json
import pathlib
import threading

import pytest

from conftest import assert_same_tree, cli, copy_case, golden, tree

import mobius

# (golden case, build() keywords, the CLI's options): decoders at every dtype and layout, an
# encoder, an encoder-decoder (graphs of one folder), a speech recognizer and a pipeline
# component of several graphs.
CASES = [
    ("llama3-rope-tied", {}, []),
    ("llama3-rope-tied", {"dtype": "int4"}, ["--dtype", "int4"]),
    ("llama3-rope-tied", {"dtype": "f16", "runtime": "transformers.js"}, ["--dtype", "f16", "--runtime", "transformers.js"]),
    ("llama3-rope-tied", {"dtype": "int4", "runtime": "transformers.js"}, ["--dtype", "int4", "--runtime", "transformers.js"]),
    ("qwen2-bias", {"dtype": "int8", "ops": "ort", "block_size": 64, "symmetric": False},
     ["--dtype", "int8", "--block-size", "64", "--asymmetric"]),
    ("gemma2-softcap-sliding", {"ops": "standard", "runtime": "onnxruntime"}, ["--ops", "standard", "--runtime", "onnxruntime"]),
    ("bert-seqcls", {}, []),
    ("bert-seqcls", {"task": "feature-extraction", "runtime": "onnxruntime"}, ["--task", "feature-extraction", "--runtime", "onnxruntime"]),
    ("t5-tiny", {"dtype": "f16"}, ["--dtype", "f16"]),
    ("whisper-tiny", {}, []),
    ("wav2vec2-ctc", {}, []),
    ("sd15-tiny", {"components": ["vae", "text_encoder"]}, ["--component", "vae", "--component", "text_encoder"]),
]


def case_ids(c):
    return c[0] + "".join(f"-{k}={v}" for k, v in c[1].items())


@pytest.mark.parametrize("case,kwargs,flags", CASES, ids=[case_ids(c) for c in CASES])
def test_same_bytes_as_cli(tmp_path, case, kwargs, flags):
    src = golden(case)
    cli("build", "--model", src, tmp_path / "cli", "--quiet", *flags)
    pkg = mobius.build(src, quiet=True, **kwargs)
    pkg.save(tmp_path / "py")
    assert_same_tree(tmp_path / "cli", tmp_path / "py")


def test_quick_reference(tmp_path):
    # The seed's quick reference, in its words.
    from mobius import ModelRegistry, build, registry

    src = copy_case("llama3-rope-tied", tmp_path / "ckpt")
    pkg = build(str(src))
    pkg.save(str(tmp_path / "out"))
    cli("build", "--model", src, tmp_path / "cli", "--quiet")
    assert_same_tree(tmp_path / "cli", tmp_path / "out")

    assert "llama" in registry
    r = registry.get("llama")
    assert r.model_type == "llama" and r.plugin == "llama" and r.task == "text-generation"
    assert r.source.endswith("libmobius_llama.so")
    archs = registry.architectures()
    assert archs == sorted(archs) and "llama" in archs and len(registry) == len(archs)
    listed = [e["model_type"] for e in json.loads(cli("list", "--json").stdout)]
    assert sorted(listed) == archs

    mine = ModelRegistry()
    mine.register("my_new_arch", "llama")
    assert "my_new_arch" in mine and "my_new_arch" not in registry


def test_package_readable_before_save(tmp_path):
    pkg = mobius.build(golden("llama3-rope-tied"), quiet=True, runtime="onnxruntime")
    assert pkg.model_type == "llama" and pkg.runtime == "onnxruntime"
    (g,) = pkg.graphs
    assert g.path == "model.onnx" and g.node_count > 0 and g.weight_bytes > 0
    names = [i.name for i in g.inputs]
    assert names[:2] == ["input_ids", "attention_mask"] and "past_key_values.0.key" in names
    logits = next(o for o in g.outputs if o.name == "logits")
    assert logits.dtype == "float32" and len(logits.shape) == 3 and logits.shape[0] == "batch_size"
    assert g.opset_imports["ai.onnx"] >= 17 and "com.microsoft" in g.opset_imports
    p = pkg.provenance
    assert p["producer"] == "mobius" and p["model_type"] == "llama" and p["graphs"] == ["model.onnx"]
    assert p["runtime"] == "onnxruntime" and "files" not in p
    assert pkg.source["repo"] is None and pathlib.Path(pkg.source["path"]) == golden("llama3-rope-tied")

    # What info() reads from the saved folder is what the package said before.
    pkg.save(tmp_path / "out")
    saved = mobius.info(tmp_path / "out")
    assert saved["graphs"][0]["inputs"] == g.description["inputs"]
    assert saved["graphs"][0]["outputs"] == g.description["outputs"]
    assert saved["graphs"][0]["node_count"] == g.node_count
    written = json.loads((tmp_path / "out" / "mobius_provenance.json").read_text())
    written.pop("files")
    assert written == p


def test_graphs_of_one_folder_and_of_several(tmp_path):
    t5 = mobius.build(golden("t5-tiny"), quiet=True)
    assert [g.path for g in t5.graphs] == ["onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx"]
    assert t5.provenance["graphs"] == ["onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx"]
    sd = mobius.build(golden("sd15-tiny"), quiet=True, components=["vae"])
    assert sorted(g.folder for g in sd.graphs) == ["vae_decoder", "vae_encoder"]
    assert set(sd.provenance) == {"vae_decoder", "vae_encoder"}
    assert "tokenizer" in sd.copied and "model_index.json" in sd.copied


def test_info_is_the_cli_json(tmp_path):
    cli("build", "--model", golden("bert-seqcls"), tmp_path / "out", "--quiet")
    assert mobius.info(tmp_path / "out") == json.loads(cli("info", "--json", tmp_path / "out").stdout)
    with pytest.raises(mobius.Error, match="not a mobius output folder"):
        mobius.info(tmp_path)


def test_no_weights(tmp_path):
    pkg = mobius.build(golden("llama3-rope-tied"), load_weights=False, quiet=True)
    pkg.save(tmp_path / "py")
    cli("build", "--model", golden("llama3-rope-tied"), tmp_path / "cli", "--no-weights", "--quiet")
    assert_same_tree(tmp_path / "cli", tmp_path / "py")


def test_progress_callable(large_llama, tmp_path):
    seen = []
    pkg = mobius.build(large_llama, quiet=True, progress=lambda stage, done, total: seen.append((stage, done, total)))
    pkg.save(tmp_path / "out", threads=1)
    assert seen and all(s == "weights" for s, _, _ in seen)
    dones = [d for _, d, _ in seen]
    assert dones == sorted(dones) and seen[-1][1] == seen[-1][2] > 100_000_000


def test_two_threads_build_at_once(tmp_path):
    cases = ["llama3-rope-tied", "bert-seqcls", "t5-tiny", "llama3-rope-tied"]
    for i, c in enumerate(cases):
        mobius.build(golden(c), quiet=True).save(tmp_path / f"seq{i}")
    errors = []

    def work(i):
        try:
            mobius.build(golden(cases[i]), quiet=True).save(tmp_path / f"par{i}", threads=2)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    for pair in ((0, 1), (2, 3)):
        ts = [threading.Thread(target=work, args=(i,)) for i in pair]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors
    for i in range(len(cases)):
        assert_same_tree(tmp_path / f"seq{i}", tmp_path / f"par{i}")


def test_the_gil_is_released(large_llama, tmp_path):
    # While one thread saves, another runs Python.
    pkg = mobius.build(large_llama, quiet=True)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.005)

    t = threading.Thread(target=count)
    t.start()
    try:
        pkg.save(tmp_path / "out", threads=1)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 5


def test_options_checked():
    for bad in ({"dtype": "f64"}, {"runtime": "tensorrt"}, {"ops": "all"}, {"ep": "tpu"}, {"block_size": 48}):
        with pytest.raises(ValueError, match=list(bad)[0]):
            mobius.build(golden("llama3-rope-tied"), **bad)
    with pytest.raises(TypeError):
        mobius.build(golden("llama3-rope-tied"), progress=3)


def test_help_and_stubs():
    assert "Builds a checkpoint" in mobius.build.__doc__
    assert "transactionally" in mobius.ModelPackage.save.__doc__
    pkg_dir = pathlib.Path(mobius.__file__).parent
    assert (pkg_dir / "__init__.pyi").is_file() and (pkg_dir / "py.typed").is_file()
    assert "def build(" in (pkg_dir / "__init__.pyi").read_text()
    assert issubclass(mobius.ConfigError, mobius.Error) and issubclass(mobius.HubError, mobius.Error)


def test_quickstart_example(tmp_path):
    # examples/python_quickstart.py, on a golden case instead of a hub model.
    import subprocess
    import sys

    from conftest import ROOT

    r = subprocess.run([sys.executable, str(ROOT / "examples" / "python_quickstart.py"),
                        str(golden("llama3-rope-tied")), str(tmp_path / "out")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "genai_config.json").is_file()
    assert (tmp_path / "out-tjs" / "onnx" / "model_fp16.onnx").is_file()
    assert "True False" in r.stdout and "Error" in r.stdout


def test_bundled_cli(tmp_path):
    # `python -m mobius` runs the CLI inside the package, with the package's plugins.
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "mobius", "list", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(e["model_type"] for e in json.loads(r.stdout)) == mobius.registry.architectures()
    subprocess.run([sys.executable, "-m", "mobius", "build", "--model", str(golden("bert-seqcls")),
                    str(tmp_path / "bundled"), "--quiet"], check=True)
    mobius.build(golden("bert-seqcls"), quiet=True).save(tmp_path / "py")
    assert_same_tree(tmp_path / "bundled", tmp_path / "py")
