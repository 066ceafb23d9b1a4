"""A JAX program as a flat list of equations: the jaxpr of ``fn(params, x)`` with its calls
inlined, its ``scan`` loops unrolled and its ensembles (a ``vmap`` over stacked parameters, read
from the batched equations it leaves: :func:`_members`) split member by member, and an
evaluator for it (what :mod:`jaxcompress.graph` analyses and :mod:`jaxcompress.driver` runs for
features). Nothing of JAX is replaced while ``fn`` traces.

Every parameter leaf and the input are inputs of the program, numbered ``0 .. n - 1`` (the leaves
in flatten order) and ``n`` (``x``); every equation's results get the next numbers, so two
traces of a shape-polymorphic function at other shapes number their values alike
(:func:`retrace` checks it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend
import numpy as np
from jax._src import core as jax_core
from jax._src import source_info_util
from jax._src.interpreters import partial_eval as pe

__all__ = ["CALLS", "Const", "Eqn", "Program", "RuleTable", "evaluate", "flatten", "jax_primitives",
           "keep_numbers", "line", "static_leaf", "sub_programs", "trace_program"]

# ------------------------------------------------------------------------------------------------
# The flat program: the jaxpr with its calls inlined
# ------------------------------------------------------------------------------------------------

#: Call primitives (a sub-program run once, as it is), and the parameter that holds it: the
#: front end's one list of them (:func:`flatten` inlines them; the stored jaxpr of a saved
#: network, :mod:`jaxcompress._jaxpr_io`, rebuilds them as calls).
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
          "custom_vjp_call_jaxpr": "fun_jaxpr", "checkpoint": "jaxpr", "remat": "jaxpr",
          "remat2": "jaxpr"}


@functools.cache
def jax_primitives() -> dict[str, Any]:
    """JAX's primitives by name (:mod:`jax.extend.core.primitives`)."""
    table: dict[str, Any] = {}
    for value in vars(jax.extend.core.primitives).values():
        if isinstance(value, jax.extend.core.Primitive):
            table.setdefault(value.name, value)
    return table


class RuleTable(dict):
    """The rules of one interpretation of programs, keyed by primitive: JAX keeps one table
    per transformation (batching, jvp, transpose), the library one per interpretation (the
    trace's :data:`jaxcompress.graph.rules.RULES`, the verifier's
    :data:`jaxcompress.verification.rules.bound_rules`), both reading the programs through
    :func:`flatten`.

    Keys are primitive objects (``jax.lax.tanh_p``). A rule registered by name is keyed by
    JAX's primitive of that name when there is one, else by the name (a primitive that is not
    at hand as an object: a user's own, or one this JAX lacks); :meth:`lookup` finds either.
    """

    def __init__(self, interpretation: str):
        super().__init__()
        self.interpretation = interpretation

    @staticmethod
    def key(primitive) -> Any:
        """The key of a primitive object (itself) or of a name (JAX's primitive, or the name)."""
        if isinstance(primitive, str):
            return jax_primitives().get(primitive, primitive)
        return primitive

    def lookup(self, primitive) -> Any:
        """The entry of a primitive (an object or a name), or None."""
        entry = self.get(self.key(primitive))
        if entry is None and not isinstance(primitive, str):
            entry = self.get(primitive.name)
            if entry is None:
                entry = self.get(self.key(primitive.name))
        return entry


@dataclasses.dataclass(frozen=True)
class Const:
    """A value known at trace time (a literal or a closed-over constant)."""

    value: np.ndarray


@dataclasses.dataclass(frozen=True)
class Eqn:
    """One equation of the flat program: operands are value ids (ints) or :class:`Const`."""

    primitive: Any
    ins: tuple
    outs: tuple[int, ...]
    params: dict
    line: str
    in_shapes: tuple[tuple[int, ...], ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()
    call: str = ""
    out_dtypes: tuple[str, ...] = ()

    @property
    def benign(self) -> bool:
        """Inside a ``custom_jvp`` call that is a registered analytic activation."""
        return bool(self.call)

    @property
    def name(self) -> str:
        return self.primitive.name


#: Packages whose frames are never "the user's line": a module library's ``Linear`` or
#: ``Dense`` is where the op is written, the user's model is where it is used.
LIBRARY_PACKAGES = ("jax", "jaxlib", "flax", "equinox", "optax", "jaxcompress")


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    dirs = []
    for name in LIBRARY_PACKAGES:
        spec = importlib.util.find_spec(name)
        for loc in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.join(os.path.realpath(loc), ""))
    return tuple(dirs)


