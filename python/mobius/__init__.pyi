# Type stubs of the public API (mobius/_api.py documents each call).
import os
import pathlib
from typing import Any, Callable, Iterable, Iterator, Optional, Tuple, Union

_PathLike = Union[str, os.PathLike[str]]
_Progress = Union[None, bool, Callable[[str, int, int], Any]]

__version__: str
DTYPES: Tuple[str, ...]
RUNTIMES: Tuple[str, ...]

class Error(Exception): ...
class ConfigError(Error): ...
class CheckpointError(Error): ...
class PluginError(Error): ...
class HubError(Error): ...
class MobiusWarning(UserWarning): ...

class Registration:
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

class ModelRegistry:
    def __init__(self, plugin_paths: Union[_PathLike, Iterable[_PathLike]] = ...) -> None: ...
    def get(self, model_type: str) -> Registration: ...
    def __contains__(self, model_type: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def architectures(self) -> list[str]: ...
    def register(self, new_type: str, existing_type: Union[str, Registration]) -> Registration: ...
    def plugins(self) -> list[dict[str, Any]]: ...
    @property
    def plugin_paths(self) -> list[str]: ...

registry: ModelRegistry

class TensorInfo:
    name: str
    dtype: str
    shape: Optional[Tuple[Union[int, str, None], ...]]

class Graph:
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
    opset_imports: dict[str, int]
    provenance: dict[str, Any]
    description: dict[str, Any]

class ModelPackage:
    graphs: Tuple[Graph, ...]
    source: dict[str, Optional[str]]
    skipped: Tuple[Tuple[str, str], ...]
    copied: Tuple[str, ...]
    warnings: Tuple[str, ...]
    @property
    def model_type(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def provenance(self) -> dict[str, Any]: ...
    def save(self, out: _PathLike, *, threads: Optional[int] = ..., progress: _Progress = ...) -> pathlib.Path: ...

def build(
    model: _PathLike,
    *,
    dtype: str = ...,
    runtime: Optional[str] = ...,
    ep: str = ...,
    ops: str = ...,
    revision: Optional[str] = ...,
    load_weights: bool = ...,
    plugin_paths: Union[_PathLike, Iterable[_PathLike]] = ...,
    registry: Optional[ModelRegistry] = ...,
    progress: _Progress = ...,
    task: Optional[str] = ...,
    components: Optional[Iterable[str]] = ...,
    position_ids: Optional[str] = ...,
    block_size: int = ...,
    symmetric: bool = ...,
    accuracy_level: Optional[int] = ...,
    expert_loop: bool = ...,
    quiet: bool = ...,
) -> ModelPackage: ...
def info(folder: _PathLike) -> dict[str, Any]: ...
def download(
    model_id: str, revision: Optional[str] = ..., *, progress: _Progress = ..., quiet: bool = ...
) -> pathlib.Path: ...
