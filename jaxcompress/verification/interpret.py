"""The bound interpreter: a jaxpr evaluated on Taylor models, equation by equation.

The second interpreter of the user's program (DESIGN.md section 4): the same jaxpr that
``jax.jit`` compiles is walked once more, at trace time, with every value that depends on the
input held as a :class:`~jaxcompress.verification.taylor.TaylorModel` and every other value as a
constant. Each equation goes to its rule in :data:`~jaxcompress.verification.rules.bound_rules`;
call primitives (``jit``, ``closed_call``, ``custom_jvp_call``, ``custom_vjp_call``, ``remat``)
are inlined (a custom derivative rule does not change the function's values), except the few
:data:`~jaxcompress.verification.rules.KNOWN_CALLS` recognised by their jaxpr. The result is an
ordinary traced JAX computation, so it is jitted and vmapped over boxes like any other (prior
art: immrax's interval interpreter of jaxprs; autobound's Taylor enclosures of jaxprs).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import extend
from jax._src import source_info_util

from jaxcompress.verification.rules import (
    KNOWN_CALLS,
    NoBoundRule,
    RuleContext,
    bound_rules,
    is_symbolic,
)

__all__ = ["UnsupportedPrimitiveError", "interpret"]

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


def _sub_jaxpr(eqn):
    for key in ("jaxpr", "call_jaxpr"):
        j = eqn.params.get(key)
        if isinstance(j, _core.ClosedJaxpr):
            return j.jaxpr, j.consts
        if isinstance(j, _core.Jaxpr):
            return j, ()
    return None


def where(eqn) -> str:
    """The user's source line of an equation, for error messages."""
    try:
        return source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001 - a message must not fail
        return "unknown location"


@functools.lru_cache(maxsize=64)
def _reference_text(name: str, avals: tuple) -> str | None:
    """The printed sub-jaxpr of the known function ``name`` traced on ``avals``."""
    fn, _ = KNOWN_CALLS[name]
    try:
        closed = jax.make_jaxpr(fn)(*[jax.ShapeDtypeStruct(s, d) for s, d in avals])
    except Exception:  # noqa: BLE001 - not this function
        return None
    for eqn in closed.jaxpr.eqns:
        sub = _sub_jaxpr(eqn)
        if sub is not None:
            return str(sub[0])
    return None


def _recognise(eqn, sub):
    """The rule of a known function whose jaxpr ``sub`` is, or None."""
    avals = tuple((tuple(v.aval.shape), str(v.aval.dtype)) for v in sub.invars)
    text = None
    for name, (_, rule) in KNOWN_CALLS.items():
        ref = _reference_text(name, avals)
        if ref is None:
            continue
        if text is None:
            text = str(sub)
        if text == ref:
            return rule
    return None


def interpret(jaxpr, consts, args, ctx: RuleContext) -> list:
    """Evaluate ``jaxpr`` on ``args`` (constants, Taylor models or predicates).

    Raises:
      UnsupportedPrimitiveError: an equation that depends on the input has no rule (or its
        rule refuses the case), naming the primitive and the user's source line.
    """
    env: dict = {}

    def read(v):
        if isinstance(v, _core.Literal):
            return as_constant(v.val)
        return env[v]

    def write(v, val):
        if not isinstance(v, _core.DropVar):
            env[v] = val

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        write(v, as_constant(c))
    for v, a in zip(jaxpr.invars, args, strict=True):
        write(v, a)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        sub = _sub_jaxpr(eqn)
        if sub is not None:
            rule = _recognise(eqn, sub[0]) if any(is_symbolic(v) for v in invals) else None
            if rule is not None:
                outs = [rule(ctx, *invals)]
            else:
                outs = interpret(sub[0], sub[1], invals, ctx)
        elif not any(is_symbolic(v) for v in invals):
            outs = eqn.primitive.bind(*invals, **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
            outs = [as_constant(o) for o in outs]
        else:
            outs = _apply_rule(eqn, invals, ctx)
        for v, o in zip(eqn.outvars, outs, strict=True):
            write(v, o)
    return [read(v) for v in jaxpr.outvars]


def _apply_rule(eqn, invals, ctx):
    prim = eqn.primitive
    rule = bound_rules.get(prim)
    if rule is None:
        raise UnsupportedPrimitiveError(
            f"verify: no bound rule for primitive '{prim.name}' (at {where(eqn)}), whose "
            "operands depend on the input; register one with "
            f"jaxcompress.verification.register_rule(<the {prim.name} primitive>, rule), or "
            "rewrite the program with supported operations")
    try:
        out = rule(ctx, *invals, **eqn.params)
    except NoBoundRule as exc:
        raise UnsupportedPrimitiveError(
            f"verify: the rule of primitive '{prim.name}' cannot bound this equation (at "
            f"{where(eqn)}): {exc}") from None
    # a NaN (inf * 0 after an overflow) propagates to the box's bound, which is then inf
    return list(out) if prim.multiple_results else [out]
