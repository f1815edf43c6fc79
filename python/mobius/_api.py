"""The public API of mobius, over its native core (mobius._core)."""

from __future__ import annotations

import json
import os
import pathlib
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Tuple, Union

from . import _core
from ._core import CheckpointError, ConfigError, Error, HubError, PluginError

__all__ = [
    "build",
    "info",
    "download",
    "ModelRegistry",
    "ModelPackage",
    "Graph",
    "TensorInfo",
    "Registration",
    "Error",
    "ConfigError",
    "CheckpointError",
    "PluginError",
    "HubError",
    "MobiusWarning",
    "DTYPES",
    "RUNTIMES",
]

PathLike = Union[str, "os.PathLike[str]"]
# A progress report: (stage, done, total), stage "download" (bytes of the hub files) or
# "weights" (bytes of a graph's weights written).
ProgressCallback = Callable[[str, int, int], Any]
Progress = Union[None, bool, ProgressCallback]

DTYPES = ("f32", "f16", "bf16", "int4", "int8")
EPS = ("cpu", "cuda")
OPS = ("ort", "standard")
RUNTIMES = tuple(_core.runtimes())
POSITION_IDS = ("input", "slots")
BLOCK_SIZES = (16, 32, 64, 128, 256)

# The package's own plugins: the default plugins folder of the library inside it.
_PLUGINS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins")


class MobiusWarning(UserWarning):
    """What mobius warns about: a plugin that did not load, a pipeline component skipped."""


def _warn(messages: Iterable[str], stacklevel: int = 3) -> None:
    for m in messages:
        warnings.warn(m, MobiusWarning, stacklevel=stacklevel)


def _paths(paths: Union[PathLike, Iterable[PathLike], None], what: str) -> list:
    if paths is None:
        return []
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"{what}: expected folder paths, got {type(p).__name__}")
        out.append(os.fspath(p))
    return out


def _choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    if value not in choices:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(map(repr, choices))}")
    return value


def _check_progress(progress: Progress) -> Progress:
    if progress is None or isinstance(progress, bool) or callable(progress):
        return progress
    raise TypeError("progress: expected None, True/False or a callable(stage, done, total)")


@dataclass(frozen=True)
class Registration:
    """One registered model type: what builds it and what it builds.

    model_type: the config.json model_type it answers to.
    task / tasks: the task built by default, and every task it builds (`task=` of build()).
    plugin, version, vendor, source: the plugin whose code builds it (for an alias, the plugin of
        the type it is an alias of), and its library.
    alias_of: the model type it is another name of (None unless an alias); declared_by: the
        manifest that declared the alias, or "in-process" for ModelRegistry.register.
    default_runtime: the runtime a build lays the folder out for when none is named.
    graphs: the graphs one checkpoint becomes, when more than one.
    """

    model_type: str
    task: str
    tasks: Tuple[str, ...]
    plugin: str
    version: str
    vendor: str
    source: str
    alias_of: Optional[str]
    declared_by: Optional[str]
    default_runtime: str
    graphs: Tuple[str, ...]

    @classmethod
    def _of(cls, d: dict) -> "Registration":
        d = dict(d)
        d["tasks"] = tuple(d["tasks"])
        d["graphs"] = tuple(d["graphs"])
        return cls(**d)


