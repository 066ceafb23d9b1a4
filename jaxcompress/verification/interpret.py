"""The bound interpreter: a program evaluated on Taylor models, equation by equation.

The second interpreter of the user's program (the first is the trace's). The program is read by the
library's one jaxpr front end, :func:`jaxcompress.program.flatten` (the trace's too): calls
(``jit``, ``closed_call``, ``custom_jvp_call``, ``custom_vjp_call``, ``remat``) are inlined (a
custom derivative rule does not change the function's values), a ``scan`` — hence a
``jax.lax.fori_loop`` with a static trip count — runs **iteration by iteration**, and the few
:data:`~jaxcompress.verification.rules.KNOWN_CALLS` recognised by their jaxpr stay whole. The
flat program is then walked once more, at trace time, with every value that depends on the
input held as a :class:`~jaxcompress.verification.taylor.TaylorModel` and every other value as
a constant; each equation goes to its rule in
:data:`~jaxcompress.verification.rules.bound_rules`. Of the primitives that carry a
sub-program, a ``cond`` / ``switch`` is bounded by the branch its index selects, or by the
union (hull) of the branches its index may select; any other one (``while`` with a trip count
decided at run time, ...) whose operands depend on the input is refused by name with the
user's line — never read as if it ran once. The result is an ordinary traced JAX computation,
so it is jitted and vmapped over boxes like any other (prior art: immrax's interval interpreter
of jaxprs; autobound's Taylor enclosures of jaxprs).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import extend
from jax._src.interpreters import partial_eval as pe

from jaxcompress.program import Const, Eqn, flatten, sub_programs
from jaxcompress.verification import taylor as tm
from jaxcompress.verification.rules import (
    KNOWN_CALLS,
    NoBoundRule,
    RuleContext,
    bound_rules,
    is_symbolic,
)

__all__ = ["Flat", "UnsupportedPrimitiveError", "flat", "interpret", "known_call", "run"]

_core = extend.core


class UnsupportedPrimitiveError(NotImplementedError):
    """The program has an equation that depends on the input and that no rule bounds."""


def as_constant(v):
    """A constant of the program as the interpreter holds it: floats as float64 (exactly).
    Concrete values (literals) stay NumPy arrays, readable by rules at trace time (an
    exponent, a padding value) even inside ``jax.jit``."""
    if isinstance(v, jax.core.Tracer):
        return v.astype(jnp.float64) if jnp.issubdtype(v.dtype, jnp.floating) else v
    v = np.asarray(v)
    return v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v


@functools.lru_cache(maxsize=64)
def _reference_text(name: str, avals: tuple) -> str | None:
    """The printed sub-jaxpr of the known function ``name`` traced on ``avals``."""
    fn, _ = KNOWN_CALLS[name]
    try:
        closed = jax.make_jaxpr(fn)(*[jax.ShapeDtypeStruct(s, d) for s, d in avals])
    except Exception:  # noqa: BLE001 - not this function
        return None
    for eqn in closed.jaxpr.eqns:
        subs = sub_programs(eqn)
        if subs:
            return str(getattr(subs[0], "jaxpr", subs[0]))
    return None


def known_call(eqn) -> str | None:
    """The name of the known function (:data:`KNOWN_CALLS`) whose jaxpr a call equation's
    sub-program is, or None."""
    subs = sub_programs(eqn)
    if len(subs) != 1:
        return None
    sub = getattr(subs[0], "jaxpr", subs[0])
    avals = tuple((tuple(v.aval.shape), str(v.aval.dtype)) for v in sub.invars)
    text = None
    for name in KNOWN_CALLS:
        ref = _reference_text(name, avals)
        if ref is None:
            continue
        if text is None:
            text = str(sub)
        if text == ref:
            return name
    return None


def _known_rule(eqn):
    """The bound rule of a known function's call equation, or None."""
    name = known_call(eqn)
    return None if name is None else KNOWN_CALLS[name][1]


class Flat:
    """A jaxpr read by the front end: its equations (:class:`~jaxcompress.program.Eqn`, calls
    inlined, loops unrolled), the operands of its outputs, and the numbering of its inputs
    (constvars ``0 .. m - 1``, then invars ``m ..``)."""

    def __init__(self, jaxpr, n_consts: int):
        self.n_consts = n_consts
        self.n_args = len(jaxpr.invars)
        ids = list(range(n_consts + self.n_args))
        self.eqns: list[Eqn] = []
        self.outs = flatten(jaxpr, ids[:n_consts], ids[n_consts:], self.eqns,
                            [len(ids) - 1], keep=lambda e: _known_rule(e) is not None)


@functools.lru_cache(maxsize=256)
def flat(jaxpr) -> Flat:
    """The :class:`Flat` program of an open jaxpr whose constvars are its first inputs (dead
    code removed first: the per-iteration outputs of a loop that nothing reads)."""
    jaxpr, _ = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars), instantiate=True)
    return Flat(jaxpr, len(jaxpr.constvars))


def interpret(jaxpr, consts, args, ctx: RuleContext) -> list:
    """Evaluate ``jaxpr`` on ``args`` (constants, Taylor models or predicates).

    Raises:
      UnsupportedPrimitiveError: an equation that depends on the input has no rule (or its
        rule refuses the case, or it carries a sub-program run an unknown number of times),
        naming the primitive and the user's source line.
    """
    program = flat(jaxpr)
    env = {i: as_constant(c) for i, c in enumerate(consts)}
    env.update({program.n_consts + i: a for i, a in enumerate(args)})
    return run(program.eqns, program.outs, env, ctx)


