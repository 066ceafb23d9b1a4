"""A JAX program as a flat list of equations: the jaxpr of ``fn(params, x)`` with its calls
inlined and its ``scan`` loops unrolled, and an evaluator for it (what
:mod:`jaxcompress.graph` analyses and :mod:`jaxcompress.driver` runs for features).

Every parameter leaf and the input are inputs of the program, numbered ``0 .. n - 1`` (the leaves
in flatten order) and ``n`` (``x``); every equation's results get the next numbers, so two
traces of a shape-polymorphic function at other shapes number their values alike
(:func:`retrace` checks it).
"""

from __future__ import annotations

import contextvars
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
from jax._src.api_util import flatten_axes
from jax._src.interpreters import partial_eval as pe

__all__ = ["CALLS", "Const", "Eqn", "Program", "RuleTable", "evaluate", "flatten", "jax_primitives",
           "line", "sub_programs", "trace_program"]

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
def _index_jaxpr(shape: tuple[int, ...], dtype, i: int):
    """``a[i]`` of an ``a`` of ``shape`` (``slice`` and ``squeeze``: what the rules read as
    slice ``i`` of a stacked leaf)."""
    return jax.make_jaxpr(lambda a: jax.lax.index_in_dim(a, i, 0, keepdims=False))(
        jax.ShapeDtypeStruct(shape, dtype))


@functools.cache
def _stack_jaxpr(shape: tuple[int, ...], dtype, n: int):
    """``n`` arrays of ``shape`` stacked along a new axis 0 (``broadcast_in_dim`` and
    ``concatenate``, primitives with rules, not ``jnp.stack``'s own)."""
    spec = jax.ShapeDtypeStruct(shape, dtype)
    return jax.make_jaxpr(lambda *a: jax.lax.concatenate(
        [jax.lax.expand_dims(v, (0,)) for v in a], 0))(*[spec] * n)


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


#: The parameter leaves (as traced) of the :func:`trace_program` under way in this context.
_PARAMS: contextvars.ContextVar = contextvars.ContextVar("jaxcompress_params", default=None)
_VMAP = jax.vmap


def _members_vmap(fun: Callable, in_axes=0, out_axes=0, *args, **kwargs) -> Callable:
    """``jax.vmap`` as :func:`trace_program` sees it: a ``vmap`` over parameter leaves along
    their axis 0 (an ensemble of stacked members: ``vmap(f, in_axes=(0, None))(params, x)``)
    runs the members one after the other, each on its slice of the stacked leaves, and stacks
    their outputs. The program then computes member ``i``'s neurons from slice ``i`` of the
    stacked kernels, as a scan's layer ``i`` (the trace keeps one width for the stack, each
    member its own neurons). Every other ``vmap`` (over ``x``, with an axis name, ...) is
    JAX's. The same function, so the user's ``fn`` runs the compressed stack with ``vmap``."""
    batched = _VMAP(fun, in_axes, out_axes, *args, **kwargs)

    @functools.wraps(fun)
    def call(*xs):
        params = _PARAMS.get()
        if params is None or args or kwargs or not isinstance(out_axes, int):
            return batched(*xs)
        flat, tree = jax.tree_util.tree_flatten(xs)
        try:
            axes = flatten_axes("vmap in_axes", tree, tuple(in_axes) if isinstance(
                in_axes, list) else (in_axes if isinstance(in_axes, tuple) else
                                     (in_axes,) * len(xs)))
        except (ValueError, TypeError):
            return batched(*xs)
        mapped = [(v, a) for v, a in zip(flat, axes, strict=True) if a is not None]
        sizes = {np.shape(v)[a] for v, a in mapped}
        if not any(id(v) in params and a == 0 for v, a in mapped) or len(sizes) != 1:
            return batched(*xs)
        outs = [fun(*jax.tree_util.tree_unflatten(tree, [
            v if a is None else jax.lax.index_in_dim(v, i, a, keepdims=False)
            for v, a in zip(flat, axes, strict=True)])) for i in range(sizes.pop())]
        return jax.tree_util.tree_map(lambda *ys: jax.numpy.stack(ys, axis=out_axes), *outs)

    return call


def _traced(fn: Callable, treedef) -> Callable:
    """``fn`` on flat leaves, with ``jax.vmap`` over its parameters unrolled
    (:func:`_members_vmap`) while it traces."""
    def run(ls, xx):
        token = _PARAMS.set(frozenset(id(v) for v in ls))
        jax.vmap = _members_vmap
        try:
            return fn(jax.tree_util.tree_unflatten(treedef, ls), xx)
        finally:
            jax.vmap = _VMAP
            _PARAMS.reset(token)
    return run


def trace_program(fn: Callable, params: Any, x, analytic_call: Callable | None = None
                  ) -> Program:
    """The :class:`Program` of ``fn(params, x)`` (``params`` and ``x`` may be abstract; see
    :func:`flatten` for ``analytic_call``; a ``jax.vmap`` over stacked parameters runs its
    members one by one: :func:`_members_vmap`)."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    specs = [jax.ShapeDtypeStruct(np.shape(v), _dtype(v)) for v in leaves]
    x_spec = jax.ShapeDtypeStruct(np.shape(x), x.dtype)
    closed = jax.make_jaxpr(_traced(fn, treedef))(specs, x_spec)
    n = len(leaves)
    eqns: list[Eqn] = []
    links: list = []
    # dead code removed first: a scan's per-iteration outputs that nothing reads (the ys of
    # a scan used for its carry) would otherwise be stacked, and pin what they stack
    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    outs = flatten(jaxpr, closed.consts, list(range(n + 1)), eqns, [n],
                   analytic_call=analytic_call, links=links)
    return Program(tuple(eqns), tuple(outs), n, tuple(links))


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