def _is_library(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_library_dirs())


def line(eqn) -> str:
    """The user's source line of an equation: the innermost frame outside JAX, Flax, Equinox,
    optax and this library (JAX's own filter first; the first frame it keeps when every one is
    a library's)."""
    try:
        frames = list(source_info_util.user_frames(eqn.source_info.traceback))
    except Exception:  # noqa: BLE001 - source info is best effort; the op is still named
        return ""
    for frame in frames:
        if not _is_library(frame.file_name):
            return source_info_util._summarize_frame(frame)
    return source_info_util._summarize_frame(frames[0]) if frames else ""


def flatten(jaxpr, consts: Sequence, args: Sequence, out: list[Eqn], counter: list[int],
            where: str = "", *, call: str = "",
            analytic_call: Callable | None = None, links: list | None = None,
            keep: Callable | None = None) -> list:
    """Append ``jaxpr``'s equations to ``out`` (calls inlined); returns its outputs' operands.

    An inlined equation without a user frame of its own (the inside of ``jax.nn.relu``) gets the
    line of the call it came from, ``where``. ``analytic_call(jaxpr, consts, operands)`` says
    the registered analytic activation a ``custom_jvp_call`` of one traced operand computes
    (e.g. ``"softplus"`` for ``jax.nn.softplus``, whose stable form uses ``max`` and ``abs``),
    or ``None``: its equations are then tagged ``call = "<name>#<id>"`` (their kinks cancel).
    A ``scan`` is unrolled (:func:`_unroll`); ``links`` collects, per carry of each, its
    operand before the first and after every iteration (one shape: they keep one width).
    ``keep(eqn)`` says a call equation stays one equation (an interpretation with a rule for
    the whole call: the verifier's known functions); every other call is inlined.

    This is the one reader of sub-programs for every interpretation (the trace's and the
    verifier's): calls are inlined, a ``scan`` (hence a ``fori_loop`` with a static trip count)
    runs iteration by iteration, and every other primitive that carries a sub-program
    (``cond``, ``while``, ...) stays one equation, for each interpretation to handle or refuse
    by name (:func:`sub_programs` finds them).
    """
    env: dict = {}

    def read(v):
        if isinstance(v, jax_core.Literal):
            return Const(np.asarray(v.val))
        return env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = c if isinstance(c, (int, Const)) else Const(np.asarray(c))
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        if eqn.primitive.name == "scan" and eqn.params["length"] > 0:
            res = _unroll(eqn, ins, out, counter, line(eqn) or where, call=call,
                          analytic_call=analytic_call, links=links, keep=keep)
            for v, r in zip(eqn.outvars, res, strict=True):
                env[v] = r
            continue
        sub = eqn.params.get(CALLS.get(eqn.primitive.name, ""))
        if sub is not None and not (keep is not None and keep(eqn)):
            inner, inner_consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
            inner_call = call
            if not call and analytic_call is not None and eqn.primitive.name == "custom_jvp_call":
                name = analytic_call(inner, inner_consts, ins)
                inner_call = f"{name}#{counter[0]}" if name else ""
            res = flatten(inner, inner_consts, ins, out, counter, line(eqn) or where,
                          call=inner_call, analytic_call=analytic_call, links=links, keep=keep)
            for v, r in zip(eqn.outvars, res, strict=True):
                env[v] = r
            continue
        outs = []
        for v in eqn.outvars:
            counter[0] += 1
            env[v] = counter[0]
            outs.append(counter[0])
        shapes = tuple(tuple(getattr(v.aval, "shape", ())) for v in eqn.invars)
        out_shapes = tuple(tuple(getattr(v.aval, "shape", ())) for v in eqn.outvars)
        dtypes = tuple(str(getattr(v.aval, "dtype", "")) for v in eqn.outvars)
        out.append(Eqn(eqn.primitive, tuple(ins), tuple(outs), dict(eqn.params),
                        line(eqn) or where or "unknown line", shapes, out_shapes, call, dtypes))
    return [read(v) for v in jaxpr.outvars]


