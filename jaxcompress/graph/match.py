"""A traced group's activation: a registered one it equals, or one built from its program.

Compressing never writes the activation registry: a chain whose activation matches no registered
one gets an :class:`~jaxcompress.activations.Activation` of its own (its Taylor series from
:mod:`jax.experimental.jet`), held by its network.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import (
    Activation,
    _try_jet_series,
    get_activation,
    make_activation,
    registered_activations,
)
from jaxcompress.features import DerivativeFeatures
from jaxcompress.graph.rules import entire
from jaxcompress.graph.values import Group
from jaxcompress.program import Const, Eqn, flatten

__all__ = ["MATCH_GRID", "analytic_call", "chain_activation", "match_activation",
           "refuse_kinks"]

#: Where the traced activation is compared with the registered ones.
MATCH_GRID = np.concatenate([np.linspace(-6.0, 6.0, 241), [-20.0, -11.0, 11.0, 20.0]])


@functools.lru_cache(maxsize=128)
def _registered_program(fn: Callable, dtype) -> tuple[list[Eqn], list]:
    """A registered activation ``fn`` traced on :data:`MATCH_GRID` and flattened (once per
    function and dtype: every match compares with all of them): its equations and outputs."""
    flat: list[Eqn] = []
    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct(MATCH_GRID.shape, dtype))
    outs = flatten(closed.jaxpr, closed.consts, [0], flat, [0])
    return flat, outs


def _primitive_names(fn: Callable, dtype) -> tuple[str, ...]:
    """The sorted primitives of a registered activation ``fn``."""
    flat, _ = _registered_program(fn, dtype)
    return tuple(sorted(e.name for e in flat if e.name not in ("copy", "copy_p")))


def _canonical(eqns, out) -> tuple | None:
    """An elementwise program as a hashable value: per equation its primitive, parameters (by
    ``repr``) and operands (``("n", i)``: node ``i``, node 0 the input ``u``; ``("c", values)``:
    a constant), copies skipped, and the node it returns. ``eqns`` are ``(primitive, params,
    operands)`` with operands ``("n", id)`` / ``("c", value)`` and ids mapped to nodes in order;
    ``out`` the id returned. ``None`` when a constant is not a number."""
    node = {0: 0}
    rows = []
    try:
        for prim, params, operands, outs in eqns:
            args = tuple(("n", node[r]) if kind == "n" else
                         ("c", tuple(np.asarray(r, np.float64).ravel().tolist()))
                         for kind, r in operands)
            if prim.name in ("copy", "copy_p"):
                node[outs] = node[operands[0][1]] if operands[0][0] == "n" else None
                continue
            rows.append((prim.name, tuple(sorted((k, repr(v)) for k, v in params.items())),
                         args))
            node[outs] = len(rows)
        return tuple(rows), node[out]
    except (TypeError, ValueError, KeyError):
        return None


def _group_canonical(group: Group) -> tuple | None:
    end = group.consumed_node or 0
    return _canonical([(prim, params, operands, i + 1)
                       for i, (prim, params, operands) in enumerate(group.program[:end])], end)


@functools.lru_cache(maxsize=128)
def _registered_canonical(fn: Callable, dtype) -> tuple | None:
    """:func:`_canonical` of a registered activation ``fn`` traced at ``dtype``."""
    flat, outs = _registered_program(fn, dtype)
    if len(outs) != 1 or isinstance(outs[0], Const) or any(len(e.outs) != 1 for e in flat):
        return None
    out = outs[0]
    return _canonical([(e.primitive, e.params,
                        [("c", o.value) if isinstance(o, Const) else ("n", o) for o in e.ins],
                        e.outs[0]) for e in flat], out)


#: ``(name, dtype) -> None`` (jet expands it) or why not, of the traced activations checked so
#: far in this process (the name holds the whole program: its expression, constants in full)
_JET_CHECKED: dict = {}

#: ``(program, dtype, registry) -> (name, how)`` of the activations matched so far in this
#: process (a traced network's groups and every later trace of the same activation share it)
_MATCHED: dict = {}


def match_activation(group: Group, dtype) -> tuple[str | None, str]:
    """The registered activation equal to ``group``'s traced program, and how it was matched.

    Equal means: within ``64 eps (1 + |sigma|)`` at every point of :data:`MATCH_GRID` (so
    ``jax.nn.gelu``'s tanh form is not taken for the exact GELU: they differ by 5e-4);
    "structurally" is added when the registered function traces to the same primitives.
    The registered ones that trace to the group's primitives are compared first, then the
    others in registration order. A registered function that traces to the very same program
    (primitives, parameters, constants and wiring) equals it at every point by construction and
    is taken without evaluating either (ours: evaluating compiles a program per primitive and
    shape); a program matched before in this process is not matched again. Returns
    ``(None, "")`` when none matches. Computed eagerly even inside an outer ``jax.jit`` (the
    program's constants are known at trace time).
    """
    prims = sorted(p.name for p, _, _ in group.program[: group.consumed_node or 0]
                   if p.name not in ("copy", "copy_p"))
    dtype = jnp.dtype(dtype)
    mine = _group_canonical(group)
    # the registry by its functions too: a registration replaced (overwrite=True) is another
    registry = tuple((n, get_activation(n).fn) for n in registered_activations())
    key = None if mine is None else (mine, dtype.name, registry)
    if key is not None and key in _MATCHED:
        return _MATCHED[key]
    found = None
    if mine is not None:
        for name, fn in registry:
            if (_primitive_names(fn, dtype) == tuple(prims)
                    and _registered_canonical(fn, dtype) == mine):
                found = (name, "numerically and structurally")
                break
    if found is None:
        found = _match_fn(group.activation_fn(), prims, dtype)
    if key is not None:
        if len(_MATCHED) >= 256:
            _MATCHED.clear()
        _MATCHED[key] = found
    return found


def _match_fn(sigma: Callable, prims: Sequence[str] | None, dtype) -> tuple[str | None, str]:
    with jax.ensure_compile_time_eval():
        u = jnp.asarray(MATCH_GRID, dtype)
        mine = np.asarray(sigma(u), np.float64)
        if mine.shape != u.shape or not np.all(np.isfinite(mine)):
            return None, ""
        tol = 64 * float(jnp.finfo(dtype).eps)
        names = registered_activations()
        # the ones with the same primitives first: a tanh is compared with tanh, not with
        # sigmoid before it
        same = {n for n in names if prims is not None
                and _primitive_names(get_activation(n).fn, jnp.dtype(dtype)) == tuple(prims)}
        refs = _reference_values(tuple((n, get_activation(n).fn) for n in names),
                                 jnp.dtype(dtype).name)
        for name in sorted(names, key=lambda n: n not in same):
            ref = (refs[name] if refs is not None
                   else np.asarray(get_activation(name).fn(u), np.float64))
            if ref.shape == mine.shape and np.all(np.abs(mine - ref) <= tol * (1 + np.abs(ref))):
                return name, ("numerically and structurally" if name in same
                              else "numerically")
    return None, ""


@functools.lru_cache(maxsize=16)
def _reference_values(registry: tuple, dtype: str) -> dict[str, np.ndarray] | None:
    """Every registered activation on :data:`MATCH_GRID` (float64 copies), computed in one
    compiled program per registry and dtype (ours: evaluated one by one, op by op, they
    compiled a program per primitive, ~17 for the built-in ones); ``None`` when one of them
    fails on the grid (they are then evaluated one by one, as far as the comparison goes)."""
    def values(u):
        return [fn(u) for _, fn in registry]

    try:
        with jax.ensure_compile_time_eval():
            outs = jax.jit(values)(np.asarray(MATCH_GRID, dtype))
    except Exception:  # noqa: BLE001 - a user's registration that fails on the grid
        return None
    return {name: np.asarray(v, np.float64) for (name, _), v in zip(registry, outs, strict=True)}


def analytic_call(jaxpr, consts, operands) -> str | None:
    """The registered analytic activation a ``custom_jvp_call`` of one traced operand (the
    others constants) computes, or ``None`` (``jax.nn.softplus``: ``logaddexp(u, 0)``, written
    with ``max`` / ``abs`` / ``select_n`` whose kinks cancel), compared on :data:`MATCH_GRID`."""
    traced = [i for i, o in enumerate(operands) if not isinstance(o, Const)]
    if len(traced) != 1 or len(jaxpr.outvars) != 1 or any(
            np.size(o.value) != 1 for o in operands if isinstance(o, Const)):
        return None
    aval = jaxpr.invars[traced[0]].aval
    if jaxpr.outvars[0].aval.shape != aval.shape:
        return None
    size = max(int(np.prod(aval.shape)), 1)

    def sigma(t):   # elementwise: the grid in chunks of the operand's shape
        n = t.shape[0]
        chunks = jnp.pad(t, (0, -n % size)).reshape((-1,) + tuple(aval.shape))

        def one(ti):
            args = [ti if i == traced[0] else jnp.asarray(o.value).reshape(())
                    for i, o in enumerate(operands)]
            return jax.core.eval_jaxpr(jaxpr, consts, *args)[0]
        return jax.vmap(one)(chunks).reshape(-1)[:n]

    try:
        name, _ = _match_fn(sigma, None, aval.dtype)
    except Exception:  # noqa: BLE001 - an exotic call is simply not recognised
        return None
    return name


def _kink_name(expr: str) -> str:
    return " (relu)" if expr in ("max(u, 0.0)", "max(0.0, u)") else ""


def _refusing_series(expr: str, kinks: Sequence[tuple[str, str]]):
    def series(u0, k):
        prim, line = kinks[0]
        raise ValueError(f"the traced activation {expr} uses `{prim}` (at {line}), which is not "
                         "analytic: it has no Taylor series; use jc.collocation(k) or "
                         "jc.data_matching(x, order=k)")
    return series


def refuse_kinks(groups: Sequence[Group], methods, where: str, dtype) -> None:
    """Derivative features need Taylor series: a group whose activation uses a non-analytic
    primitive (``max``, ``abs``, ...) and equals no registered (analytic) activation is refused
    for them, naming the primitive and its line."""
    for m in methods:
        if not isinstance(m.features, DerivativeFeatures):
            continue
        for g in groups:
            name = None if g.consumed_node is None else match_activation(g, dtype)[0]
            if g.kinks and name is None:
                prim, line = g.kinks[0]
                expr = g.expression()
                raise ValueError(
                    f"{where}: hidden layer {g.index}'s activation {expr}{_kink_name(expr)} "
                    f"uses `{prim}` at {line}, which is not analytic; {m.describe()} needs its "
                    "Taylor series. Use jc.collocation(k) or jc.data_matching(x, order=k) "
                    "(values only), or an analytic activation (jax.nn.softplus, jax.nn.gelu)")


def chain_activation(group: Group, dtype) -> Activation:
    """The activation of a chain's hidden group: the registered one its program equals, else
    one built from the program (not registered): ``"traced:<expression>"``, its series from
    ``jet`` (refusing, with the primitive and line, when the program has a kink)."""
    name, _ = match_activation(group, dtype)
    if name is not None:
        return get_activation(name)
    expr = group.expression()
    name = f"traced:{expr}"
    if group.kinks:
        return make_activation(name, group.activation_fn(),
                               series=_refusing_series(expr, group.kinks),
                               description=f"traced, not analytic: {expr}")
    prims = {p.name for p, _, _ in group.program[: group.consumed_node or 0]}
    is_entire = all(entire(p) for p in prims)
    rho = math.inf if is_entire else float(jnp.finfo(dtype).tiny)
    describe = f"traced: {expr}" + ("" if is_entire else
                                    " (strip width not derived; no bound rule)")
    key = (name, jnp.dtype(dtype).name)
    if key not in _JET_CHECKED:
        try:
            with jax.ensure_compile_time_eval():   # the check alone, not a throwaway activation
                _try_jet_series(name, group.activation_fn())
            _JET_CHECKED[key] = None
        except ValueError as e:
            _JET_CHECKED[key] = str(e).replace("register_activation: ", "")
        if len(_JET_CHECKED) > 256:
            _JET_CHECKED.pop(next(iter(_JET_CHECKED)))
    why = _JET_CHECKED[key]
    if why is None:
        return make_activation(name, group.activation_fn(), rho_sigma=rho,
                               description=describe, jet_checked=True)

    def series(u0, k):   # jet cannot expand it: values only (collocation, data)
        raise ValueError(f"hidden layer {group.index}'s activation {expr}: {why}")
    return make_activation(name, group.activation_fn(), series=series, rho_sigma=rho,
                           description=describe)