class ModelRegistry:
    """Model types and the plugins that build them, loaded into a registry of its own.

    ModelRegistry(plugin_paths=()) loads every plugin found in `plugin_paths` (searched first, as
    the CLI's --plugin-path), then MOBIUS_PLUGIN_PATH, then the plugins installed with this
    package. Registrations made with register() belong to this registry only: another registry,
    the default `mobius.registry` and the `mobius` command never see them.

        reg = ModelRegistry()
        "llama" in reg                        # True
        reg.get("llama").plugin               # 'llama'
        reg.register("my_new_arch", "llama")  # my_new_arch checkpoints now build as llama, here
        build("path/to/my_new_arch", registry=reg)
    """

    def __init__(self, plugin_paths: Union[PathLike, Iterable[PathLike]] = ()) -> None:
        self._plugin_paths = _paths(plugin_paths, "plugin_paths")
        self._native = _core.Registry(self._plugin_paths, [_PLUGINS_DIR])
        _warn(self._native.failures())

    def get(self, model_type: str) -> Registration:
        """The registration of `model_type`; mobius.Error (with close matches) when there is none."""
        return Registration._of(self._native.get(model_type))

    def __contains__(self, model_type: object) -> bool:
        return isinstance(model_type, str) and self._native.contains(model_type)

    def __len__(self) -> int:
        return self._native.size()

    def __iter__(self) -> Iterator[str]:
        return iter(self.architectures())

    def architectures(self) -> list:
        """Every registered model type, sorted."""
        return self._native.architectures()

    def register(self, new_type: str, existing_type: Union[str, Registration]) -> Registration:
        """Registers `new_type` as another name of the registered `existing_type`, in this
        registry only: a checkpoint whose config.json says model_type `new_type` is built by the
        code that builds `existing_type`. mobius.Error when `new_type` is taken or not a model
        type name, or `existing_type` is not registered."""
        if isinstance(existing_type, Registration):
            existing_type = existing_type.model_type
        if not isinstance(new_type, str) or not isinstance(existing_type, str):
            raise TypeError("register(new_type, existing_type): model types are strings")
        return Registration._of(self._native.register_alias(new_type, existing_type))

    def plugins(self) -> list:
        """Every plugin found, loaded or not, as `mobius plugins --json` lists them."""
        return self._native.plugins()

    @property
    def plugin_paths(self) -> list:
        """The folders searched for plugins, in order."""
        return self._native.searched()

    def __repr__(self) -> str:
        return f"<mobius.ModelRegistry: {len(self)} model types>"


_default_registry: Optional[ModelRegistry] = None
_default_lock = threading.Lock()


def _get_default_registry() -> ModelRegistry:
    global _default_registry
    with _default_lock:
        if _default_registry is None:
            _default_registry = ModelRegistry()
        return _default_registry


@dataclass(frozen=True)
class TensorInfo:
    """A graph input or output: its name, dtype ("float32", "int64", ...) and shape (an int per
    fixed dimension, a name per symbolic one, None when unknown; shape None when the rank is)."""

    name: str
    dtype: str
    shape: Optional[Tuple[Union[int, str, None], ...]]

    @classmethod
    def _of(cls, d: dict) -> "TensorInfo":
        shape = d.get("shape")
        return cls(d["name"], d["dtype"], None if shape is None else tuple(shape))


@dataclass(frozen=True)
class Graph:
    """One graph of a built model, before (or after) it is saved.

    path: where it is written, relative to the output folder ("model.onnx",
        "onnx/model_fp16.onnx", "unet/model.onnx"); folder: its model folder inside the output
        ("" for the output itself); component / name: the pipeline component and the model type's
        graph name it is ("" when not).
    inputs / outputs: TensorInfo each; opset_imports: {domain: version}.
    provenance: its folder's mobius_provenance.json as save() writes it, but for "files" (the
        checkpoint's files, hashed while saving).
    description: everything `mobius info --json` says of a saved graph that is known before.
    """

    path: str
    folder: str
    component: str
    name: str
    model_type: str
    runtime: str
    node_count: int
    initializer_count: int
    weight_bytes: int
    inputs: Tuple[TensorInfo, ...]
    outputs: Tuple[TensorInfo, ...]
    opset_imports: dict
    provenance: dict = field(repr=False)
    description: dict = field(repr=False)

    @classmethod
    def _of(cls, p: dict) -> "Graph":
        desc = json.loads(p["description"])
        return cls(
            path=(p["folder"] + "/" if p["folder"] else "") + p["file"],
            folder=p["folder"],
            component=p["component"],
            name=p["graph"],
            model_type=p["model_type"],
            runtime=p["runtime"],
            node_count=desc["node_count"],
            initializer_count=desc["initializer_count"],
            weight_bytes=desc["weight_bytes"],
            inputs=tuple(TensorInfo._of(v) for v in desc["inputs"]),
            outputs=tuple(TensorInfo._of(v) for v in desc["outputs"]),
            opset_imports={o["domain"]: o["version"] for o in desc["opset_imports"]},
            provenance=json.loads(p["provenance"]),
            description=desc,
        )