def sub_programs(eqn) -> list:
    """The sub-programs (closed or open jaxprs) an equation carries in its parameters: the
    body of a loop, the branches of a ``cond``, a call's function (empty for a primitive)."""
    found = []
    for value in eqn.params.values():
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, (jax_core.ClosedJaxpr, jax_core.Jaxpr)):
                found.append(v)
    return found


@functools.cache
def _index_jaxpr(shape: tuple[int, ...], dtype, i: int, axis: int = 0):
    """Slice ``i`` of an ``a`` of ``shape`` along ``axis`` (``slice`` and ``squeeze``: along
    axis 0, what the rules read as slice ``i`` of a stacked leaf)."""
    return jax.make_jaxpr(lambda a: jax.lax.index_in_dim(a, i, axis, keepdims=False))(
        jax.ShapeDtypeStruct(shape, dtype))


@functools.cache
def _stack_jaxpr(shape: tuple[int, ...], dtype, n: int):
    """``n`` arrays of ``shape`` stacked along a new axis 0 (``broadcast_in_dim`` and
    ``concatenate``, primitives with rules, not ``jnp.stack``'s own)."""
    spec = jax.ShapeDtypeStruct(shape, dtype)
    return jax.make_jaxpr(lambda *a: jax.lax.concatenate(
        [jax.lax.expand_dims(v, (0,)) for v in a], 0))(*[spec] * n)


@functools.cache
def _join_jaxpr(shape: tuple[int, ...], dtype, n: int, axis: int):
    """The members of an ensemble, ``n`` arrays of ``shape``, joined along a new axis
    ``axis`` by ``jnp.stack`` (for an operation over the members: their mean)."""
    spec = jax.ShapeDtypeStruct(shape, dtype)
    return jax.make_jaxpr(lambda *a: jax.numpy.stack(a, axis))(*[spec] * n)


def _inline(closed, args: Sequence, out: list[Eqn], counter: list[int], where: str) -> list:
    """The operands of ``closed`` applied to ``args``: folded when every one is a constant,
    else its equations appended to ``out``."""
    if all(isinstance(a, Const) for a in args):
        res = jax_core.eval_jaxpr(closed.jaxpr, closed.consts, *[a.value for a in args])
        return [Const(np.asarray(r)) for r in res]
    start = len(out)
    res = flatten(closed.jaxpr, closed.consts, args, out, counter, where)
    out[start:] = [dataclasses.replace(e, line=where) for e in out[start:]]   # the scan's line
    return res


def _unroll(eqn, ins: Sequence, out: list[Eqn], counter: list[int], where: str, *, call: str,
            analytic_call: Callable | None, links: list | None,
            keep: Callable | None = None) -> list:
    """A ``scan`` read as its iterations: the body inlined ``length`` times, iteration ``i``
    reading slice ``i`` of every scanned operand (``xs``: a stacked parameter leaf gives its
    layer ``i``), the carry threaded through, the per-iteration outputs (``ys``) stacked."""
    p = eqn.params
    body, length = p["jaxpr"], int(p["length"])
    n_c, n_k = p["num_consts"], p["num_carry"]
    consts, carry = list(ins[:n_c]), list(ins[n_c:n_c + n_k])
    xs = list(zip(ins[n_c + n_k:], [v.aval for v in eqn.invars[n_c + n_k:]], strict=True))
    ys: dict[int, list] = {}
    chain = [list(carry)]
    for i in (range(length - 1, -1, -1) if p["reverse"] else range(length)):
        xi = [_inline(_index_jaxpr(tuple(aval.shape), aval.dtype, i), [x], out, counter,
                      where)[0] for x, aval in xs]
        res = flatten(body.jaxpr, body.consts, consts + carry + xi, out, counter, where,
                      call=call, analytic_call=analytic_call, links=links, keep=keep)
        carry, ys[i] = list(res[:n_k]), list(res[n_k:])
        chain.append(carry)
    if links is not None:
        links += [tuple(step[c] for step in chain) for c in range(n_k)]
    stacked = []
    for j, v in enumerate(body.jaxpr.outvars[n_k:]):
        closed = _stack_jaxpr(tuple(v.aval.shape), v.aval.dtype, length)
        stacked += _inline(closed, [ys[i][j] for i in range(length)], out, counter, where)
    return carry + stacked


