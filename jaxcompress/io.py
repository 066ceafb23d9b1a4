"""Saving and loading networks: one self-describing file per model.

Format: a single `MessagePack <https://msgpack.org>`_ document written with
:func:`flax.serialization.msgpack_serialize` (Flax's own serializer: arrays keep their exact
dtype and bits, one file, no directory, readable without jaxcompress by
``flax.serialization.msgpack_restore``). We chose it over Orbax because a compressed MLP is a
few kilobytes to megabytes: Orbax's asynchronous, sharded, directory-based checkpoints solve
problems a model this size does not have, while a single file is easy to move, hash and attach.
The document is::

    {"format": "jaxcompress", "version": 1,
     "activation": "sigmoid", "sizes": [d_in, d_1, ..., d_out],
     "metadata": {...},                       # user metadata + compression record
     "params": [{"kernel": ..., "bias": ...}, ...],
     "sha256": "<hash of the params' bytes>"}

A compressed traced network (:class:`~jaxcompress.Compressed` from ``jc.compress(jc.trace(...))``
or :class:`~jaxcompress.modules.CompressedModule` from :func:`~jaxcompress.trace_module`) is stored
as a
version-2 document, its program serialised by :mod:`jax.export` with a symbolic batch
dimension ``(b, d_in)``, lowered for CPU and CUDA, matmuls at ``HIGHEST`` precision::

    {"format": "jaxcompress", "version": 2, "kind": "traced",
     "paths": ["['layers'][0]['kernel'].value", ...],   # jax.tree_util.keystr of every leaf
     "leaves": [...],                                    # the compressed params, flatten order
     "program": <bytes of Exported.serialize()>,
     "params_are_inputs": true,     # program(leaves, x); false: program(x), weights inside
     "d_in": 2, "dtype": "float32",
     "metadata": {..., "compression": CompressInfo.to_dict()},
     "sha256": "<hash of the paths, leaves and program>",
     "jaxpr": <MessagePack bytes>,  # the same program as a jaxpr (jaxcompress._jaxpr_io)
     "jaxpr_sha256": "<hash of those bytes>",
     "chain": {"activation": ..., "params": [...]} or None,  # a chain of dense layers
     "chain_sha256": "<hash of its params>"}

The ``jaxpr`` is what the library's own readers of programs need: :func:`jaxcompress.verify`
interprets it a second time (bounds on the difference of two networks) and
:func:`jaxcompress.trace` finds its neuron groups, so a loaded traced network is compressed,
certified, searched and verified as the network that was saved. It is the jaxpr of
``program(leaves, x)`` traced with a symbolic batch ``(b, d_in)``, its output flattened to one
array, its equations stored with their primitives' names and parameters and rebuilt on load by
binding those primitives (:mod:`jaxcompress._jaxpr_io`); :func:`save` checks the rebuilt program
against ``small(x)`` before writing it. A program that cannot be stored so (a primitive JAX
does not list, a parameter that is a Python function) is saved without it
(``"jaxpr_why"`` says why) and runs as before; files saved before it existed load too, and the
verbs that need it say so.

:func:`load` returns a :class:`LoadedNetwork` for it: ``loaded(x)``, ``loaded.params`` (leaves
by path) and ``loaded.info``; no Python code of the original model is needed. The program takes
the stored leaves as inputs when the user's function accepts the smaller leaves (nnx, Equinox,
plain functions); otherwise (linen's ``apply`` checks shapes) it is the compressed chain with the
weights inside and the leaves are stored beside it for inspection.

The hash makes a corrupted file an error instead of a silently different model. Also readable:
``.npz`` files of the params convention (keys ``kernel_0, bias_0, kernel_1, ...``; an optional
``activation`` string entry), see :func:`load_npz`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any

import jax
import jax.numpy as jnp
import msgpack
import numpy as np

from jaxcompress import _jaxpr_io
from jaxcompress._checks import check_info_matches
from jaxcompress.activations import get_activation, registered_activations
from jaxcompress.graph import Compressed, Network, trace
from jaxcompress.graph.network import apply_fn, compressed
from jaxcompress.graph.plan import flat_output
from jaxcompress.layer import CompressInfo
from jaxcompress.mlp import Params, apply, layer_sizes, leaf_count, validate_params
from jaxcompress.protocol import NetworkLike

__all__ = ["LoadedNetwork", "info_to_dict", "load", "load_npz", "loaded_chain",
           "resolve_activation", "save", "save_npz"]

FORMAT = "jaxcompress"
VERSION = 1
#: The version of a compressed traced network's document (an MLP's stays :data:`VERSION`).
TRACED_VERSION = 2
#: Where an exported program runs: :func:`jax.export` lowers it for each.
PLATFORMS = ("cpu", "cuda")
_ZIP_MAGIC = b"PK\x03\x04"
#: First bytes of a MessagePack map (fixmap, map16, map32): what :func:`save` writes.
_MSGPACK_MAP_MARKERS = tuple(bytes([b]) for b in range(0x80, 0x90)) + (b"\xde", b"\xdf")


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedNetwork(NetworkLike):
    """What :func:`load` returns for every file: a network, ``loaded(x)``.

    A saved params list (and an ``.npz``) is a chain of dense layers: ``loaded.params`` is the
    params list, ``loaded.activation`` its activation, and the triple unpacks as before,
    ``params, activation, metadata = jc.load(path)``. A saved traced network or module runs its
    stored program (:mod:`jax.export`; no Python code of the original model is needed):
    ``loaded.params`` are the compressed leaves by path.

    Attributes:
      params: a params list (a saved params list), or the leaves by path
        (:func:`jax.tree_util.keystr` in the original pytree), in flatten order.
      metadata: the user's metadata (and the compression record, ``metadata["compression"]``).
      info: the :class:`~jaxcompress.CompressInfo` saved with it, or ``None``.
      activation: the chain's activation name (a params list, or a traced network saved with
        its chain of dense layers), else ``None``.
      exported: the :class:`jax.export.Exported` program of a traced network (``None`` for a
        params list).
      params_are_inputs: whether the program takes ``params``' leaves as inputs (else the
        weights are inside it).
      stored_sizes: ``[d_in]`` and every neuron group's width, as saved (``None`` for a file
        saved before they were stored).
      chain: the params list of its chain of dense layers with a registered activation, or
        ``None``: what :func:`jaxcompress.compress` and :func:`jaxcompress.certify` of the
        loaded network read.
      program: a traced network's stored jaxpr as ``program(params, x)`` (the leaves by path;
        one output array), or ``None``: what :func:`jaxcompress.verify` interprets and
        :func:`jaxcompress.trace` reads when the file holds no chain.
      program_why: why a traced network has no ``program`` (``""`` when it has one).
    """

    params: Any
    metadata: dict[str, Any]
    info: CompressInfo | None = None
    activation: str | None = None
    exported: Any = None
    params_are_inputs: bool = False
    stored_sizes: tuple[int, ...] | None = None
    chain: Params | None = None
    program: StoredProgram | None = None
    program_why: str = ""

    def __call__(self, x: jax.Array) -> jax.Array:
        """The network on a batch ``x`` of shape ``(n, d_in)``, any ``n``."""
        if self.exported is None:
            return apply(self.params, x, activation=self.activation)
        if self.params_are_inputs:
            return self.exported.call([_as_array(v) for v in self.params.values()], x)
        return self.exported.call(x)

    def apply(self, params, x: jax.Array) -> jax.Array:
        """``loaded(x)`` (a traced network's parameters are inside its program; ``params`` is
        ignored): the ``fn(params, x)`` form the measurements use."""
        del params
        return self(x)

    @property
    def sizes(self) -> list[int]:
        """``[d_in, d_1, ..., d_out]`` (:meth:`layer_sizes`)."""
        return self.layer_sizes()

    def layer_sizes(self) -> list[int]:
        """``[d_in]`` and every neuron group's width, as saved."""
        if self.exported is None:
            return layer_sizes(self.params)
        if self.stored_sizes is None:
            raise ValueError("layer_sizes: this file was saved before jaxcompress stored the "
                             "layer sizes of a traced network; save it again with jc.save")
        return list(self.stored_sizes)

    @property
    def input_dim(self) -> int | None:
        return None if self.exported is not None and self.stored_sizes is None else \
            self.layer_sizes()[0]

    def num_params(self) -> int:
        return leaf_count(self.params)

    def function(self):
        if self.chain is not None:   # a params list, or a traced network stored with its chain
            return apply_fn(get_activation(self.activation)), self.chain
        if self.program is not None:   # the stored jaxpr, readable by the verifier
            return self.program, self.params
        return self.apply, ()

    def readable(self, where: str) -> None:
        """Raise a ``ValueError`` naming ``where`` when the library cannot read this network's
        program (a traced network saved without its jaxpr: by an older jaxcompress, or with a
        primitive that could not be stored; ``program_why`` says which)."""
        if self.chain is None and self.program is None and self.exported is not None:
            raise ValueError(f"{where}: this saved traced network holds its program only "
                             f"exported (StableHLO), which jaxcompress cannot read: "
                             f"{self.program_why}")

    def as_network(self) -> Network:
        if self.chain is not None:
            return Network.from_params(self.chain, self.activation)
        self.readable("as_network")
        return self._traced

    @functools.cached_property
    def _traced(self) -> Network:
        """The stored jaxpr traced (once): its neuron groups."""
        spec = jax.ShapeDtypeStruct((1, self.layer_sizes()[0]), jnp.dtype(self.program.dtype))
        return trace(self.program, self.params, spec)

    def check_activation(self, activation, where: str) -> None:
        if activation is None:
            return
        if self.chain is None:
            super().check_activation(activation, where)
        if get_activation(activation).name != self.activation:
            raise ValueError(f"{where}: the file says activation {self.activation!r}; got "
                             f"activation={activation!r}")

    def compressed_as(self, net: Network, leaves: list, info, domain=None):
        """A loaded chain compresses to a params list (what a saved params list is); a traced
        network read from its stored jaxpr to a :class:`~jaxcompress.Compressed` of it."""
        del domain
        if self.chain is None:
            return compressed(net, leaves, info)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(net.params), leaves)

    def with_params(self, params) -> LoadedNetwork:
        if self.exported is not None:
            raise TypeError("with_params: a saved traced network's program holds its weights; "
                            "load its parameters into your own function instead")
        return dataclasses.replace(self, params=params, chain=params)

    def _triple(self) -> tuple:
        if self.exported is not None:
            raise TypeError("a saved traced network is not a (params, activation, metadata) "
                            "triple: call it, loaded(x), and read loaded.params and "
                            "loaded.metadata")
        return self.params, self.activation, self.metadata

    def __iter__(self):
        """``params, activation, metadata = jc.load(path)`` of a saved params list."""
        return iter(self._triple())

    def __getitem__(self, i: int):
        return self._triple()[i]