class ModelPackage:
    """A built model: its graphs and weight plan, bound to its checkpoint. Weights are read only
    when saved; until then the graphs, their inputs and outputs and the provenance are readable.
    """

    def __init__(self, native: Any, progress: Progress, warned: Sequence[str] = ()) -> None:
        self._native = native
        self._progress = progress
        self.graphs: Tuple[Graph, ...] = tuple(Graph._of(p) for p in native.parts())
        src = native.source()
        #: Where the checkpoint came from: {"path", "repo", "revision", "commit"} (repo, revision
        #: and commit None for a local folder).
        self.source: dict = src
        #: A pipeline's components not built: (component, reason) each.
        self.skipped: Tuple[Tuple[str, str], ...] = tuple(native.skipped())
        #: What is copied unchanged into the output (a pipeline's tokenizer/, scheduler/, ...).
        self.copied: Tuple[str, ...] = tuple(native.copied())
        #: What the build warned about (also issued as MobiusWarning).
        self.warnings: Tuple[str, ...] = tuple(warned)

    @property
    def model_type(self) -> str:
        """The model type built (the first graph's)."""
        return self.graphs[0].model_type if self.graphs else ""

    @property
    def runtime(self) -> str:
        """The runtime the folder is laid out for: ort-genai, onnxruntime or transformers.js."""
        return self._native.runtime()

    @property
    def provenance(self) -> dict:
        """mobius_provenance.json as save() writes it at the output's root, but for "files" (the
        checkpoint's files, hashed while saving). For a build of several model folders (a
        diffusers pipeline, a VAE's two graphs): {folder: that folder's provenance}."""
        if all(g.folder == "" for g in self.graphs):
            p = dict(self.graphs[0].provenance)
            p["graphs"] = [g.provenance["graphs"][0] for g in self.graphs]
            return p
        return {g.folder: g.provenance for g in self.graphs}

    def save(self, out: PathLike, *, threads: Optional[int] = None, progress: Progress = ...) -> pathlib.Path:
        """Writes the model folder `out` as `mobius build` does, transactionally: into a temporary
        folder beside it, checked, then put in place. On any failure, and on KeyboardInterrupt,
        `out` is as it was. `out` may replace only an earlier model folder, and is never the
        checkpoint folder or one holding it.

        threads: tensors written at once (the bytes written do not depend on it); default: the
            CLI's, up to 4.
        progress: as for build() (default: the build's).
        Returns `out` as a pathlib.Path."""
        if threads is None:
            threads = _core.default_threads()
        if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 64:
            raise ValueError(f"threads={threads!r}: expected an int from 1 to 64")
        progress = self._progress if progress is ... else _check_progress(progress)
        self._native.save(os.fspath(out), threads, progress)
        return pathlib.Path(out)

    def __repr__(self) -> str:
        graphs = ", ".join(g.path for g in self.graphs)
        return f"<mobius.ModelPackage {self.model_type} for {self.runtime}: {graphs}>"