@dataclasses.dataclass(frozen=True)
class Program:
    """The flat program of ``fn(params, x)`` at one set of shapes.

    Attributes:
      eqns: the equations (calls inlined).
      outs: the outputs' operands (value ids or :class:`Const`).
      n_leaves: the number of parameter leaves (value ``n_leaves`` is ``x``).
      links: per carry of an unrolled ``scan``, its operands before the first and after every
        iteration (they have one shape, so their neuron groups keep one width).
    """

    eqns: tuple[Eqn, ...]
    outs: tuple
    n_leaves: int
    links: tuple = ()

    def signature(self) -> tuple[str, ...]:
        """The primitives in order (equal for two traces of one program at other shapes)."""
        return tuple(e.name for e in self.eqns)


def _dtype(v):
    """A leaf's dtype (a Python scalar leaf, a step counter, traces as its JAX type)."""
    return v.dtype if hasattr(v, "dtype") else jax.numpy.result_type(v)


# ------------------------------------------------------------------------------------------------
# Ensembles: a batched program read member by member
# ------------------------------------------------------------------------------------------------

class _Axes:
    """Union-find over the axes ``(value, axis)`` of a flat program: two axes are one class
    when an equation carries one into the other entry for entry (an elementwise operation,
    a transpose, a broadcast, a matrix product's batch and free axes)."""

    def __init__(self):
        self.parent: dict = {}

    def find(self, k):
        self.parent.setdefault(k, k)
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a, b) -> None:
        self.parent[self.find(a)] = self.find(b)


#: Primitives that act along one axis (``axis`` / ``dimension`` / ``dimensions``), whatever
#: their shapes: never read as elementwise.
_ALONG = {"cumsum": "axis", "cumprod": "axis", "cummax": "axis", "cummin": "axis",
          "cumlogsumexp": "axis", "rev": "dimensions", "sort": "dimension"}
_REDUCE = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
           "reduce_or", "argmax", "argmin")


def _elementwise_shapes(e: Eqn) -> bool:
    """Equal output shapes, every operand a scalar or of their rank with each axis equal or
    1 (an implicit broadcast): an elementwise equation (no sub-program, no axis parameter)."""
    if not e.out_shapes or len(set(e.out_shapes)) != 1 or e.name in _ALONG or sub_programs(e):
        return False
    out = e.out_shapes[0]
    return all(s == () or (len(s) == len(out) and all(a in (b, 1) for a, b in zip(
        s, out, strict=True))) for s in e.in_shapes)


def _axis_map(e: Eqn) -> list[tuple[int, int, int, int]]:
    """``(operand, axis, output, axis)`` for every operand axis that equation ``e`` carries
    into an output axis entry for entry (same size, same order of entries)."""
    p, ins, outs = e.params, e.in_shapes, e.out_shapes
    pairs: list[tuple[int, int, int, int]] = []
    name = e.name
    if name == "dot_general":
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        lfree = [d for d in range(len(ins[0])) if d not in lc and d not in lb]
        rfree = [d for d in range(len(ins[1])) if d not in rc and d not in rb]
        pairs += [(0, a, 0, i) for i, a in enumerate(lb)] + [(1, b, 0, i)
                                                             for i, b in enumerate(rb)]
        pairs += [(0, a, 0, len(lb) + i) for i, a in enumerate(lfree)]
        pairs += [(1, b, 0, len(lb) + len(lfree) + i) for i, b in enumerate(rfree)]
    elif name == "broadcast_in_dim" and len(ins) == 1:
        pairs += [(0, d, 0, b) for d, b in enumerate(p["broadcast_dimensions"])
                  if ins[0][d] == outs[0][b]]
    elif name == "transpose":
        pairs += [(0, a, 0, i) for i, a in enumerate(p["permutation"])]
    elif name in _REDUCE or name == "squeeze":
        gone = set(p["axes"] if name in _REDUCE else p["dimensions"])
        kept = [d for d in range(len(ins[0])) if d not in gone]
        pairs += [(0, d, 0, i) for i, d in enumerate(kept)]
    elif name == "reshape" and len(ins) == 1 and p.get("dimensions") is None:
        old, new = ins[0], outs[0]
        for d in range(len(old)):        # an axis kept whole: same start, same size
            for b in range(len(new)):
                if (old[d] == new[b] and old[d] != 1
                        and int(np.prod(old[:d])) == int(np.prod(new[:b]))):
                    pairs.append((0, d, 0, b))
    elif name in ("concatenate", "split"):
        dim = p["dimension" if name == "concatenate" else "axis"]
        pairs += [(k, d, j, d) for k in range(len(ins)) for j in range(len(outs))
                  for d in range(len(ins[k])) if d != dim]
    elif name in ("slice", "pad"):
        pairs += [(0, d, 0, d) for d in range(len(ins[0])) if ins[0][d] == outs[0][d]]
    elif name in _ALONG and len(ins) == 1:
        pairs += [(0, d, 0, d) for d in range(len(ins[0]))]
    elif _elementwise_shapes(e):
        pairs += [(k, d, j, d) for k, s in enumerate(ins) if s
                  for j in range(len(outs)) for d in range(len(s)) if s[d] == outs[j][d]]
    return pairs