@dataclasses.dataclass(frozen=True, eq=False)
class StoredProgram:
    """``fn(params, x)`` of a saved traced network: its stored jaxpr
    (:mod:`jaxcompress._jaxpr_io`) on the leaves of ``params`` (a dict by path) and ``x``
    (``(n, d_in)`` of :attr:`dtype`, any ``n``), one output array ``(n, d_out)``."""

    rebuilt: _jaxpr_io.Rebuilt
    paths: tuple[str, ...]

    @property
    def dtype(self) -> str:
        """The dtype of ``x`` it was saved for (it takes no other: no silent cast)."""
        return self.rebuilt.in_specs[-1][1]

    def __call__(self, params, x):
        (out,) = self.rebuilt(*[_as_array(params[p]) for p in self.paths], x)
        return out


#: the Python types of leaves a traced network's file gives back as they were saved
PYTHON_LEAVES = {"bool": bool, "int": int, "float": float}


def _python_kind(leaf) -> str | None:
    """``"bool"``, ``"int"`` or ``"float"`` for a Python number among the params (a dimension,
    a frequency; NumPy scalars are arrays here), else ``None``."""
    if isinstance(leaf, np.generic):
        return None
    return next((k for k, t in PYTHON_LEAVES.items() if type(leaf) is t), None)