def run(eqns, outs, env: dict, ctx: RuleContext) -> list:
    """Evaluate flat equations on ``env`` (value id -> constant, Taylor model or predicate)."""

    def read(o):
        return as_constant(o.value) if isinstance(o, Const) else env[o]

    for eqn in eqns:
        invals = [read(o) for o in eqn.ins]
        if not any(is_symbolic(v) for v in invals):
            res = eqn.primitive.bind(*invals, **eqn.params)
            res = [as_constant(o) for o in (res if eqn.primitive.multiple_results else [res])]
        elif eqn.name == "cond":
            res = _cond(eqn, invals, ctx)
        elif sub_programs(eqn):  # kept whole by the front end: a known function, or refused
            known = _known_rule(eqn)
            if known is None:
                raise UnsupportedPrimitiveError(_sub_program_message(eqn))
            res = [known(ctx, *invals)]
        else:
            res = _apply_rule(eqn, invals, ctx)
        env.update(zip(eqn.outs, res, strict=True))
    return [read(o) for o in outs]


def _sub_program_message(eqn: Eqn) -> str:
    if eqn.name == "while":
        what = ("runs its body a number of times decided while it runs (a `while_loop`, or a "
                "`fori_loop` whose bounds are traced values)")
        fix = ("give the loop a static trip count (jax.lax.fori_loop with Python int bounds, "
               "or jax.lax.scan), which is bounded iteration by iteration")
    else:
        what = "carries a sub-program that the verifier does not read"
        fix = ("rewrite it with calls (jit, custom_jvp / custom_vjp, remat), jax.lax.scan or "
               "fori_loop with a static trip count, or jax.lax.cond / switch")
    return (f"verify: primitive '{eqn.name}' (at {eqn.line}), whose operands depend on the "
            f"input, {what}; a sub-program is never bounded as if it ran once: {fix}")


def _cond(eqn: Eqn, invals: list, ctx: RuleContext) -> list:
    """``cond(index, *operands)``: the branch the index selects when the index does not depend
    on ``x``; else, entrywise, the union of the Taylor models of every branch the index may
    select over the box (:func:`~jaxcompress.verification.taylor.hull`), or the one branch it
    selects where the box decides it."""
    index, operands = invals[0], invals[1:]
    branches = eqn.params["branches"]
    n = len(branches)
    outs = [interpret(b.jaxpr, b.consts, operands, ctx) for b in branches]
    if not is_symbolic(index):
        if isinstance(index, np.ndarray):
            return outs[int(np.clip(index, 0, n - 1))]
        pick = jnp.clip(jnp.asarray(index, jnp.int32), 0, n - 1)
        return [_select(ctx, [o[j] for o in outs], lambda i: pick == i)
                for j in range(len(outs[0]))]
    # the integers the index may take: those of its enclosure widened by half a unit on each
    # side (a superset; an enclosure of an integer widened by rounding still decides it)
    lo, hi = ctx.interval(index)
    lo = jnp.clip(jnp.ceil(lo - 0.5), 0, n - 1)
    hi = jnp.clip(jnp.floor(hi + 0.5), 0, n - 1)
    result = []
    for j in range(len(outs[0])):
        cases = [o[j] for o in outs]
        for c in cases:
            dtype = c.coef.dtype if isinstance(c, tm.TaylorModel) else jnp.asarray(c).dtype
            if not jnp.issubdtype(dtype, jnp.floating):
                raise UnsupportedPrimitiveError(
                    f"verify: primitive 'cond' (at {eqn.line}) is chosen by a value that "
                    f"depends on the input and returns {dtype} values: only real values can "
                    "be bounded by the union of the branches")
        models = [ctx.lift(c) for c in cases]
        hull = models[0]
        for m in models[1:]:
            hull = tm.hull(hull, m, ctx.mono)
        result.append(_select(ctx, models, lambda i: (lo == i) & (hi == i), default=hull))
    return result


def _select(ctx: RuleContext, cases: list, chosen, default=None):
    """Case ``i`` where ``chosen(i)`` (a scalar boolean), else ``default`` (the last case when
    None)."""
    if not any(is_symbolic(c) for c in cases):
        out = cases[-1] if default is None else default
        for i, c in enumerate(cases):
            out = jnp.where(chosen(i), c, out)
        return out
    models = [ctx.lift(c) for c in cases]
    out = models[-1] if default is None else default
    for i, m in enumerate(models):
        out = tm.select(jnp.broadcast_to(chosen(i), m.shape), out, m)
    return out


def _apply_rule(eqn: Eqn, invals, ctx):
    prim = eqn.primitive
    rule = bound_rules.lookup(prim)
    if rule is None and prim.name == "call_exported":
        raise UnsupportedPrimitiveError(
            "verify: the program calls a jax.export-ed program (StableHLO), which the verifier "
            "cannot read: a traced network saved by an older jaxcompress holds only that; save "
            "the network again with jc.save (its jaxpr is then stored beside it)")
    if rule is None:
        raise UnsupportedPrimitiveError(
            f"verify: no bound rule for primitive '{prim.name}' (at {eqn.line}), whose "
            "operands depend on the input; register one with "
            f"jaxcompress.verification.register_rule(<the {prim.name} primitive>, rule), or "
            "rewrite the program with supported operations")
    try:
        out = rule(ctx, *invals, **eqn.params)
    except NoBoundRule as exc:
        raise UnsupportedPrimitiveError(
            f"verify: the rule of primitive '{prim.name}' cannot bound this equation (at "
            f"{eqn.line}): {exc}") from None
    # a NaN (inf * 0 after an overflow) propagates to the box's bound, which is then inf
    return list(out) if prim.multiple_results else [out]