def _member_classes(eqns: Sequence[Eqn], n_leaves: int, x_rank: int, shapes: dict):
    """The classes of axes that are the members of an ensemble, and the axis of each value
    along them (at most one per value).

    A ``vmap`` over stacked parameters (``jax.vmap``, ``nnx.vmap``, ``eqx.filter_vmap``: one
    transformation in the jaxpr, whatever its name) leaves a matrix product with a batch
    dimension whose class of axes holds an axis of a parameter leaf: the members. The same
    class holds the members' axis in every value the members compute (their hidden values,
    their per-member biases, the cotangents of a derivative taken inside each member). A
    batch dimension whose class holds the input's coordinates (an einsum batched over them,
    as a KAN's per-edge functions) is no ensemble, and neither is one over no leaf."""
    axes = _Axes()
    batch_roots = []
    for e in eqns:
        for k, a, j, b in _axis_map(e):
            if not isinstance(e.ins[k], Const):
                axes.union((e.ins[k], a), (e.outs[j], b))
        if e.name == "dot_general" and e.params["dimension_numbers"][1][0]:
            lb = e.params["dimension_numbers"][1][0]
            if not isinstance(e.ins[0], Const):
                batch_roots += [(e.ins[0], d) for d in lb]
    roots = {axes.find(k) for k in batch_roots}
    members: dict = {}
    for k in list(axes.parent):
        members.setdefault(axes.find(k), []).append(k)
    chosen = {}
    for r in roots:
        keys = members.get(r, [])
        on_leaves = [(v, a) for v, a in keys if v < n_leaves]
        coordinates = (n_leaves, x_rank - 1) in keys
        if on_leaves and not coordinates and all(a == 0 for _, a in on_leaves):
            chosen[r] = shapes[on_leaves[0][0]][0]
    axis_of: dict[int, tuple[Any, int]] = {}
    several: set[int] = set()
    for r in chosen:
        for v, a in members[r]:
            if v in axis_of:
                several.add(v)
            axis_of[v] = (r, a)
    for v in several:       # a member of a member (nested ensembles): kept whole
        del axis_of[v]
    return axis_of, {r: int(s) for r, s in chosen.items()}


def _drop(seq, i: int) -> tuple:
    return tuple(s for j, s in enumerate(seq) if j != i)


def _renumber(dims, i: int) -> tuple:
    """Axis numbers of a value once its axis ``i`` is gone (``i`` itself must not be among
    them)."""
    return tuple(int(d) - (int(d) > i) for d in dims)


