"""ModelRegistry: isolated registries, aliases registered in one and invisible elsewhere."""

import json

import pytest

from conftest import assert_same_tree, cli, copy_case, tree

import mobius


def renamed_llama(tmp_path, name="my_new_arch"):
    d = copy_case("llama3-rope-tied", tmp_path / name)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = name
    # Not a *ForCausalLM: llama's fallback for unknown decoder types does not take it.
    cfg["architectures"] = ["MyNewArchModel"]
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_alias_builds_in_its_registry_only(tmp_path):
    src = renamed_llama(tmp_path)
    reg = mobius.ModelRegistry()
    r = reg.register("my_new_arch", "llama")
    assert r.alias_of == "llama" and r.plugin == "llama" and r.declared_by == "in-process"
    assert reg.get("my_new_arch").tasks == reg.get("llama").tasks
    assert len(reg) == len(mobius.registry) + 1

    pkg = mobius.build(src, registry=reg, quiet=True)
    assert pkg.model_type == "my_new_arch"
    pkg.save(tmp_path / "mine")
    # The same graph and weights as the llama it is: only the names and provenance differ.
    cli("build", "--model", copy_case("llama3-rope-tied", tmp_path / "orig"), tmp_path / "llama", "--quiet")
    assert (tmp_path / "mine" / "model.onnx.data").read_bytes() == (tmp_path / "llama" / "model.onnx.data").read_bytes()
    prov = json.loads((tmp_path / "mine" / "mobius_provenance.json").read_text())
    assert prov["model_type"] == "my_new_arch"

    # Nowhere else: another registry, the default one, the CLI.
    other = mobius.ModelRegistry()
    assert "my_new_arch" not in other and "my_new_arch" not in mobius.registry
    with pytest.raises(mobius.Error, match="unknown model type"):
        mobius.build(src, registry=other)
    with pytest.raises(mobius.Error, match="unknown model type"):
        mobius.build(src)
    r = cli("build", "--model", src, tmp_path / "cli", check=False)
    assert r.returncode == 1 and "unknown model type" in r.stderr
    assert not (tmp_path / "cli").exists()


def test_register_refusals():
    reg = mobius.ModelRegistry()
    with pytest.raises(mobius.Error, match="already registered"):
        reg.register("llama", "mistral")
    with pytest.raises(mobius.Error, match="not a model type name"):
        reg.register("bad name/..", "llama")
    with pytest.raises(mobius.Error, match="unknown model type"):
        reg.register("mine", "no_such_type")
    reg.register("mine", reg.get("qwen2"))
    with pytest.raises(mobius.Error, match="already registered"):
        reg.register("mine", "llama")
    assert reg.get("mine").alias_of == "qwen2"
    with pytest.raises(TypeError):
        reg.register(3, "llama")


def test_registries_are_independent():
    a, b = mobius.ModelRegistry(), mobius.ModelRegistry()
    a.register("only_in_a", "bert")
    b.register("only_in_b", "t5")
    assert "only_in_a" in a and "only_in_a" not in b
    assert "only_in_b" in b and "only_in_b" not in a
    assert list(a) == a.architectures()
    assert 3 not in a


def test_plugin_paths(tmp_path):
    # A pack without code: aliases declared in its manifest, found through plugin_paths.
    pack = tmp_path / "pack"
    pack.mkdir(mode=0o755)
    (pack / "plugin.yaml").write_text(
        "name: my_pack\nversion: 2.0.0\nvendor: tests\nabi_version: 1\naliases: {pack_arch: llama}\n")
    reg = mobius.ModelRegistry(plugin_paths=[pack])
    assert reg.plugin_paths[0] == str(pack)
    r = reg.get("pack_arch")
    assert r.alias_of == "llama" and r.declared_by.endswith("plugin.yaml")
    assert "pack_arch" not in mobius.ModelRegistry()
    assert any(p["name"] == "my_pack" and p["status"] == "loaded" for p in reg.plugins())

    src = renamed_llama(tmp_path, "pack_arch")
    mobius.build(src, plugin_paths=[pack], quiet=True).save(tmp_path / "py")
    cli("build", "--model", src, tmp_path / "cli", "--plugin-path", pack, "--quiet")
    assert_same_tree(tmp_path / "cli", tmp_path / "py")
    mobius.build(src, registry=reg, quiet=True).save(tmp_path / "py2")
    assert tree(tmp_path / "py2") == tree(tmp_path / "py")
    with pytest.raises(ValueError):
        mobius.build(src, registry=reg, plugin_paths=[pack])


def test_get_unknown_suggests():
    with pytest.raises(mobius.Error, match="llama"):
        mobius.registry.get("lama")
