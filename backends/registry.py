"""Every backend attnref knows: built-ins, entry points (group `attnref.backends`), module:attr.

Nothing here imports a kernel library: a backend whose library is missing is listed as unavailable
with the reason, never an import error.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points

from .base import Backend

ENTRY_POINT_GROUP = "attnref.backends"


@dataclass(frozen=True)
class Listing:
    backend: Backend
    unavailable: str | None  # None: usable here

    @property
    def available(self) -> bool:
        return self.unavailable is None


def builtin_backends() -> list[Backend]:
    from .fa4 import fa4_backends
    from .flashinfer import flashinfer_backends
    from .flex import flex_backends
    from .naive import NaivePaged
    from .torch_aten import aten_backends
    from .torch_sdpa import sdpa_backends
    from .vllm import vllm_backends
    from .vllm_attention_layer import vllm_attention_layer_backends
    from .vllm_chunked import vllm_chunked_backends
    from .vllm_dcp import vllm_dcp_backends
    from .vllm_fa4 import vllm_fa4_backends
    from .vllm_layers import vllm_layer_backends
    from .vllm_mla import vllm_mla_backends
    from .vllm_mla_layer import vllm_mla_layer_backends
    from .xformers_ops import xformers_backends

    return [*sdpa_backends(), *aten_backends(), *flex_backends(), NaivePaged(), *fa4_backends(),
            *flashinfer_backends(), *xformers_backends(), *vllm_backends(),
            *vllm_chunked_backends(), *vllm_dcp_backends(), *vllm_fa4_backends(), *vllm_layer_backends(),
            *vllm_attention_layer_backends(), *vllm_mla_backends(), *vllm_mla_layer_backends()]


def mutant_backends() -> list[Backend]:
    from .naive import mutants

    return mutants()


class BackendSpecError(ValueError):
    """A --backend-spec that names no importable backends; the message says which part failed."""


def load_spec(spec: str) -> list[Backend]:
    """Backends named by 'package.module:attr' (a Backend, a class, or a callable returning them)."""
    module_name, _, attr = spec.partition(":")
    if not attr or not module_name:
        raise BackendSpecError(f"--backend-spec {spec!r}: expected 'package.module:attr'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module: any import failure is theirs to see, in one line
        raise BackendSpecError(f"--backend-spec {spec!r}: cannot import {module_name}: {type(e).__name__}: {e}") from None
    if not hasattr(module, attr):
        raise BackendSpecError(f"--backend-spec {spec!r}: {module_name} has no attribute {attr!r}")
    try:
        return _as_backends(getattr(module, attr))
    except TypeError as e:
        raise BackendSpecError(f"--backend-spec {spec!r}: {e}") from None


def _as_backends(obj) -> list[Backend]:
    if isinstance(obj, Backend):
        return [obj]
    if isinstance(obj, type) and issubclass(obj, Backend):
        return [obj()]
    if callable(obj):
        return _as_backends(obj())
    if isinstance(obj, (list, tuple)):
        return [b for x in obj for b in _as_backends(x)]
    raise TypeError(f"{obj!r} is not a Backend, a Backend class, or a callable returning backends")


def _plugins() -> list[Backend]:
    out = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            out += _as_backends(ep.load())
        except Exception as e:  # a broken plugin is listed, never fatal
            out.append(_Broken(ep.name, f"entry point {ep.value}: {type(e).__name__}: {e}"))
    return out


class _Broken(Backend):
    def __init__(self, name: str, reason: str) -> None:
        self.name, self.library, self.reason = name, "?", reason

    def availability(self) -> str | None:
        return self.reason


def _availability(backend: Backend) -> str | None:
    try:
        return backend.availability()
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def _known(include_mutants: bool, specs: tuple[str, ...]) -> list[Backend]:
    backends = builtin_backends() + (mutant_backends() if include_mutants else [])
    for spec in specs:
        backends += load_spec(spec)
    return backends + _plugins()


def listings(include_mutants: bool = False, specs: tuple[str, ...] = (),
             names: list[str] | None = None) -> list[Listing]:
    """Every backend, or only those called one of `names` (a name no backend has is left out), each asked whether it
    is available here (a check may cost a process 1.5 s: `get`)."""
    return [Listing(b, _availability(b)) for b in _known(include_mutants, specs) if names is None or b.name in names]


def get(name: str, include_mutants: bool = True, specs: tuple[str, ...] = ()) -> Backend:
    """The backend called `name`, available here or not. Without asking every backend whether it is: their checks
    import what they call (torch's varlen attention brings torch._dynamo), 1.4-1.9 s of each worker's start on the
    2-core CPU (benchmarks/results/throughput/harness-registry-get-h200-2026-11-28.md)."""
    known = _known(include_mutants, specs)
    for backend in known:
        if backend.name == name:
            return backend
    raise KeyError(f"backend {name!r} unknown; known: {', '.join(sorted(b.name for b in known))}")
