"""Fixtures of the Python package's tests (tests/python): the CLI to compare with, the golden
checkpoints of this repository, folder comparison, a larger synthetic checkpoint, and the
loopback hub of tests/hub_server.mjs.

Run by tests/python/run.sh with the package installed from a wheel built from this tree
(scripts/setup.sh): MOBIUS_CLI is the CLI of the build tree, MOBIUS_SOURCE_ROOT the tree.
"""

import json
import os
import pathlib
import shutil
import struct
import subprocess

import pytest

ROOT = pathlib.Path(os.environ.get("MOBIUS_SOURCE_ROOT", pathlib.Path(__file__).resolve().parents[2]))
CLI = os.environ.get("MOBIUS_CLI", str(ROOT / "build" / "mobius"))


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """Nothing of the caller's caches, hub settings or plugin path: each test its own HOME."""
    for k in list(os.environ):
        if k.startswith(("HF_", "HUGGING")) or k in ("MOBIUS_PLUGIN_PATH", "XDG_CACHE_HOME"):
            monkeypatch.delenv(k, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # No digest cache: the provenance says where each file's sha256 came from ("computed" or
    # "digest-cache"), so a second build of the same files would differ from the first there.
    monkeypatch.setenv("MOBIUS_CACHE_DIR", "none")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("NO_PROXY", "*")


def golden(name):
    """A golden case of this repository (tests/golden*/NAME): a tiny checkpoint."""
    for d in ("golden", "golden-encoders", "golden-seq2seq", "golden-speech", "golden-diffusers"):
        p = ROOT / "tests" / d / name
        if p.is_dir():
            return p
    raise FileNotFoundError(name)


def cli(*args, check=True, env=None):
    """Runs the CLI; returns the CompletedProcess (text)."""
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise AssertionError(f"mobius {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


def tree(folder):
    """{relative path: bytes} of every file under folder (links as their target's text)."""
    folder = pathlib.Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p.relative_to(folder))] = p.read_bytes()
    return out


def assert_same_tree(a, b):
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb), f"files differ: {sorted(set(ta) ^ set(tb))}"
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, f"bytes differ in {differ}"


def copy_case(name, dest):
    """A golden checkpoint copied without its reference outputs."""
    shutil.copytree(golden(name), dest)
    for extra in ("case.json", "reference.safetensors"):
        (pathlib.Path(dest) / extra).unlink(missing_ok=True)
    return pathlib.Path(dest)


def write_safetensors(path, tensors):
    """tensors: {name: (shape, float32 bytes)} -> a safetensors file, in name order."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        shape, data = tensors[name]
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


@pytest.fixture(scope="session")
def large_llama(tmp_path_factory):
    """A llama checkpoint of about 120 MB (its weights a repeated pattern): a save that lasts
    long enough to be interrupted while its weights stream."""
    d = tmp_path_factory.mktemp("large-llama")
    hidden, inter, layers, vocab, heads = 768, 2048, 4, 4096, 12
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "vocab_size": vocab,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (d / "config.json").write_text(json.dumps(cfg))

    def fill(*shape):
        n = 1
        for s in shape:
            n *= s
        pattern = struct.pack("<8f", 0.01, -0.02, 0.03, -0.01, 0.005, 0.0, -0.03, 0.02)
        return (shape, (pattern * (n // 8 + 1))[: n * 4])

    t = {"model.embed_tokens.weight": fill(vocab, hidden), "lm_head.weight": fill(vocab, hidden),
         "model.norm.weight": fill(hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + f"self_attn.{n}.weight"] = fill(hidden, hidden)
        t[p + "mlp.gate_proj.weight"] = fill(inter, hidden)
        t[p + "mlp.up_proj.weight"] = fill(inter, hidden)
        t[p + "mlp.down_proj.weight"] = fill(hidden, inter)
        t[p + "input_layernorm.weight"] = fill(hidden)
        t[p + "post_attention_layernorm.weight"] = fill(hidden)
    write_safetensors(d / "model.safetensors", t)
    return d
