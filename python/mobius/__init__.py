"""mobius: Hugging Face checkpoints into ONNX model folders that ONNX Runtime, ONNX Runtime GenAI
and transformers.js load unchanged.

    from mobius import build, registry, ModelRegistry

    pkg = build("meta-llama/Llama-3.2-1B", dtype="int4")   # a hub id or a checkpoint folder
    pkg.graphs[0].inputs                                    # readable before saving
    pkg.save("out/llama")                                   # transactional, as `mobius build`

    "llama" in registry                                     # the default registry
    registry.get("llama")                                   # plugin, version, tasks, ...
    registry.architectures()

    reg = ModelRegistry()                                   # an isolated registry
    reg.register("my_new_arch", "llama")                    # an alias, in `reg` only
    build("path/to/my_new_arch_checkpoint", registry=reg).save("out/mine")

Errors are mobius.Error: ConfigError, CheckpointError, PluginError, HubError. The work runs with
the GIL released; Ctrl-C (KeyboardInterrupt) stops it and leaves the output folder as it was.
"""

from . import _api, _core
from ._api import *  # noqa: F401,F403 - the public API (its __all__)
from ._api import _get_default_registry

__version__: str = _core.version

__all__ = [*_api.__all__, "registry"]


def __getattr__(name: str):
    # `mobius.registry`: the default registry, its plugins loaded on first use.
    if name == "registry":
        return _get_default_registry()
    raise AttributeError(f"module 'mobius' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"registry"})
