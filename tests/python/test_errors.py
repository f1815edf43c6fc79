"""Errors as exceptions that say what the CLI says, and outputs left as they were: a bad input,
a failing plugin, the hub, and KeyboardInterrupt while saving."""

import json
import os
import pathlib
import signal
import time

import pytest

from conftest import ROOT, cli, copy_case, tree

import mobius


def cli_error(*args):
    r = cli(*args, check=False)
    assert r.returncode == 1, r
    line = r.stderr.strip().splitlines()[-1]
    for prefix in ("mobius: error: ", "mobius: plugin error: "):
        if line.startswith(prefix):
            return line[len(prefix):]
    raise AssertionError(r.stderr)


def earlier_model(tmp_path):
    """An OUT holding an earlier build, to check that a failure leaves it as it was."""
    out = tmp_path / "out"
    cli("build", "--model", ROOT / "tests/golden-encoders/bert-seqcls", out, "--quiet")
    return out, tree(out)


def no_temp_folders(parent):
    return not [p for p in pathlib.Path(parent).iterdir() if ".mobius-tmp-" in p.name]


def test_config_error(tmp_path):
    src = copy_case("llama3-rope-tied", tmp_path / "ckpt")
    cfg = json.loads((src / "config.json").read_text())
    cfg["num_attention_heads"] = 0
    (src / "config.json").write_text(json.dumps(cfg))
    out, before = earlier_model(tmp_path)
    with pytest.raises(mobius.ConfigError) as e:
        mobius.build(src).save(out)
    assert "config.json" in str(e.value) and "num_attention_heads" in str(e.value)
    assert str(e.value) == cli_error("build", "--model", src, tmp_path / "cli")
    assert tree(out) == before and not (tmp_path / "cli").exists() and no_temp_folders(tmp_path)
    # Nothing at all written for a new folder.
    with pytest.raises(mobius.ConfigError):
        mobius.build(src)
    assert not (tmp_path / "never").exists()


def test_checkpoint_error_truncated_weights(tmp_path):
    src = copy_case("bert-seqcls", tmp_path / "ckpt")
    weights = src / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    out, before = earlier_model(tmp_path)
    with pytest.raises(mobius.CheckpointError) as e:
        mobius.build(src).save(out)
    assert "model.safetensors" in str(e.value)
    assert str(e.value) == cli_error("build", "--model", src, tmp_path / "cli")
    assert tree(out) == before and no_temp_folders(tmp_path)


def test_plugin_error(tmp_path):
    # A plugin that declares the model type but cannot load (it crashes while registering).
    plugins = os.environ.get("MOBIUS_TEST_CRASH_DIR", str(ROOT / "build" / "tests" / "plugins_crash"))
    src = copy_case("llama3-rope-tied", tmp_path / "ckpt")
    cfg = json.loads((src / "config.json").read_text())
    cfg["model_type"] = "crash_arch"
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.warns(mobius.MobiusWarning, match="crash"):
        with pytest.raises(mobius.PluginError) as e:
            mobius.build(src, plugin_paths=[plugins])
    assert "declares this model type but did not load" in str(e.value)
    assert str(e.value) == cli_error("build", "--model", src, tmp_path / "cli", "--plugin-path", plugins)


def test_plain_errors(tmp_path):
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(mobius.Error) as e:
        mobius.build(missing)
    assert type(e.value) is mobius.Error
    assert str(e.value) == cli_error("build", "--model", missing, tmp_path / "cli")
    # OUT that is the checkpoint folder is refused before anything is written.
    src = copy_case("bert-seqcls", tmp_path / "ckpt")
    before = tree(src)
    with pytest.raises(mobius.Error, match="checkpoint"):
        mobius.build(src, quiet=True).save(src)
    assert tree(src) == before


def interrupt_during_save(pkg, out, how):
    """Saves pkg into out, interrupted while the weights stream: by a real SIGINT (the Python
    handler runs in the main thread while the save waits) or by the progress callable raising."""
    calls = []

    def progress(stage, done, total):
        calls.append(done)
        if len(calls) == 1:
            if how == "signal":
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)  # the main thread notices within 50 ms
            else:
                raise KeyboardInterrupt

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pkg.save(out, threads=1, progress=progress)
    assert calls and calls[0] < calls[0] + 1
    return time.monotonic() - t0


@pytest.mark.parametrize("how", ["signal", "callback"])
def test_keyboard_interrupt_mid_save(large_llama, tmp_path, how):
    out, before = earlier_model(tmp_path)
    pkg = mobius.build(large_llama, quiet=True)
    interrupt_during_save(pkg, out, how)
    assert tree(out) == before
    assert no_temp_folders(tmp_path)
    # A new folder is not created at all.
    interrupt_during_save(pkg, tmp_path / "new", how)
    assert not (tmp_path / "new").exists() and no_temp_folders(tmp_path)
    # And the package still saves.
    pkg.save(tmp_path / "after")
    assert (tmp_path / "after" / "model.onnx").is_file()


def test_progress_exception_propagates(large_llama, tmp_path):
    pkg = mobius.build(large_llama, quiet=True)

    def progress(stage, done, total):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        pkg.save(tmp_path / "out", threads=1, progress=progress)
    assert not (tmp_path / "out").exists() and no_temp_folders(tmp_path)