def _member_params(e: Eqn, a: list, b: int) -> dict | None:
    """The parameters of one member's copy of ``e``, whose operand ``k`` has its members
    along axis ``a[k]`` (``None``: none) and whose outputs along ``b``; ``None`` when ``e``
    mixes the members (a reduction over them) or is not read member by member here."""
    p = dict(e.params)
    name = e.name
    if name == "dot_general":
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        al, ar = a[0], a[1]
        if (al is not None and al in lc) or (ar is not None and ar in rc):
            return None
        if al is not None and ar is not None:
            if al not in lb or ar not in rb or list(lb).index(al) != list(rb).index(ar):
                return None
        elif (al is not None and al in lb) or (ar is not None and ar in rb):
            return None
        drop_l = (lambda ds: _renumber([d for d in ds if d != al], al)) if al is not None \
            else tuple
        drop_r = (lambda ds: _renumber([d for d in ds if d != ar], ar)) if ar is not None \
            else tuple
        p["dimension_numbers"] = ((drop_l(lc), drop_r(rc)), (drop_l(lb), drop_r(rb)))
        return p
    if name == "broadcast_in_dim":
        if len(e.ins) != 1:
            return None
        dims = tuple(p["broadcast_dimensions"])
        if a[0] is not None:
            if dims[a[0]] != b:
                return None
            dims = _drop(dims, a[0])
        p["broadcast_dimensions"] = _renumber(dims, b)
        p["shape"] = _drop(p["shape"], b)
        return p
    if name == "reshape":
        if a[0] is None or p.get("dimensions") is not None or len(e.ins) != 1:
            return None
        p["new_sizes"] = _drop(p["new_sizes"], b)
        return p
    if name == "transpose":
        perm = tuple(p["permutation"])
        if perm[b] != a[0]:
            return None
        p["permutation"] = _renumber(_drop(perm, b), a[0])
        return p
    if name in _REDUCE or name == "squeeze":
        key = "axes" if name in _REDUCE else "dimensions"
        if a[0] is None or a[0] in p[key]:
            return None
        p[key] = _renumber(p[key], a[0])
        return p
    if name in ("concatenate", "split"):
        key = "dimension" if name == "concatenate" else "axis"
        if p[key] == b:
            return None
        p[key] = int(p[key]) - (int(p[key]) > b)
        if name == "split" and any(ai is None for ai in a):
            return None
        return p
    if name in ("slice", "pad"):
        if a[0] is None or a[0] != b:
            return None
        if name == "pad":
            if tuple(p["padding_config"][b]) != (0, 0, 0):
                return None
            p["padding_config"] = _drop(p["padding_config"], b)
            return p
        if p.get("strides") is not None:
            p["strides"] = _drop(p["strides"], b)
        p["start_indices"] = _drop(p["start_indices"], b)
        p["limit_indices"] = _drop(p["limit_indices"], b)
        return p
    if name in _ALONG:
        key = _ALONG[name]
        if len(e.ins) != 1 or a[0] is None:
            return None
        dims = p[key] if isinstance(p[key], (tuple, list)) else (p[key],)
        if b in dims:
            return None
        new = _renumber(dims, b)
        p[key] = new if isinstance(p[key], (tuple, list)) else new[0]
        return p
    if _elementwise_shapes(e):
        return p
    return None


