"""Hub ids from Python, against the loopback hub of tests/hub_server.mjs: the same cache, the
same folders and the same errors as the CLI's."""

import json
import shutil
import subprocess

import pytest

from conftest import ROOT, assert_same_tree, cli, copy_case

import mobius


@pytest.fixture
def hub(tmp_path, monkeypatch):
    repos = tmp_path / "repos"
    copy_case("llama3-rope-tied", repos / "tiny-llama")
    copy_case("bert-seqcls", repos / "bert")
    (repos / "tiny-llama" / "README.md").write_text("# tiny-llama\n")
    config = {
        "repos": {
            "org/tiny-llama": {"dir": str(repos / "tiny-llama"), "tags": ["v1"]},
            "org/bert": {"dir": str(repos / "bert")},
        },
        "host": "127.0.0.1",
        "cdnHost": "127.0.0.2",
    }
    (tmp_path / "hub.json").write_text(json.dumps(config))
    server = subprocess.Popen(
        ["node", str(ROOT / "tests" / "hub_server.mjs"), str(tmp_path / "hub.json")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        ready = json.loads(server.stdout.readline())
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{ready['port']}")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "5")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_build_hub_id_as_cli(hub, tmp_path):
    from mobius import build

    seen = []
    pkg = build("org/tiny-llama", progress=lambda s, d, t: seen.append(s), quiet=True)
    assert pkg.source["repo"] == "org/tiny-llama" and len(pkg.source["commit"]) == 40
    assert pkg.provenance["source"]["repo"] == "org/tiny-llama"
    assert "download" in seen
    pkg.save(tmp_path / "py")
    cli("build", "--model", "org/tiny-llama", tmp_path / "cli", "--quiet")
    assert_same_tree(tmp_path / "cli", tmp_path / "py")
    # int4 for transformers.js, at a tag.
    build("org/tiny-llama@v1", dtype="int4", runtime="transformers.js", quiet=True).save(tmp_path / "py4")
    cli("build", "--model", "org/tiny-llama", "--revision", "v1", "--dtype", "int4", "--runtime", "transformers.js",
        tmp_path / "cli4", "--quiet")
    assert_same_tree(tmp_path / "cli4", tmp_path / "py4")


def test_download(hub, tmp_path):
    path = mobius.download("org/bert", quiet=True)
    assert str(path) == cli("download", "org/bert", "--quiet").stdout.strip()
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert mobius.download("org/tiny-llama", "v1", quiet=True).parent.name == "snapshots"


def test_hub_error(hub, tmp_path):
    with pytest.raises(mobius.HubError) as e:
        mobius.build("org/missing", quiet=True)
    r = cli("build", "--model", "org/missing", tmp_path / "cli", check=False)
    assert r.returncode == 1 and r.stderr.strip().endswith(str(e.value))
    assert not (tmp_path / "cli").exists()
    with pytest.raises(mobius.HubError):
        mobius.download("org/tiny-llama", "no-such-branch", quiet=True)


def test_offline_cache(hub, tmp_path, monkeypatch):
    mobius.download("org/bert", quiet=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    mobius.build("org/bert", quiet=True).save(tmp_path / "py")
    assert (tmp_path / "py" / "onnx" / "model.onnx").is_file()
    shutil.rmtree(tmp_path / "py")