def build(
    model: PathLike,
    *,
    dtype: str = "f32",
    runtime: Optional[str] = None,
    ep: str = "cpu",
    ops: str = "ort",
    revision: Optional[str] = None,
    load_weights: bool = True,
    plugin_paths: Union[PathLike, Iterable[PathLike]] = (),
    registry: Optional[ModelRegistry] = None,
    progress: Progress = None,
    task: Optional[str] = None,
    components: Optional[Iterable[str]] = None,
    position_ids: Optional[str] = None,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: Optional[int] = None,
    expert_loop: bool = False,
    quiet: bool = False,
) -> ModelPackage:
    """Builds a checkpoint into an ONNX model package, as `mobius build` does; save() writes it.

    model: a checkpoint folder (config.json and weights), a diffusers pipeline folder
        (model_index.json), or a Hugging Face Hub id "org/name[@revision]", fetched into
        huggingface_hub's cache (HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE).
    dtype: "f32", "f16", "bf16", or "int4"/"int8" (MatMul weights block-quantized for
        MatMulNBits; needs ops="ort").
    runtime: the runtime the folder is laid out for: "ort-genai", "onnxruntime" or
        "transformers.js"; None: the model's task's default (GenAI for text generation,
        transformers.js for encoders, ...).
    ep: "cpu" or "cuda", the execution provider the graph is tuned for.
    ops: "ort" (ONNX Runtime's fused operators) or "standard" (the ONNX domain only).
    revision: a hub branch, tag or commit (for a hub id).
    load_weights: False builds the graph only (the CLI's --no-weights): no weights are read and
        the saved data file is zeros.
    plugin_paths: folders searched for plugins before the default ones (the CLI's
        --plugin-path); with `registry`, give them to ModelRegistry instead.
    registry: the ModelRegistry resolving the model type; None: `mobius.registry` (or, with
        plugin_paths, the plugins found there and in the default folders).
    progress: None (quiet), True (progress bars on stderr) or a callable(stage, done, total),
        called about every 100 ms: stage "download" (bytes of hub files) or "weights" (bytes of
        a graph's weights saved). An exception it raises stops the work and is raised.
    task: the task to build, for a model type that builds several (e.g. "feature-extraction").
    components: for a diffusers pipeline: the components to build (e.g. ["unet"]).
    position_ids, block_size, symmetric, accuracy_level, expert_loop: the CLI's --position-ids,
        --block-size, --symmetric/--asymmetric, --accuracy-level and --expert-loop.
    quiet: no notes on stderr.

    Raises ConfigError (a config file: the file, the key and why), CheckpointError (a weights
    file), PluginError (a plugin's fault), HubError (the hub or its cache), Error (anything
    else: an unknown model type, a missing folder). Nothing is written but the hub cache.
    """
    model = os.fspath(model)
    _choice("dtype", dtype, DTYPES)
    _choice("ep", ep, EPS)
    _choice("ops", ops, OPS)
    if runtime is not None:
        _choice("runtime", runtime, RUNTIMES)
    if position_ids is not None:
        _choice("position_ids", position_ids, POSITION_IDS)
    _choice("block_size", block_size, BLOCK_SIZES)
    if accuracy_level is not None and accuracy_level not in range(5):
        raise ValueError(f"accuracy_level={accuracy_level!r}: expected 0 to 4")
    if components is not None and isinstance(components, str):
        components = [components]
    progress = _check_progress(progress)
    paths = _paths(plugin_paths, "plugin_paths")
    if registry is not None and paths:
        raise ValueError("plugin_paths and registry: give the plugin paths to ModelRegistry(plugin_paths=...)")
    if registry is not None and not isinstance(registry, ModelRegistry):
        raise TypeError(f"registry: expected a mobius.ModelRegistry, got {type(registry).__name__}")
    if registry is None and not paths:
        registry = _get_default_registry()
    options = {
        "dtype": dtype,
        "ep": ep,
        "ops": ops,
        "runtime": runtime or "",
        "task": task or "",
        "position_ids": position_ids or "",
        "block_size": int(block_size),
        "symmetric": bool(symmetric),
        "accuracy_level": -1 if accuracy_level is None else int(accuracy_level),
        "expert_loop": bool(expert_loop),
        "load_weights": bool(load_weights),
        "quiet": bool(quiet),
        "revision": revision or "",
        "components": list(components or []),
    }
    warned: list = []
    try:
        native = _core.convert(
            model, options, registry._native if registry is not None else None, paths, [_PLUGINS_DIR], progress, warned
        )
    finally:
        _warn(warned)
    return ModelPackage(native, progress, warned)


def info(folder: PathLike) -> dict:
    """What a built model folder holds, as `mobius info --json` prints it: the runtime, each
    graph's inputs and outputs (dtype, shape), opset imports, node and initializer counts, weight
    dtypes and bytes, file sizes, the runtime config, the provenance and the problems found. The
    folder is only read. Error when it is not a mobius output or a graph cannot be read."""
    return json.loads(_core.info(os.fspath(folder)))


def download(model_id: str, revision: Optional[str] = None, *, progress: Progress = None, quiet: bool = False) -> pathlib.Path:
    """Fetches what a build of the hub model `model_id` ("org/name[@revision]") reads (config,
    tokenizer and weights; a diffusers pipeline's components) into huggingface_hub's cache, as
    `mobius download` does, and returns its snapshot folder. HubError when the hub or the cache
    fails; with HF_HUB_OFFLINE=1, the cache alone is looked in."""
    if not isinstance(model_id, str):
        raise TypeError("download: model_id is a hub id string, 'org/name[@revision]'")
    return pathlib.Path(_core.download(model_id, revision or "", bool(quiet), _check_progress(progress)))