def _as_array(leaf):
    """A Python number as the 0-d NumPy array the stored program takes; an array as it is."""
    return np.asarray(leaf) if _python_kind(leaf) is not None else leaf


def _digest(params: list[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256()
    for i, layer in enumerate(params):
        for name in ("kernel", "bias"):
            a = np.ascontiguousarray(layer[name])
            h.update(f"{i}/{name}/{a.dtype.str}/{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _plain(obj: Any) -> Any:
    """Metadata as msgpack-friendly Python values (arrays become lists, tuples lists)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (jax.Array, np.ndarray, np.generic)):
        arr = np.asarray(obj)
        return arr.item() if arr.ndim == 0 else arr.tolist()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if dataclasses.is_dataclass(obj):
        return _plain(dataclasses.asdict(obj))
    raise TypeError(f"save: metadata value of type {type(obj).__name__} cannot be stored")


def info_to_dict(info) -> dict[str, Any]:
    """A :class:`~jaxcompress.CompressInfo` as plain values (``info.to_dict()``)."""
    return info.to_dict()


def save(
    path: str | os.PathLike,
    params: Params | NetworkLike,
    *,
    activation: str | None = None,
    metadata: dict[str, Any] | None = None,
    info=None,
    x=None,
) -> None:
    """Write ``params`` (one network) with its activation and metadata to ``path``.

    Args:
      path: the file to write (conventionally ``*.jcz``); written atomically.
      params: a params list (with ``activation=``), any dtype; stored bit-exact; or a loaded
        params list (:class:`LoadedNetwork`, its own activation). Or a traced network,
        compressed or not (a :class:`~jaxcompress.Network`,
        :class:`~jaxcompress.ModuleNetwork`, :class:`~jaxcompress.Compressed`,
        :class:`~jaxcompress.modules.CompressedModule`): its leaves
        and its program (:mod:`jax.export`, a symbolic batch dimension) are stored, and, for a
        chain of dense layers with a registered activation, the chain itself (so the command
        line can compress and certify it); see the module docstring. :func:`load` gives back a
        callable :class:`LoadedNetwork`.
      activation: its activation name (checked against the registry); required for a params
        list, refused for a traced network (its program holds its activation).
      metadata: JSON-like values: e.g. domain, orders, measured error, certificate.
      info: a :class:`~jaxcompress.CompressInfo`; stored as ``metadata["compression"]``
        (kept indices, ranks, orders, residuals). For a params list it must describe
        ``params``: its hidden widths and activation are checked (a record of another network
        is a ``ValueError``). A :class:`~jaxcompress.modules.CompressedModule` stores its own
        ``small.info`` unless another is given.
      x: optional, for a traced network: example inputs (or a :class:`jax.ShapeDtypeStruct`)
        of the width it was traced with; the program is exported for inputs ``(b, d_in)`` of the
        traced dtype, any ``b``.
    """
    if os.path.isdir(path):
        raise ValueError(f"save: path {os.fspath(path)!r} is a folder; expected a file name "
                         "(e.g. model.jcz)")
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        raise ValueError(f"save: the folder {folder!r} of path {os.fspath(path)!r} does not "
                         "exist; create it first (os.makedirs(folder, exist_ok=True))")
    if isinstance(params, LoadedNetwork):
        if params.exported is not None:
            raise TypeError("save: a loaded traced network is its file already (copy the file); "
                            "save the network you compressed, or your own function's network")
        params.check_activation(activation, "save")
        params, activation = params.params, params.activation
    if isinstance(params, NetworkLike):
        if activation is not None:
            raise ValueError(f"save: a traced network carries its activation in its "
                             f"program; expected no activation=, got {activation!r}")
        _write(path, _traced_doc(params, metadata=metadata, info=info, x=x))
        return
    if activation is None:
        raise TypeError("save: activation= is required for a params list (a registered name "
                        "such as 'tanh'); only a compressed traced network carries its own")
    if x is not None:
        raise ValueError("save: x= is for a Compressed from jc.trace; a params list knows its "
                         f"input width, got x of type {type(x).__name__}")
    act = get_activation(activation)
    params = validate_params(params, where="save")
    arrays = [{k: np.asarray(v) for k, v in layer.items()} for layer in params]
    if arrays[0]["kernel"].ndim != 2:
        raise ValueError("save: expected one network (2-D kernels), not a stack")
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"save: metadata must be a dict, got {type(metadata).__name__}")
    meta = _plain(dict(metadata or {}))
    if info is not None:
        check_info_matches(info, layer_sizes(params), act.name, "save")
        meta["compression"] = info_to_dict(info)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "activation": act.name,
        "sizes": layer_sizes(params),
        "metadata": meta,
        "params": arrays,
        "sha256": _digest(arrays),
    }
    _write(path, doc)


def _write(path: str | os.PathLike, doc: dict) -> None:
    """Serialise ``doc`` to ``path`` atomically (a temporary file renamed)."""
    from flax import serialization

    blob = serialization.msgpack_serialize(doc)
    tmp = f"{os.fspath(path)}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)  # no stray temporary file when the write or the rename fails
        raise


def _traced_digest(paths: list[str], leaves: list[np.ndarray], program: bytes,
                   python: dict[str, str] | None = None) -> str:
    h = hashlib.sha256()
    for p, a in zip(paths, leaves, strict=True):
        a = np.ascontiguousarray(a)
        h.update(f"{p}/{a.dtype.str}/{a.shape}".encode())
        h.update(a.tobytes())
    h.update(program)
    if python:   # absent from files without Python numbers: their digest is as before
        h.update(repr(sorted(python.items())).encode())
    return h.hexdigest()


def _traced_doc(obj, *, metadata, info, x) -> dict:
    """The version-2 document of a traced network (see the module docstring).

    The program is checked before it is stored: on 16 fixed inputs its output must equal
    ``small(x)`` to rounding."""
    where = "save"
    if isinstance(obj, Compressed):
        comp, info = obj, obj.info if info is None else info
    else:
        comp = Compressed(obj.params, obj.as_network())
    spec = comp.network.x
    if x is not None and (len(np.shape(x)) != 2 or np.shape(x)[1] != spec.shape[1]):
        raise ValueError(f"{where}: x must be example inputs of shape (n, {spec.shape[1]}) (the "
                         f"traced network's input width), got shape {np.shape(x)}")
    d_in, dtype = int(spec.shape[1]), jnp.dtype(spec.dtype)
    if info is not None and not isinstance(info, CompressInfo):
        raise TypeError(f"{where}: info must be a CompressInfo, got {type(info).__name__}")
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"{where}: metadata must be a dict, got {type(metadata).__name__}")
    pairs, treedef = jax.tree_util.tree_flatten_with_path(comp.params)
    # a network loaded from a file keeps that file's paths (its params are a dict by path)
    again = isinstance(comp.network.fn, StoredProgram)
    paths = [p[0].key if again else jax.tree_util.keystr(p) for p, _ in pairs]
    leaves = [np.asarray(leaf) for _, leaf in pairs]
    # Python numbers (a dimension, a frequency) are stored as 0-d arrays and given back as the
    # Python type they were
    python = {p: k for p, (_, leaf) in zip(paths, pairs, strict=True)
              if (k := _python_kind(leaf)) is not None}
    pts = jax.random.normal(jax.random.PRNGKey(0), (16, d_in), dtype)
    (b,) = jax.export.symbolic_shape("b")
    xs = jax.ShapeDtypeStruct((b, d_in), dtype)
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves]

    def with_leaves(ls, x):
        return comp.fn(jax.tree_util.tree_unflatten(treedef, ls), x)

    with jax.default_matmul_precision("highest"):
        want = np.asarray(comp(pts))
        tol = 256 * float(jnp.finfo(dtype).eps) * (1.0 + float(np.max(np.abs(want))))

        def gap(y):
            y = np.asarray(y)
            return float(np.max(np.abs(y - want))) if y.shape == want.shape else np.inf

        try:   # the user's fn on the smaller leaves, the leaves as the program's inputs
            exported = jax.export.export(jax.jit(with_leaves), platforms=PLATFORMS)(specs, xs)
            inputs = gap(exported.call(leaves, pts)) <= tol
        except Exception:  # noqa: BLE001 - fn refusing the smaller leaves (linen's apply)
            inputs = False
        if not inputs:
            exported = jax.export.export(jax.jit(comp.__call__), platforms=PLATFORMS)(xs)
            err = gap(exported.call(pts))
            if not err <= tol:
                raise RuntimeError(f"{where}: the exported program differs from small(x) by "
                                   f"{err:.3g} on 16 inputs (tolerance {tol:.2g})")
        jaxpr, why = _jaxpr_blob(comp, treedef, specs, xs, leaves, pts, want, tol)
    program = bytes(exported.serialize())
    meta = _plain(dict(metadata or {}))
    if info is not None:
        meta["compression"] = info_to_dict(info)
    doc = {"format": FORMAT, "version": TRACED_VERSION, "kind": "traced", "paths": paths,
           "leaves": leaves, "program": program, "params_are_inputs": bool(inputs),
           "d_in": d_in, "dtype": dtype.name, "metadata": meta,
           "sizes": [int(v) for v in comp.layer_sizes()], "chain": _chain_doc(comp),
           "sha256": _traced_digest(paths, leaves, program, python)}
    if python:
        doc["python_leaves"] = python
    if doc["chain"] is not None:   # what compress and certify read: never a silent change
        doc["chain_sha256"] = _digest(doc["chain"]["params"])
    if jaxpr is None:
        doc["jaxpr_why"] = why
    else:
        doc.update(jaxpr=jaxpr, jaxpr_sha256=hashlib.sha256(jaxpr).hexdigest())
    return doc


def _jaxpr_blob(comp: Compressed, treedef, specs, xs, leaves, pts, want, tol
                ) -> tuple[bytes | None, str]:
    """The program as a stored jaxpr (MessagePack bytes) and ``""``, or ``None`` and why it
    cannot be stored. The stored program is rebuilt and checked against ``small(x)`` on the
    16 inputs ``pts`` first."""
    def program(ls, x):
        return flat_output(comp.apply(jax.tree_util.tree_unflatten(treedef, ls), x), x)

    try:
        blob = msgpack.packb(_jaxpr_io.to_doc(jax.make_jaxpr(program)(specs, xs)))
        rebuilt = _jaxpr_io.rebuild(msgpack.unpackb(blob))
        (got,) = jax.jit(rebuilt)(*leaves, pts)   # one program, not one per equation
    except _jaxpr_io.Unstorable as e:
        return None, f"its program could not be stored as a jaxpr when it was saved: {e}"
    except Exception as e:  # noqa: BLE001 - the file stays usable through its exported program
        return None, (f"its program could not be stored as a jaxpr when it was saved "
                      f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    got = np.asarray(got).reshape(want.shape[0], -1)
    err = float(np.max(np.abs(got - want.reshape(want.shape[0], -1))))
    if not err <= tol:
        return None, (f"its program stored as a jaxpr differed from the network by {err:.3g} "
                      f"on 16 inputs when it was saved (tolerance {tol:.2g}), so it was left out")
    return blob, ""


def _chain_doc(comp: Compressed) -> dict | None:
    """A chain of dense layers whose activation is registered, as plain arrays (what the
    command line compresses and certifies); ``None`` for anything else."""
    act = comp.network.activation
    if act is None or act.name not in registered_activations() or get_activation(
            act.name) is not act:
        return None
    return {"activation": act.name,
            "params": [{k: np.asarray(v) for k, v in layer.items()} for layer in comp.lowered]}


#: Every field of a traced network's document (a file with another is damaged or foreign).
_TRACED_FIELDS = frozenset({
    "format", "version", "kind", "paths", "leaves", "program", "params_are_inputs", "d_in",
    "dtype", "metadata", "sizes", "chain", "chain_sha256", "sha256", "jaxpr", "jaxpr_sha256",
    "jaxpr_why", "python_leaves"})


def _load_traced(path, doc: dict) -> LoadedNetwork:
    unknown = sorted(set(doc) - _TRACED_FIELDS)
    if unknown:
        raise _bad(path, f"unknown field(s) {unknown} (damaged, or written by a newer "
                         "jaxcompress)")
    try:
        paths = [str(p) for p in _as_list(doc["paths"])]
        leaves = [np.asarray(a) for a in _as_list(doc["leaves"])]
        program = bytes(doc["program"])
        inputs = bool(doc["params_are_inputs"])
        metadata = doc.get("metadata") or {}
        python = {str(p): str(k) for p, k in (doc.get("python_leaves") or {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _bad(path, f"missing or malformed field ({e})") from None
    if len(paths) != len(leaves):
        raise _bad(path, f"{len(paths)} paths for {len(leaves)} leaves")
    if not set(python) <= set(paths) or not set(python.values()) <= set(PYTHON_LEAVES):
        raise _bad(path, f"python_leaves {python} names paths or types it has not "
                         f"(types: {sorted(PYTHON_LEAVES)})")
    if _traced_digest(paths, leaves, program, python) != doc.get("sha256"):
        raise _bad(path, "the parameters or the program do not match the stored checksum "
                         "(corrupted)")
    try:
        exported = jax.export.deserialize(bytearray(program))
    except Exception as e:  # noqa: BLE001 - a program this jax cannot read
        raise _bad(path, f"its program cannot be deserialised by jax {jax.__version__} "
                         f"({type(e).__name__}: {e})") from None
    comp = metadata.get("compression")
    info = CompressInfo.from_dict(comp) if comp is not None else None
    sizes = doc.get("sizes")
    chain, activation = doc.get("chain"), None
    if chain is not None:
        chain, activation = ([{k: np.asarray(v) for k, v in layer.items()} for layer in
                              _as_list(chain["params"])], str(chain["activation"]))
        if "chain_sha256" in doc and _digest(chain) != doc["chain_sha256"]:
            raise _bad(path, "the stored chain does not match its checksum (corrupted)")
    program, why = _load_jaxpr(path, doc, paths)
    leaves = [PYTHON_LEAVES[python[p]](a.item()) if p in python else a
              for p, a in zip(paths, leaves, strict=True)]
    return LoadedNetwork(params=dict(zip(paths, leaves, strict=True)), metadata=metadata,
                         info=info, activation=activation, exported=exported,
                         params_are_inputs=inputs,
                         stored_sizes=None if sizes is None else tuple(int(v) for v in
                                                                       _as_list(sizes)),
                         chain=chain, program=program, program_why=why)


def _load_jaxpr(path, doc: dict, paths: list[str]) -> tuple[StoredProgram | None, str]:
    """The stored jaxpr of a traced network's document, or ``None`` and why there is none."""
    blob = doc.get("jaxpr")
    if blob is None:
        return None, str(doc.get("jaxpr_why") or (
            "the file was saved by a jaxcompress that did not store the program as a jaxpr; "
            "load it with that version's jc.load, or trace the network again, and save it "
            "again with jc.save"))
    blob = bytes(blob)
    if hashlib.sha256(blob).hexdigest() != doc.get("jaxpr_sha256"):
        raise _bad(path, "the stored jaxpr does not match its checksum (corrupted)")
    try:
        rebuilt = _jaxpr_io.rebuild(msgpack.unpackb(blob))
    except ValueError as e:
        return None, f"its stored jaxpr cannot be read: {e}"
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for garbage
        raise _bad(path, f"the stored jaxpr is unreadable ({type(e).__name__}: {e})") from None
    return StoredProgram(rebuilt, tuple(paths)), ""


def _as_list(v) -> list:
    """A stored list (msgpack may restore a list of arrays as ``{"0": ...}``)."""
    return [v[k] for k in sorted(v, key=int)] if isinstance(v, dict) else list(v)


def _bad(path, why: str, where: str = "load") -> ValueError:
    return ValueError(f"{where}: {os.fspath(path)!r} is not a valid jaxcompress model file: "
                      f"{why}")


def load(path: str | os.PathLike) -> LoadedNetwork:
    """Read a file written by :func:`save` (or an ``.npz``, see :func:`load_npz`): a
    :class:`LoadedNetwork`, callable on a batch, ``jc.load(path)(x)``, whatever was saved.

    The widths come from the file, so nothing about the model needs to be known in advance.
    Arrays are returned with the dtype and bits they were saved with. A saved params list also
    unpacks as ``params, activation, metadata = jc.load(path)``.

    Raises:
      ValueError: for a truncated or corrupted file, one written by another program, or a
        newer format version, with the reason.
    """
    from flax import serialization

    with open(path, "rb") as f:
        blob = f.read()
    if blob[:4] == _ZIP_MAGIC:
        return load_npz(path)
    if not blob:
        raise _bad(path, "the file is empty")
    try:
        doc = serialization.msgpack_restore(blob)
    except Exception as e:  # msgpack raises several types for garbage input
        raise _bad(path, f"truncated or not MessagePack ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(path, "it was not written by jaxcompress.save (no 'format' marker)")
    if doc.get("version") == TRACED_VERSION and doc.get("kind") == "traced":
        return _load_traced(path, doc)
    if doc.get("version") != VERSION:
        raise _bad(path, f"format version {doc.get('version')!r}; this jaxcompress reads "
                         f"version {VERSION} (an MLP) and {TRACED_VERSION} (a traced network)")
    try:
        raw = doc["params"]
        if isinstance(raw, dict):  # msgpack may restore lists as {"0": ...}
            raw = [raw[k] for k in sorted(raw, key=int)]
        arrays = [{"kernel": np.asarray(layer["kernel"]), "bias": np.asarray(layer["bias"])}
                  for layer in raw]
        activation = doc["activation"]
        metadata = doc.get("metadata") or {}
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(path, f"missing or malformed field ({e})") from None
    if _digest(arrays) != doc.get("sha256"):
        raise _bad(path, "the parameters do not match the stored checksum (corrupted)")
    # device_put, not jnp.asarray, which compiles a copy program for every new shape
    params = validate_params([jax.device_put(layer) for layer in arrays], where="load")
    if layer_sizes(params) != list(doc.get("sizes", [])):
        raise _bad(path, "the stored sizes do not match the parameters")
    get_activation(activation)
    return loaded_chain(params, activation, metadata)


def save_npz(path: str | os.PathLike, params: Params, *, activation: str | None = None) -> None:
    """Write params as ``.npz`` with keys ``kernel_0, bias_0, ...`` (and ``activation``)."""
    params = validate_params(params, where="save_npz")
    arrays = {}
    for i, layer in enumerate(params):
        arrays[f"kernel_{i}"] = np.asarray(layer["kernel"])
        arrays[f"bias_{i}"] = np.asarray(layer["bias"])
    if activation is not None:
        arrays["activation"] = np.asarray(get_activation(activation).name)
    np.savez(path, **arrays)


def loaded_chain(params: Params, activation: str, metadata: dict) -> LoadedNetwork:
    """A loaded params list (a saved one, or an ``.npz``)."""
    comp = metadata.get("compression")
    info = CompressInfo.from_dict(comp) if isinstance(comp, dict) else None
    return LoadedNetwork(params=params, metadata=metadata, info=info, activation=activation,
                         chain=params)


def load_npz(path: str | os.PathLike, *, activation: str | None = None) -> LoadedNetwork:
    """Read an ``.npz`` of the params convention.

    Format: arrays ``kernel_0`` ``(d_in, d_1)``, ``bias_0`` ``(d_1,)``, ``kernel_1``, ... for every
    layer in order, and optionally a 0-d string array ``activation``. Other keys are an error.
    ``activation`` is needed when the file stores none; when it does, a different
    ``activation`` is an error naming both.
    """
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise _bad(path, f"unreadable .npz ({type(e).__name__}: {e})", where="load_npz") from None
    if magic != _ZIP_MAGIC:
        what = ("a jaxcompress.save file (MessagePack): read it with jc.load"
                if magic[:1] in _MSGPACK_MAP_MARKERS else "not a zip archive")
        raise _bad(path, f"expected an .npz (a zip archive of arrays); the file is {what}",
                   where="load_npz")
    try:
        with np.load(path, allow_pickle=False) as z:
            files = dict(z.items())
    except Exception as e:
        raise _bad(path, f"unreadable .npz ({type(e).__name__}: {e})") from None
    stored_act = str(files.pop("activation")) if "activation" in files else None
    n = len([k for k in files if k.startswith("kernel_")])
    expected = {f"{p}_{i}" for i in range(n) for p in ("kernel", "bias")}
    if n < 2 or set(files) != expected:
        raise _bad(path, f"expected keys kernel_0, bias_0, ..., kernel_{{L}}, bias_{{L}} "
                         f"(and optionally 'activation'); found {sorted(files)}")
    params = validate_params(
        [{"kernel": jnp.asarray(files[f"kernel_{i}"]), "bias": jnp.asarray(files[f"bias_{i}"])}
         for i in range(n)], where="load_npz")
    act = resolve_activation(stored_act, activation, f"load_npz: {os.fspath(path)!r}")
    return loaded_chain(params, act, {})


def resolve_activation(stored: str | None, given: str | None, where: str) -> str:
    """The activation of a stored model: the stored name, or ``given`` when nothing is stored.

    A ``given`` activation that differs from the stored one is an error naming both (never a
    silent replacement: the parameters were trained with the stored one).
    """
    if stored is not None:
        stored = get_activation(stored).name
        if given is not None and get_activation(given).name != stored:
            raise ValueError(f"{where} stores activation {stored!r}; the given activation "
                             f"{get_activation(given).name!r} contradicts it (leave it out to "
                             "use the stored one)")
        return stored
    if given is None:
        raise ValueError(f"{where} stores no activation; pass activation=")
    return get_activation(given).name
