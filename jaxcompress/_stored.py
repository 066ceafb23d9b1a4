"""The library's programs kept between processes, traced and lowered once (ours).

JAX's persistent compilation cache keeps XLA's *compiled* programs, keyed by the lowered
StableHLO, so a second process still traces the library's Python and lowers it to StableHLO
before the cache can answer: on the command line's ``compress --eps`` of a ``[2, 64, 64, 1]``
network that is 0.66 s of a 1.3 s warm call (four programs). This module keeps what the first
process lowered, serialised with :func:`jax.export`, under a key made of everything the trace
depends on, and a later process calls the stored program instead of tracing again.

The key of a call of ``fun`` (a :class:`jaxcompress.compiling.FastOnSmallCPU` program) is the
SHA-256 of: this store's format, the library's own source (every ``.py`` of the package), the
versions of jax and jaxlib, the backend and its device kind, the JAX settings that change a
trace (x64, default matmul precision, dtype and rank promotion, the PRNG implementation and
partitioning), the compile options (fast or XLA's defaults), ``fun`` itself, the static
arguments, the dynamic arguments' tree structure and their shapes, dtypes and weak types. A
function enters the key as its module, qualified name, defaults and closure, and only a
function of the library, of jax or of NumPy does (its code is then pinned by the source digest
or the versions): a call whose static arguments hold anything else (a user's function, an
object without a value-like representation) is not stored, and runs as it always does. The
stored program is the same StableHLO the process would have lowered, compiled with the same
options, so its results are the same bits (tested).

Off unless :func:`keep_programs` turns it on for a block: the command line does, in a
``programs`` folder inside its compilation cache; the library leaves a user's process alone.
Files are read back with :mod:`pickle`, so the folder deserves the trust of JAX's own cache
folder (which holds executables): a per-user folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import inspect
import os
import pickle
import re
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

#: bump when what a stored file holds changes
_FORMAT = "jaxcompress-stored-program-1"
#: the modules whose functions may enter a key (their code is pinned by the key)
_PINNED = ("jaxcompress", "jax", "jaxlib", "numpy")
#: JAX settings that change what a trace produces
_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
             "jax_numpy_rank_promotion", "jax_default_prng_impl", "jax_threefry_partitionable")
#: the most files a folder keeps: past it, a write removes the least recently used quarter
MAX_FILES = 2000
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")

#: the abstract value of an argument (``jax.typeof`` where this JAX has it)
_typeof = getattr(jax, "typeof", None) or jax.core.get_aval

_STORE: ProgramStore | None = None
#: one store per folder and process: a second block on the same folder reuses the programs the
#: first one read or exported (and jitted), as a second call of a jitted function would
_STORES: dict[Path, ProgramStore] = {}


@contextlib.contextmanager
def keep_programs(path: str | os.PathLike | None) -> Iterator[ProgramStore | None]:
    """Within the block, the library's :class:`~jaxcompress.compiling.FastOnSmallCPU` programs
    are kept in (and read back from) the folder ``path``; ``None`` leaves them off."""
    global _STORE
    before = _STORE
    if path is None:
        _STORE = None
    else:
        folder = Path(path).expanduser().resolve()
        _STORE = _STORES.setdefault(folder, ProgramStore(folder))
    try:
        yield _STORE
    finally:
        _STORE = before


def active() -> ProgramStore | None:
    """The store of the enclosing :func:`keep_programs` block, or ``None``."""
    return _STORE


class _Refused(Exception):
    """What the key of a call cannot be made of (the call is not stored)."""


def _pinned_module(obj) -> str:
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] not in _PINNED:
        raise _Refused(f"{obj!r} is from module {module!r}")
    return module


def fingerprint(obj, _path: tuple = ()) -> str:
    """A text that is equal for two objects in two processes when they trace alike; raises
    :class:`_Refused` for anything it cannot vouch for."""
    if id(obj) in _path:
        raise _Refused("a cycle")
    path = (*_path, id(obj))
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, enum.Enum):
        return f"enum:{type(obj).__module__}.{type(obj).__qualname__}.{obj.name}"
    if isinstance(obj, (tuple, list, frozenset, set)):
        items = [fingerprint(x, path) for x in obj]
        if isinstance(obj, (frozenset, set)):
            items.sort()
        return f"{type(obj).__name__}({','.join(items)})"
    if isinstance(obj, dict):
        items = sorted(f"{fingerprint(k, path)}:{fingerprint(v, path)}" for k, v in obj.items())
        return f"dict({','.join(items)})"
    if isinstance(obj, np.dtype):
        return f"dtype:{obj}"
    if isinstance(obj, type):
        return f"type:{_pinned_module(obj)}.{obj.__qualname__}"
    if isinstance(obj, np.ufunc):
        return f"ufunc:{obj.__name__}"
    if isinstance(obj, functools.partial):
        return (f"partial({fingerprint(obj.func, path)},{fingerprint(obj.args, path)},"
                f"{fingerprint(obj.keywords, path)})")
    if isinstance(obj, types.MethodType):
        return f"method({fingerprint(obj.__func__, path)},{fingerprint(obj.__self__, path)})"
    if isinstance(obj, types.FunctionType):
        cells = tuple(c.cell_contents for c in obj.__closure__ or ())
        return (f"fn:{_pinned_module(obj)}.{obj.__qualname__}"
                f"({fingerprint(obj.__defaults__, path)},{fingerprint(obj.__kwdefaults__, path)}"
                f",{fingerprint(cells, path)})")
    if isinstance(obj, types.BuiltinFunctionType):
        return f"builtin:{_pinned_module(obj)}.{obj.__qualname__}"
    if isinstance(obj, jax.ShapeDtypeStruct):
        if obj.sharding is not None:
            raise _Refused("a sharded ShapeDtypeStruct")
        return f"sds:{obj.shape}:{obj.dtype}:{obj.weak_type}"
    if isinstance(obj, jax.tree_util.PyTreeDef):
        text = str(obj)
        if _ADDRESS.search(text):
            raise _Refused(f"a tree structure that names an address: {text}")
        return f"tree:{text}"
    if dataclasses.is_dataclass(obj):
        _pinned_module(type(obj))
        fields = ",".join(f"{f.name}={fingerprint(getattr(obj, f.name), path)}"
                          for f in dataclasses.fields(obj))
        return f"{type(obj).__module__}.{type(obj).__qualname__}({fields})"
    wrapped = getattr(obj, "__wrapped__", None)   # jax.jit / custom_jvp of a pinned function
    if wrapped is not None and type(obj).__module__.split(".")[0] in _PINNED:
        return f"wrapped:{type(obj).__qualname__}({fingerprint(wrapped, path)})"
    raise _Refused(f"no value-like representation for a {type(obj).__qualname__}")


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of every ``.py`` file of the package (names and contents)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _environment() -> str:
    import jaxlib

    device = jax.devices()[0]
    settings = ",".join(f"{name}={getattr(jax.config, name, None)!r}" for name in _SETTINGS)
    return (f"{_FORMAT}|{source_digest()}|jax {jax.__version__}|jaxlib {jaxlib.__version__}|"
            f"{device.platform}:{getattr(device, 'device_kind', '')}|{settings}")


def _aval(x) -> str:
    if isinstance(x, jax.Array):
        if len(x.sharding.device_set) != 1:
            raise _Refused("an argument on several devices")
    elif not isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
        raise _Refused(f"an argument of type {type(x).__qualname__}")
    a = _typeof(x)
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.extended):
        raise _Refused(f"an argument of dtype {a.dtype}")
    return f"{a.dtype}{list(a.shape)}{'w' if a.weak_type else ''}"


@dataclasses.dataclass
class _Loaded:
    call: Any            # the stored program, jitted with the compile options of its key
    out_tree: Any


class ProgramStore:
    """A folder of exported programs (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.loaded: dict[str, _Loaded] = {}
        #: calls by what happened to them: ``stored`` (exported now), ``read`` (from the
        #: folder), ``reused`` (already in this process) and ``refused`` (with why, per key)
        self.counts = {"stored": 0, "read": 0, "reused": 0, "refused": 0}
        self.refusals: list[str] = []
        self.failed: set[str] = set()   # keys whose export failed: not tried again

    def call(self, fun, static_argnames, compiler_options, args, kwargs):
        """``jax.jit(fun, static_argnames=..., compiler_options=...)(*args, **kwargs)``
        through the store, or :data:`NotImplemented` when this call cannot be stored."""
        try:
            sig = inspect.signature(fun)
            if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   for p in sig.parameters.values()):
                raise _Refused(f"{fun.__qualname__} takes *args or **kwargs")
            bound = sig.bind(*args, **kwargs)
            static = {k: v for k, v in bound.arguments.items() if k in static_argnames}
            dynamic = {k: v for k, v in bound.arguments.items() if k not in static_argnames}
            flat, tree = jax.tree.flatten(dynamic)
            key_text = "\n".join((
                _environment(), f"options {fingerprint(compiler_options)}",
                f"fun {fingerprint(fun)}", f"static {fingerprint(static)}",
                f"tree {fingerprint(tree)}", "avals " + ";".join(_aval(x) for x in flat)))
        except _Refused as why:
            self.counts["refused"] += 1
            self.refusals.append(str(why))
            return NotImplemented
        except Exception as e:   # noqa: BLE001 -- a bad call raises in the ordinary path
            self.counts["refused"] += 1
            self.refusals.append(f"no key: {type(e).__name__}: {e}")
            return NotImplemented
        key = hashlib.sha256(key_text.encode()).hexdigest()
        if key in self.failed:
            self.counts["refused"] += 1
            return NotImplemented
        loaded = self.loaded.get(key)
        if loaded is not None:
            self.counts["reused"] += 1
        else:
            loaded = self._read(key, key_text, compiler_options)
            if loaded is None:
                try:
                    loaded = self._export(key, key_text, fun, sig, static, tree, flat,
                                          compiler_options)
                except Exception as e:   # noqa: BLE001 -- run as always (and raise there)
                    self.failed.add(key)
                    self.counts["refused"] += 1
                    self.refusals.append(f"export failed: {type(e).__name__}: {e}")
                    return NotImplemented
            self.loaded[key] = loaded
        return jax.tree.unflatten(loaded.out_tree, loaded.call(*flat))

    def _file(self, key: str) -> Path:
        return self.path / f"{key}.jxp"

    def _read(self, key, key_text, compiler_options) -> _Loaded | None:
        try:
            record = pickle.loads(self._file(key).read_bytes())
            if record["key"] != key_text:   # a collision of SHA-256 or another format
                return None
            exported = jax.export.deserialize(bytearray(record["exported"]))
            out_tree = record["out_tree"]
        except FileNotFoundError:
            return None
        except Exception:   # noqa: BLE001 -- a damaged or foreign file: export again
            return None
        self.counts["read"] += 1
        with contextlib.suppress(OSError):   # recently used: kept longest
            os.utime(self._file(key))
        return _Loaded(jax.jit(exported.call, compiler_options=compiler_options), out_tree)

    def _export(self, key, key_text, fun, sig, static, tree, flat, compiler_options):
        box = {}

        def flat_fun(*leaves):
            arguments = {**jax.tree.unflatten(tree, leaves), **static}
            call = sig.bind_partial()
            call.arguments = {k: arguments[k] for k in sig.parameters if k in arguments}
            out_leaves, box["out_tree"] = jax.tree.flatten(fun(*call.args, **call.kwargs))
            return out_leaves

        avals = [jax.ShapeDtypeStruct(np.shape(x), _typeof(x).dtype, weak_type=_typeof(x).weak_type)
                 for x in flat]
        # the file is read back by this jax and jaxlib only (they are in the key): the custom
        # calls' stability across versions, which jax.export checks, does not matter here
        exported = jax.export.export(
            jax.jit(flat_fun), disabled_checks=[
                jax.export.DisabledSafetyCheck.custom_call("ALL")])(*avals)
        loaded = _Loaded(jax.jit(exported.call, compiler_options=compiler_options),
                         box["out_tree"])
        try:
            record = pickle.dumps({"key": key_text, "out_tree": box["out_tree"],
                                   "exported": bytes(exported.serialize())})
        except Exception:   # noqa: BLE001 -- an output structure pickle cannot write
            return loaded
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.path, delete=False, suffix=".tmp") as f:
                f.write(record)
            os.replace(f.name, self._file(key))
        except OSError as e:   # a read-only or full folder: this process still uses it
            self.refusals.append(f"not written: {e}")
            with contextlib.suppress(OSError, NameError):
                os.unlink(f.name)
            return loaded
        self.counts["stored"] += 1
        self._evict()
        return loaded

    def _evict(self) -> None:
        files = list(self.path.glob("*.jxp"))
        if len(files) <= MAX_FILES:
            return
        def used(p):
            try:
                return p.stat().st_mtime
            except OSError:
                return 0.0
        for p in sorted(files, key=used)[:len(files) - (3 * MAX_FILES) // 4]:
            with contextlib.suppress(OSError):
                p.unlink()
