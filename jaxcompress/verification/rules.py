r"""Bound rules, one per primitive: the registry of the verification interpreter.

``bound_rules`` maps a JAX primitive to a rule, as ``jax/experimental/jet.py``'s ``jet_rules``
does, filled by small family helpers (:func:`_def_linear`, :func:`_def_smooth`, ...). A rule
sees the operands of one equation, each either a constant array (a value that does not depend
on the input ``x``: weights, biases, literals) or a :class:`~jaxcompress.verification.taylor.
TaylorModel` (one that does) or a :class:`~jaxcompress.verification.taylor.Pred` (a comparison of
such values), and the equation's parameters; it returns the result in the same terms
(a list for a primitive with several results)::

    def rule(ctx: RuleContext, *operands, **params) -> value

``ctx`` (:class:`RuleContext`) gives the arithmetic a rule needs without reaching into the
interpreter: ``ctx.interval(v)``, ``ctx.from_interval(lo, hi)``, ``ctx.compose(smooth, v)``,
``ctx.add`` / ``ctx.mul`` / ``ctx.relu``, ... A rule that cannot bound a case raises
:class:`NoBoundRule` with the reason. :func:`register_rule` adds or replaces a rule (e.g. for a
primitive of your own, or a tighter rule); an equation whose primitive has no rule and whose
operands depend on ``x`` is refused with the primitive's name and the user's source line, never
guessed. Equations whose operands are all constants are evaluated as they are (in float64).

What is supported: ``dot_general``, ``conv_general_dilated``, ``add`` / ``sub`` / ``mul`` /
``div`` / ``neg``, ``integer_pow``, ``square``, ``pow``, ``tanh``, ``logistic``, ``exp``,
``expm1``, ``exp2``, ``log``, ``log1p``, ``erf``, ``erfc``, ``sin``, ``cos``, ``sqrt``,
``rsqrt``, ``max`` / ``min`` / ``abs`` / ``sign`` / ``clamp`` (ReLU and friends, by linear
relaxation), ``reduce_sum`` / ``reduce_max`` / ``reduce_min`` / ``cumsum``, ``concatenate``,
``stack``, ``tile``, ``split``, ``slice``, ``dynamic_slice``, ``gather``, ``pad``,
``reshape``, ``broadcast_in_dim``, ``transpose``, ``squeeze``, ``rev``,
``copy``, ``convert_element_type``, comparisons, ``and`` / ``or`` / ``not``, ``select_n``,
``is_finite``; call primitives (``jit``, ``closed_call``, ``custom_jvp_call``,
``custom_vjp_call``, ``remat``) are inlined by the interpreter
(:mod:`jaxcompress.verification.interpret`), and ``jnp.logaddexp`` (hence ``jax.nn.softplus``) is
recognised by its jaxpr and bounded as the smooth function it is.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcompress.program import RuleTable
from jaxcompress.verification import smooth as sm
from jaxcompress.verification import taylor as tm
from jaxcompress.verification.taylor import Pred, TaylorModel

__all__ = ["NoBoundRule", "Rule", "RuleContext", "bound_rules", "register_rule"]


class NoBoundRule(NotImplementedError):
    """A rule cannot bound this equation (the interpreter adds the primitive and the line)."""


Rule = Callable[..., Any]

#: The rules, by primitive (``jet.py``'s ``jet_rules`` pattern): the verifier's table of the
#: library's one kind of rule table (:class:`jaxcompress.program.RuleTable`).
bound_rules: RuleTable = RuleTable("bound")
_overwrites = [0]


def overwrites() -> int:
    """How many rules :func:`register_rule` has replaced (part of the key of the compiled
    programs: a replaced rule is never shadowed by a program compiled with the old one; a new
    rule cannot be, as no program compiled before it uses its primitive)."""
    return _overwrites[0]


def register_rule(primitive, rule: Rule, *, overwrite: bool = False) -> Rule:
    """Register ``rule`` as the bound rule of ``primitive`` (a ``jax.extend.core.Primitive``).

    ``rule(ctx, *operands, **params)`` receives constants (arrays), Taylor models and
    predicates, as described in this module's docstring, and returns the equation's result(s).
    A primitive that has a rule already is refused unless ``overwrite=True``. Returns ``rule``.

    Example: a rule from an interval enclosure alone (sound, but it forgets the dependence on
    ``x``; :meth:`RuleContext.compose` keeps it for a smooth function)::

        def atan_rule(ctx, x):
            lo, hi = ctx.interval(x)
            return ctx.from_interval(jnp.arctan(lo) - 1e-15, jnp.arctan(hi) + 1e-15)

        register_rule(jax.lax.atan_p, atan_rule)
    """
    if not callable(rule):
        raise TypeError(f"register_rule: rule must be callable, got {type(rule).__name__}")
    if not hasattr(primitive, "bind") or not hasattr(primitive, "name"):
        raise TypeError("register_rule: primitive must be a JAX primitive (e.g. "
                        f"jax.lax.atan_p), got {type(primitive).__name__}")
    if primitive in bound_rules and not overwrite:
        raise ValueError(f"register_rule: primitive {primitive.name!r} has a rule already; pass "
                         "overwrite=True to replace it")
    _overwrites[0] += primitive in bound_rules
    bound_rules[primitive] = rule
    return rule


def is_symbolic(v) -> bool:
    """Whether ``v`` depends on the input (a Taylor model or a predicate)."""
    return isinstance(v, (TaylorModel, Pred))


def shape_of(v) -> tuple[int, ...]:
    if isinstance(v, TaylorModel):
        return v.shape
    if isinstance(v, Pred):
        return tuple(v.may_true.shape)
    return tuple(jnp.shape(v))


@dataclasses.dataclass(frozen=True, eq=False)
class RuleContext:
    """What a rule may use: the monomial tables and Taylor-model arithmetic that broadcasts.

    Attributes:
      mono: the :class:`~jaxcompress.verification.taylor.Monomials` of this interpretation
        (``order`` ``K``, ``dim`` ``d``; ``order = 0`` when a point is evaluated with rounding
        bounds).
      symbolic: whether the remainders of nonlinear elementwise functions become **remainder
        symbols** (:meth:`fresh`), carried exactly through every later linear operation,
        instead of radii that each layer's ``|W|`` widens.
    """

    mono: tm.Monomials
    symbolic: bool = False
    _symbols: list = dataclasses.field(default_factory=lambda: [0], repr=False)

    @property
    def symbols(self) -> int:
        """How many remainder symbols this interpretation has made so far."""
        return self._symbols[0]

    def fresh(self, v):
        r"""``v`` with its remainder radius turned into new symbols, one per entry: ``rho_i(x) =
        r_i e_i(x)`` with ``e_i = rho_i / r_i in [-1, 1]`` (exact; ``e_i`` is the remainder
        itself, so every later use of the value shares it). A no-op unless :attr:`symbolic`."""
        if not self.symbolic or not isinstance(v, TaylorModel):
            return v
        n = math.prod(v.shape)
        start = self._symbols[0]
        self._symbols[0] = start + n
        old = tm.pad_gen(v, start)
        # the radius materialised first: fused into the n x n product, XLA would recompute
        # the whole remainder computation for every one of its n^2 entries
        rad = tm.materialize(v.rad)
        new = (jnp.eye(n, dtype=jnp.float64) * rad.reshape(1, n)).reshape((n,) + v.shape)
        gen = new if old is None else jnp.concatenate([old, new], axis=0)
        return TaylorModel(v.coef, jnp.zeros_like(v.rad), gen)

    @property
    def order(self) -> int:
        return self.mono.order

    def constant(self, v) -> TaylorModel:
        """A constant array as a Taylor model."""
        return tm.constant(v, self.mono)

    def lift(self, v) -> TaylorModel:
        """``v`` as a Taylor model (constants are lifted)."""
        return tm.lift(tm.as_float(v) if not isinstance(v, TaylorModel) else v, self.mono)

    def interval(self, v) -> tuple[jax.Array, jax.Array]:
        """An enclosure ``(lo, hi)`` of ``v`` over the box."""
        if isinstance(v, TaylorModel):
            return tm.bounds(v, self.mono)
        v = tm.as_float(v)
        return v, v

    def from_interval(self, lo, hi) -> TaylorModel:
        """A Taylor model for a value known only to lie in ``[lo, hi]``."""
        return tm.from_interval(lo, hi, self.mono)

    def compose(self, f: sm.Smooth, v) -> TaylorModel:
        """``f(v)`` for a :class:`~jaxcompress.verification.smooth.Smooth` ``f``."""
        return self.fresh(sm.compose(f, self.lift(v), self.mono))

    def broadcast(self, *vs):
        """The operands broadcast to their common shape (constants stay constants)."""
        shape = tuple(np.broadcast_shapes(*[shape_of(v) for v in vs]))
        return [_broadcast(v, shape, self.mono) for v in vs]

    def add(self, a, b):
        a, b = self.broadcast(a, b)
        if not isinstance(a, TaylorModel):
            return tm.add_constant(b, tm.as_float(a))
        if not isinstance(b, TaylorModel):
            return tm.add_constant(a, tm.as_float(b))
        return tm.add(a, b)

    def sub(self, a, b):
        return self.add(a, self.neg(b))

    def neg(self, a):
        return tm.neg(a) if isinstance(a, TaylorModel) else -tm.as_float(a)

    def mul(self, a, b):
        a, b = self.broadcast(a, b)
        if not isinstance(a, TaylorModel):
            return tm.scale(b, tm.as_float(a))
        if not isinstance(b, TaylorModel):
            return tm.scale(a, tm.as_float(b))
        return tm.multiply(a, b, self.mono)

    def relu(self, a):
        return self.fresh(tm.relu(self.lift(a), self.mono))

    def max(self, a, b):
        """``max(a, b) = b + relu(a - b)`` (exact where the order is decided)."""
        return self.add(b, self.relu(self.sub(a, b)))

    def min(self, a, b):
        """``min(a, b) = a - relu(a - b)``."""
        return self.sub(a, self.relu(self.sub(a, b)))


def _broadcast(v, shape, mono):
    if isinstance(v, Pred):
        return Pred(jnp.broadcast_to(v.may_true.reshape((1,) * (len(shape) - v.may_true.ndim)
                                                        + v.may_true.shape), shape),
                    jnp.broadcast_to(v.may_false.reshape((1,) * (len(shape) - v.may_false.ndim)
                                                         + v.may_false.shape), shape))
    if isinstance(v, TaylorModel):
        return tm.broadcast(v, shape, mono)
    v = jnp.asarray(v)
    return jnp.broadcast_to(v.reshape((1,) * (len(shape) - v.ndim) + v.shape), shape)


# ------------------------------------------------------------------------------------------
# family helpers


def _def_linear(prim, *, terms: Callable[..., int] | None = None):
    """A primitive linear in its first operand that only moves, selects or sums entries; the
    other operands (indices, sizes) must be constants."""

    def rule(ctx, x, *rest, **params):
        if any(is_symbolic(r) for r in rest):
            raise NoBoundRule("only the first operand may depend on x")
        if isinstance(x, Pred):
            if terms is not None:
                raise NoBoundRule("a sum of booleans that depend on x")
            # a predicate moved, broadcast or selected: both of its masks move alike
            return Pred(prim.bind(x.may_true, *rest, **params),
                        prim.bind(x.may_false, *rest, **params))
        n = 1 if terms is None else int(terms(x.shape, **params))
        return tm.linear(lambda c: prim.bind(c, *rest, **params), ctx.lift(x), terms=n)

    bound_rules[prim] = rule


def _def_identity(prim):
    def rule(ctx, *xs, **params):
        del ctx, params
        return list(xs) if prim.multiple_results else xs[0]

    bound_rules[prim] = rule


def _def_smooth(prim, f: sm.Smooth):
    """An elementwise smooth function: composed through its Taylor series."""
    bound_rules[prim] = lambda ctx, x, **params: ctx.compose(f, x)


for _p in (lax.reshape_p, lax.broadcast_in_dim_p, lax.transpose_p, lax.squeeze_p, lax.slice_p,
           lax.rev_p, lax.dynamic_slice_p, lax.gather_p):
    _def_linear(_p)
if hasattr(lax, "tile_p"):  # a primitive since JAX 0.9 (jnp.tile)
    _def_linear(lax.tile_p)
_def_linear(lax.reduce_sum_p,
            terms=lambda shape, axes, **_: math.prod(shape[a] for a in axes) if axes else 1)
_def_linear(lax.cumsum_p, terms=lambda shape, axis, **_: shape[axis])
for _name in ("copy_p", "reduce_precision_p", "optimization_barrier_p"):
    if hasattr(lax, _name):
        _def_identity(getattr(lax, _name))
try:  # sharding constraints: no effect on values
    from jax._src.pjit import sharding_constraint_p

    _def_identity(sharding_constraint_p)
except ImportError:  # pragma: no cover - another JAX layout
    pass

for _p, _f in ((lax.tanh_p, sm.TANH), (lax.logistic_p, sm.LOGISTIC), (lax.exp_p, sm.EXP),
               (lax.expm1_p, sm.EXPM1), (lax.log_p, sm.LOG), (lax.log1p_p, sm.LOG1P),
               (lax.sin_p, sm.SIN), (lax.cos_p, sm.COS), (lax.erf_p, sm.ERF),
               (lax.erfc_p, sm.ERFC), (lax.sqrt_p, sm.SQRT), (lax.rsqrt_p, sm.RSQRT)):
    _def_smooth(_p, _f)


# ------------------------------------------------------------------------------------------
# arithmetic


def _add_rule(ctx, a, b, **_):
    return ctx.add(a, b)


def _sub_rule(ctx, a, b, **_):
    return ctx.sub(a, b)


bound_rules[lax.add_p] = _add_rule
bound_rules[lax.sub_p] = _sub_rule
try:
    from jax._src.ad_util import add_jaxvals_p

    bound_rules[add_jaxvals_p] = _add_rule
except ImportError:  # pragma: no cover
    pass
bound_rules[lax.neg_p] = lambda ctx, a, **_: ctx.neg(a)
bound_rules[lax.mul_p] = lambda ctx, a, b, **_: ctx.mul(a, b)


def _div_rule(ctx, a, b, **_):
    a, b = ctx.broadcast(a, b)
    if not isinstance(b, TaylorModel):
        return tm.divide(a, tm.as_float(b))
    return ctx.mul(a, ctx.compose(sm.RECIPROCAL, b))


bound_rules[lax.div_p] = _div_rule


def _integer_pow_rule(ctx, x, *, y, **_):
    if y == 0:
        return jnp.ones(x.shape, jnp.float64)
    base = x if y > 0 else ctx.compose(sm.RECIPROCAL, x)
    return tm.power(base, abs(int(y)), ctx.mono)


bound_rules[lax.integer_pow_p] = _integer_pow_rule
bound_rules[lax.square_p] = lambda ctx, x, **_: ctx.mul(x, x)


def _pow_rule(ctx, x, y, **_):
    if isinstance(y, TaylorModel):  # x ** y = exp(y log x)
        return ctx.compose(sm.EXP, ctx.mul(y, ctx.compose(sm.LOG, x)))
    y_np = np.asarray(y) if not isinstance(y, jax.core.Tracer) else None
    if y_np is None or y_np.size != 1:
        raise NoBoundRule("pow needs a constant scalar exponent (or one that depends on x)")
    p = float(y_np.reshape(()))
    if p == int(p) and abs(p) <= 64:
        return _integer_pow_rule(ctx, x, y=int(p))
    return ctx.compose(sm.power_function(p), x)


bound_rules[lax.pow_p] = _pow_rule
bound_rules[lax.exp2_p] = lambda ctx, x, **_: ctx.compose(sm.EXP, ctx.mul(x, math.log(2.0)))


def _dot_general_rule(ctx, lhs, rhs, *, dimension_numbers, **_):
    (lc, _rc), _ = dimension_numbers
    lshape = shape_of(lhs)
    terms = math.prod(lshape[i] for i in lc) if lc else 1
    op = functools.partial(lax.dot_general, dimension_numbers=dimension_numbers,
                           precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float64)
    return tm.bilinear(op, lhs, rhs, ctx.mono, terms=terms)


bound_rules[lax.dot_general_p] = _dot_general_rule


def _conv_rule(ctx, lhs, rhs, **params):
    params = dict(params, preferred_element_type=None)
    terms = math.prod(shape_of(rhs))  # an over-count of the products summed per output

    def op(a, b):
        return lax.conv_general_dilated_p.bind(a, b, **params)

    return tm.bilinear(op, lhs, rhs, ctx.mono, terms=terms)


bound_rules[lax.conv_general_dilated_p] = _conv_rule


# ------------------------------------------------------------------------------------------
# piecewise-linear: ReLU and friends


bound_rules[lax.max_p] = lambda ctx, a, b, **_: ctx.max(a, b)
bound_rules[lax.min_p] = lambda ctx, a, b, **_: ctx.min(a, b)
bound_rules[lax.abs_p] = lambda ctx, a, **_: tm.absolute(ctx.lift(a), ctx.mono)


def _clamp_rule(ctx, lo, x, hi, **_):
    return ctx.min(ctx.max(x, lo), hi)


bound_rules[lax.clamp_p] = _clamp_rule


def _sign_rule(ctx, x, **_):
    lo, hi = ctx.interval(x)
    val = jnp.where(lo > 0, 1.0, jnp.where(hi < 0, -1.0, 0.0))
    known = (lo > 0) | (hi < 0) | ((lo == 0) & (hi == 0))
    return tm.select(known, tm.from_interval(jnp.full_like(lo, -1.0), jnp.full_like(lo, 1.0),
                                             ctx.mono), ctx.constant(val))


bound_rules[lax.sign_p] = _sign_rule


def _reduce_extreme(which):
    def rule(ctx, x, *, axes, **_):
        x = ctx.lift(x)
        for axis in sorted(axes, reverse=True):
            while x.shape[axis] > 1:
                n = x.shape[axis]
                half = n // 2

                def part(t, start, stop, axis=axis):
                    return tm.linear(lambda c: lax.slice_in_dim(c, start, stop, axis=axis), t)

                pair = getattr(ctx, which)(part(x, 0, half), part(x, half, 2 * half))
                if n % 2:
                    x = _join([pair, part(x, 2 * half, n)], axis, jnp.concatenate)
                else:
                    x = pair
            x = tm.linear(lambda c, axis=axis: jnp.squeeze(c, axis=axis), x)
        return x

    return rule


bound_rules[lax.reduce_max_p] = _reduce_extreme("max")
bound_rules[lax.reduce_min_p] = _reduce_extreme("min")


# ------------------------------------------------------------------------------------------
# structure with several operands


def _join(ts, axis, how):
    """Taylor models joined along ``axis`` by ``how`` (``jnp.concatenate`` / ``jnp.stack``),
    their symbols aligned first."""
    gens = tm.align(*ts)
    return TaylorModel(how([t.coef for t in ts], axis=axis + 1),
                       how([t.rad for t in ts], axis=axis),
                       None if gens[0] is None else how(gens, axis=axis + 1))


def _concatenate_rule(ctx, *xs, dimension, **_):
    return _join([ctx.lift(x) for x in xs], dimension, jnp.concatenate)


bound_rules[lax.concatenate_p] = _concatenate_rule


def _stack_rule(ctx, *xs, axis, **_):
    return _join([ctx.lift(x) for x in xs], axis, jnp.stack)


if hasattr(lax, "stack_p"):  # a primitive since JAX 0.9 (jnp.stack)
    bound_rules[lax.stack_p] = _stack_rule


def _pad_rule(ctx, x, value, *, padding_config, **_):
    if is_symbolic(value):
        raise NoBoundRule("the padding value must not depend on x")
    t = ctx.lift(x)
    value = tm.as_float(value)
    head = lax.pad(t.coef[0], value, padding_config)
    tail = jax.vmap(lambda c: lax.pad(c, 0.0, padding_config))(t.coef[1:])
    gen = None if t.gen is None else jax.vmap(lambda c: lax.pad(c, 0.0, padding_config))(t.gen)
    return TaylorModel(jnp.concatenate([head[None], tail], axis=0),
                       lax.pad(t.rad, 0.0, padding_config), gen)


bound_rules[lax.pad_p] = _pad_rule


def _split_rule(ctx, x, **params):
    t = ctx.lift(x)
    coefs = jax.vmap(lambda c: lax.split_p.bind(c, **params))(t.coef)
    rads = lax.split_p.bind(t.rad, **params)
    gens = ([None] * len(rads) if t.gen is None
            else jax.vmap(lambda c: lax.split_p.bind(c, **params))(t.gen))
    return [TaylorModel(c, r, g) for c, r, g in zip(coefs, rads, gens, strict=True)]


bound_rules[lax.split_p] = _split_rule


def _convert_rule(ctx, x, *, new_dtype, **_):
    floating = jnp.issubdtype(new_dtype, jnp.floating)
    if isinstance(x, Pred):
        if jnp.issubdtype(new_dtype, jnp.bool_):
            return x
        known = x.may_true != x.may_false
        val = jnp.where(x.may_true, 1.0, 0.0)
        half = jnp.full(val.shape, 0.5)
        return tm.select(known, tm.from_interval(half - 0.5, half + 0.5, ctx.mono),
                         ctx.constant(val))
    if not floating:
        raise NoBoundRule(f"conversion to {jnp.dtype(new_dtype).name} of a value that depends "
                          "on x (not a real function)")
    return x  # a float cast: the interpreter computes the real-arithmetic program in float64


bound_rules[lax.convert_element_type_p] = _convert_rule


# ------------------------------------------------------------------------------------------
# comparisons and selection


def _as_pred(v) -> Pred:
    if isinstance(v, Pred):
        return v
    v = jnp.asarray(v, bool)
    return Pred(v, ~v)


def _compare(kind):
    def rule(ctx, a, b, **_):
        if isinstance(a, Pred) or isinstance(b, Pred):
            raise NoBoundRule("comparison of booleans that depend on x")
        if a is b and isinstance(a, TaylorModel):  # x == x: decided wherever x is finite
            finite = jnp.isfinite(a.rad)
            full = jnp.ones(a.shape, bool)
            if kind in ("eq", "ge", "le"):
                return Pred(full, ~finite)
            return Pred(~finite, full)
        # written so that a NaN bound (an overflow upstream) leaves the predicate undecided
        lo, hi = ctx.interval(ctx.sub(a, b))
        if kind == "gt":
            return Pred(~(hi <= 0), ~(lo > 0))
        if kind == "ge":
            return Pred(~(hi < 0), ~(lo >= 0))
        if kind == "lt":
            return Pred(~(lo >= 0), ~(hi < 0))
        if kind == "le":
            return Pred(~(lo > 0), ~(hi <= 0))
        zero = (lo == 0) & (hi == 0)
        apart = (lo > 0) | (hi < 0)
        if kind == "eq":
            return Pred(~apart, ~zero)
        return Pred(~zero, ~apart)  # ne

    return rule


for _name, _p in (("gt", lax.gt_p), ("ge", lax.ge_p), ("lt", lax.lt_p), ("le", lax.le_p),
                  ("eq", lax.eq_p), ("ne", lax.ne_p)):
    bound_rules[_p] = _compare(_name)


def _and_rule(ctx, a, b, **_):
    a, b = ctx.broadcast(_as_pred(a), _as_pred(b))
    return Pred(a.may_true & b.may_true, a.may_false | b.may_false)


def _or_rule(ctx, a, b, **_):
    a, b = ctx.broadcast(_as_pred(a), _as_pred(b))
    return Pred(a.may_true | b.may_true, a.may_false & b.may_false)


def _not_rule(ctx, a, **_):
    a = _as_pred(a)
    return Pred(a.may_false, a.may_true)


bound_rules[lax.and_p] = _and_rule
bound_rules[lax.or_p] = _or_rule
bound_rules[lax.not_p] = _not_rule


def _is_finite_rule(ctx, x, **_):
    lo, hi = ctx.interval(x)
    finite = jnp.isfinite(lo) & jnp.isfinite(hi)
    return Pred(jnp.ones(x.shape, bool), ~finite)


bound_rules[lax.is_finite_p] = _is_finite_rule


def _select_n_rule(ctx, which, *cases, **_):
    shape = tuple(np.broadcast_shapes(*[shape_of(c) for c in (which, *cases)]))
    if not isinstance(which, Pred):
        which = jnp.asarray(which)
        ts = [tm.broadcast(ctx.lift(c), shape, ctx.mono) for c in cases]
        idx = jnp.broadcast_to(which.astype(jnp.int32), shape)
        coef = lax.select_n(jnp.broadcast_to(idx[None], (ctx.mono.size,) + shape),
                            *[t.coef for t in ts])
        gens = tm.align(*ts)
        gen = None if gens[0] is None else lax.select_n(
            jnp.broadcast_to(idx[None], gens[0].shape), *gens)
        return TaylorModel(coef, lax.select_n(idx, *[t.rad for t in ts]), gen)
    if len(cases) != 2:
        raise NoBoundRule("select_n with more than two cases chosen by a value that depends "
                          "on x")
    which = _broadcast(which, shape, ctx.mono)
    f, t = (tm.broadcast(ctx.lift(c), shape, ctx.mono) for c in cases)
    both = tm.hull(f, t, ctx.mono)
    out = tm.select(which.may_true & ~which.may_false, f, t)
    return tm.select(which.may_true & which.may_false, out, both)


bound_rules[lax.select_n_p] = _select_n_rule


# ------------------------------------------------------------------------------------------
# known functions given as calls (recognised by their jaxpr, never by name alone)


def _logaddexp_rule(ctx, a, b):
    """``logaddexp(a, b) = b + softplus(a - b)``: smooth, although its jaxpr is built of
    ``max``, ``abs`` and ``select_n`` (bounded piece by piece, those lose the smoothness)."""
    return ctx.add(b, ctx.compose(sm.SOFTPLUS, ctx.sub(a, b)))


#: Functions that reach the interpreter as ``custom_jvp_call`` / ``jit`` equations and have a
#: tighter rule than their pieces: ``name -> (reference function, rule)``. An equation matches
#: when its sub-jaxpr prints exactly as the reference's traced on the same operand types.
KNOWN_CALLS: dict[str, tuple[Callable, Rule]] = {
    "logaddexp": (jnp.logaddexp, _logaddexp_rule),
}