def _members(prog: Program, shapes: dict, dtypes: dict, x_rank: int,
             counter: list[int]) -> Program:
    """``prog`` with every ensemble read member by member (:func:`_member_classes`).

    An equation over the members' stacked values becomes one equation per member on its
    slices (the members' axis removed from its shapes and parameters), as a ``scan``'s body
    is read once per iteration (:func:`_unroll`): member ``i`` reads slice ``i`` of every
    stacked parameter leaf (``slice`` and ``squeeze`` along axis 0, the reading of a scan's
    layer ``i``), so each member's neurons are groups of their own, and the stack keeps one
    width. An equation that mixes the members (the ensemble's mean) runs on the members
    stacked again. The program computes what it did: only its equations are split."""
    n = prog.n_leaves
    axis_of, sizes = _member_classes(prog.eqns, n, x_rank, shapes)
    if not sizes:
        return prog
    out: list[Eqn] = []
    parts: dict[int, list] = {}
    whole: dict[int, Any] = {v: v for v in range(n + 1)}
    cut: dict[tuple, Any] = {}

    def inline(closed, args, where: str):
        start = len(out)
        res = _inline(closed, args, out, counter, where)
        for e in out[start:]:
            for o, s, d in zip(e.outs, e.out_shapes, e.out_dtypes, strict=True):
                shapes[o], dtypes[o] = s, d
        return res[0]

    def whole_of(v, where: str = ""):
        if isinstance(v, Const):
            return v
        if v not in whole:
            root, ax = axis_of[v]
            shape = list(shapes[v])
            del shape[ax]
            closed = _join_jaxpr(tuple(shape), dtypes[v], len(parts[v]), ax)
            whole[v] = inline(closed, parts[v], where)
        return whole[v]

    def member(v, i: int, ax: int, where: str):
        """Member ``i`` of operand ``v`` whose members run along its axis ``ax`` (an operand
        of size 1 there, an implicit broadcast, gives its one slice)."""
        if not isinstance(v, Const) and v in parts and axis_of.get(v, (None, -1))[1] == ax:
            return parts[v][i]
        if isinstance(v, Const):
            value = np.asarray(v.value)
            return Const(np.take(value, min(i, value.shape[ax] - 1), axis=ax))
        j = min(i, shapes[v][ax] - 1)
        if (v, j, ax) not in cut:
            closed = _index_jaxpr(tuple(shapes[v]), dtypes[v], j, ax)
            cut[(v, j, ax)] = inline(closed, [whole_of(v, where)], where)
        return cut[(v, j, ax)]

    for e in prog.eqns:
        roots = {axis_of[o][0] for o in e.outs if o in axis_of}
        b_axes = {axis_of[o][1] for o in e.outs if o in axis_of}
        a = [axis_of[v][1] if not isinstance(v, Const) and v in axis_of
             and axis_of[v][0] in roots else None for v in e.ins]
        params = None
        if (len(roots) == 1 and len(b_axes) == 1 and all(o in axis_of for o in e.outs)
                and all(axis_of[v][0] in roots for v in e.ins
                        if not isinstance(v, Const) and v in axis_of)):
            b = b_axes.pop()
            params = _member_params(e, a, b)
        if params is None:
            ins = tuple(whole_of(v, e.line) for v in e.ins)
            outs = []
            for o, s, d in zip(e.outs, e.out_shapes, e.out_dtypes, strict=True):
                counter[0] += 1
                whole[o] = counter[0]
                outs.append(counter[0])
                shapes[counter[0]], dtypes[counter[0]] = s, d
            out.append(dataclasses.replace(e, ins=ins, outs=tuple(outs)))
            continue
        size = sizes[roots.pop()]
        elementwise = e.name not in ("dot_general", "broadcast_in_dim", "transpose",
                                     "reshape", "squeeze") and e.name not in _REDUCE
        for o in e.outs:
            parts[o] = []
        for i in range(size):
            ins = []
            for v, ax in zip(e.ins, a, strict=True):
                if ax is not None:
                    ins.append(member(v, i, ax, e.line))
                elif elementwise and (np.shape(v.value) if isinstance(v, Const)
                                      else shapes[v]) not in ((),):
                    ins.append(member(v, i, b, e.line))     # broadcast along the members
                else:
                    ins.append(whole_of(v, e.line))
            in_shapes = tuple(tuple(np.shape(v.value)) if isinstance(v, Const) else
                              tuple(shapes[v]) for v in ins)
            outs = []
            for o in e.outs:
                counter[0] += 1
                outs.append(counter[0])
                parts[o].append(counter[0])
            out_shapes = tuple(_drop(s, b) for s in e.out_shapes)
            for o, s, d in zip(outs, out_shapes, e.out_dtypes or ("",) * len(outs),
                               strict=True):
                shapes[o], dtypes[o] = s, d
            out.append(dataclasses.replace(
                e, ins=tuple(ins), outs=tuple(outs), params=params, in_shapes=in_shapes,
                out_shapes=out_shapes, call=f"{e.call}/{i}" if e.call else ""))
    outs = tuple(whole_of(v) for v in prog.outs)
    links = tuple(tuple(whole[v] if not isinstance(v, Const) else v for v in link)
                  for link in prog.links if all(isinstance(v, Const) or v in whole
                                                for v in link))
    return Program(tuple(out), outs, n, links)



def static_leaf(v) -> bool:
    """A Python number among the parameters (a PINN's dimension, a frequency): it reaches
    ``fn`` as the number it is (``range(p["depth"])`` works), is never traced and never
    compressed."""
    return isinstance(v, (bool, int, float, complex)) and not isinstance(v, np.generic)


def keep_numbers(fn: Callable, params: Any) -> Callable:
    """``fn`` that always sees the Python numbers of ``params`` as the numbers they are.

    A ``jax.jit`` of ``fn`` (the compressed network's call, the polishing loop) traces every
    leaf it is given, numbers too; the returned function puts back, for each leaf of
    ``params`` that is a Python number (:func:`static_leaf`), that number wherever it now
    receives something else in its place (a tracer of it), so ``range(p["depth"])`` runs under
    ``jit``. Such leaves are never compressed, so the number is the one ``fn`` was traced
    with. ``fn`` itself when ``params`` has no Python numbers."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    fixed = {i: v for i, v in enumerate(leaves) if static_leaf(v)}
    if not fixed:
        return fn

    @functools.wraps(fn)
    def run(p, x):
        got, tree = jax.tree_util.tree_flatten(p)
        if tree == treedef:
            got = [fixed[i] if i in fixed and not static_leaf(v) else v
                   for i, v in enumerate(got)]
        return fn(jax.tree_util.tree_unflatten(tree, got), x)

    return run


def trace_program(fn: Callable, params: Any, x, analytic_call: Callable | None = None
                  ) -> Program:
    """The :class:`Program` of ``fn(params, x)`` (``params`` and ``x`` may be abstract; see
    :func:`flatten` for ``analytic_call``).

    Python numbers among the leaves reach ``fn`` as themselves (:func:`static_leaf`); their
    value ids are never read. An ensemble (a ``vmap`` over stacked parameters, however it is
    called) is read member by member from the jaxpr (:func:`_members`): nothing of JAX is
    replaced while ``fn`` traces."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    traced = [i for i, v in enumerate(leaves) if not static_leaf(v)]
    specs = [jax.ShapeDtypeStruct(np.shape(leaves[i]), _dtype(leaves[i])) for i in traced]
    x_spec = jax.ShapeDtypeStruct(np.shape(x), x.dtype)

    def run(arrays, xx):
        full = list(leaves)
        for i, a in zip(traced, arrays, strict=True):
            full[i] = a
        return fn(jax.tree_util.tree_unflatten(treedef, full), xx)

    closed = jax.make_jaxpr(run)(specs, x_spec)
    n = len(leaves)
    eqns: list[Eqn] = []
    links: list = []
    # dead code removed first: a scan's per-iteration outputs that nothing reads (the ys of
    # a scan used for its carry) would otherwise be stacked, and pin what they stack
    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    counter = [n]
    outs = flatten(jaxpr, closed.consts, traced + [n], eqns, counter,
                   analytic_call=analytic_call, links=links)
    prog = Program(tuple(eqns), tuple(outs), n, tuple(links))
    shapes: dict = {i: tuple(np.shape(v)) for i, v in enumerate(leaves)}
    dtypes: dict = {i: _dtype(v) for i, v in enumerate(leaves)}
    shapes[n], dtypes[n] = tuple(x_spec.shape), x_spec.dtype
    for e in eqns:
        for o, s, d in zip(e.outs, e.out_shapes, e.out_dtypes, strict=True):
            shapes[o], dtypes[o] = s, d
    return _members(prog, shapes, dtypes, len(x_spec.shape), counter)


def evaluate(program: Program, leaves: Sequence, x, want: Sequence[int]) -> dict[int, Any]:
    """The values ``want`` (ids) of ``program`` on ``leaves`` and ``x`` (traceable: every
    equation is bound again; evaluation stops after the last wanted value)."""
    env: dict[int, Any] = dict(enumerate(leaves))
    env[program.n_leaves] = x
    last = max(want, default=-1)
    for eqn in program.eqns:
        if min(eqn.outs, default=last + 1) > last:
            break
        args = [o.value if isinstance(o, Const) else env[o] for o in eqn.ins]
        res = eqn.primitive.bind(*args, **eqn.params)
        res = res if eqn.primitive.multiple_results else [res]
        env.update(zip(eqn.outs, res, strict=True))
    return {w: env[w] for w in want}
