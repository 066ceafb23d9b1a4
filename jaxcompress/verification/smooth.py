r"""Smooth univariate functions for the bound interpreter: Taylor series at points, derivative
enclosures on intervals, and their composition with Taylor models.

A :class:`Smooth` is what the interpreter needs of an activation ``f`` to compose it with a
Taylor model ``u = u_0 + v`` (``u_0`` its constant coefficient):

.. math::
   f(u_0 + v) \in \sum_{j=0}^{K} \frac{f^{(j)}(u_0)}{j!}\, v^j
   + \Big[\min_{\xi} \tfrac{f^{(K+1)}(\xi)}{(K+1)!},\ \max_{\xi}
   \tfrac{f^{(K+1)}(\xi)}{(K+1)!}\Big]\, v^{K+1},
   \qquad \xi \in u_0 + [v_-, v_+]

(Taylor's theorem with the Lagrange remainder; the sum is evaluated in Taylor-model
arithmetic from the powers of ``v``). ``series(x, n)`` gives ``f^(j)(x)/j!`` for ``j <= n``
with a bound on each one's floating-point error; ``derivative_range(lo, hi, n)`` an enclosure of
``f^(n)/n!`` over ``[lo, hi]`` (``n = 0``: the range of ``f``, interval arithmetic's rule, which
:func:`compose` also uses where it is tighter than the Taylor model: large boxes).

The enclosures are exact up to rounding, family by family (ours; autobound computes sharp
enclosures of the remainder itself, which is tighter, for fewer functions):

* ``tanh``, ``logistic`` and ``softplus`` have derivatives that are polynomials in
  ``g = tanh`` or ``g = logistic`` (``g' = 1 - g^2``, ``g' = g - g^2``), so the range of
  ``f^(n)`` over ``[lo, hi]`` is the range of a polynomial over ``[g(lo), g(hi)]``: its values at
  the two ends and at the roots of its derivative inside (roots computed once, host side);
* ``erf`` / ``erfc``: ``erf^(n)(x) = 2/sqrt(pi) (-1)^(n-1) H_(n-1)(x) e^(-x^2)``, whose
  critical points are the roots of the Hermite polynomial ``H_n``;
* ``exp``, ``expm1``, ``log``, ``log1p`` and the powers ``sqrt``, ``rsqrt``, ``1/x`` have
  monotone derivatives on their domains: the two ends;
* ``sin`` / ``cos``: ``sin^(n)(x) = sin(x + n pi / 2)``, whose range over an interval is known
  in closed form.

**Accuracy of the platform's functions.** The point values come from XLA's float64
implementations, assumed accurate to :data:`FUNCTION_ULPS` units in the last place (relative
``ulps * 2^-52``): 32 for most, 1,024 for ``log1p`` and 2,048 for ``erfc``, each at least 8 times
what was measured on the CPU against 120-bit mpmath (tanh 3.5 ulp, logistic 1.5, exp, erf, sin,
cos 1, log1p 106 near -0.41, erfc 260 in its tail; ``tests/test_verify.py`` measures them
again). Derivative enclosures, used only in the remainder (multiplied by ``|v|^(K+1)``), are
widened by a relative ``1e-9``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from numpy.polynomial import hermite as npherm
from numpy.polynomial import polynomial as nppoly

from jaxcompress.verification import taylor as tm

__all__ = ["FUNCTION_ULPS", "SMOOTH_FUNCTIONS", "Smooth", "compose", "compose_series",
           "relative_error"]

#: The accuracy assumed of the platform's float64 elementary functions, in units in the last
#: place (``2^-52`` relative).
FUNCTION_ULPS = {"tanh": 32, "logistic": 32, "exp": 32, "expm1": 32, "log": 32, "log1p": 1024,
                 "sin": 32, "cos": 32, "erf": 32, "erfc": 2048, "sqrt": 4, "rsqrt": 32,
                 "pow": 64}


def relative_error(name: str) -> float:
    """The relative error assumed of the platform's ``name`` (:data:`FUNCTION_ULPS`)."""
    return FUNCTION_ULPS[name] * 2.0**-52


#: The relative widening of derivative enclosures (they only scale the Lagrange remainder).
_DERIV_REL = 1e-9


@dataclasses.dataclass(frozen=True)
class Smooth:
    """A smooth univariate function, as the bound interpreter composes it.

    Attributes:
      name: for error messages.
      series: ``series(x, n) -> (coefs, errs)``: ``coefs[j] = f^(j)(x) / j!`` for
        ``j = 0..n`` (shape ``(n + 1, *x.shape)``, float64) and ``errs[j] >= 0`` a bound on the
        absolute error of ``coefs[j]``. Must be traceable (``x`` may be a tracer).
      derivative_range: ``derivative_range(lo, hi, n) -> (dlo, dhi)`` with
        ``dlo <= f^(n)(xi) / n! <= dhi`` for every ``xi in [lo, hi]`` (``n = 0``: the range of
        ``f``); NaN or infinite where ``[lo, hi]`` leaves the domain of ``f^(n)``.
    """

    name: str
    series: Callable[[jax.Array, int], tuple[jax.Array, jax.Array]]
    derivative_range: Callable[[jax.Array, jax.Array, int], tuple[jax.Array, jax.Array]]


def _horner(coefs, x):
    acc = jnp.full_like(x, float(coefs[-1]))
    for c in reversed(list(coefs[:-1])):
        acc = acc * x + float(c)
    return acc


def _widen(lo, hi, rel, base=None):
    """``[lo, hi]`` widened by ``rel`` times ``base`` (default ``max(|lo|, |hi|)``)."""
    scale_ = jnp.maximum(jnp.abs(lo), jnp.abs(hi)) if base is None else base
    m = rel * scale_ + tm.TINY
    return lo - m, hi + m


def _hull_of(values, inside):
    """min and max over the candidates ``values[i]`` where ``inside[i]`` holds (the two ends are
    always inside)."""
    lo = hi = None
    for v, ok in zip(values, inside, strict=True):
        vlo = v if ok is True else jnp.where(ok, v, jnp.inf)
        vhi = v if ok is True else jnp.where(ok, v, -jnp.inf)
        lo = vlo if lo is None else jnp.minimum(lo, vlo)
        hi = vhi if hi is None else jnp.maximum(hi, vhi)
    return lo, hi


# ------------------------------------------------------------------------------------------
# f^(n) a polynomial in a monotone g (tanh, logistic, softplus)


def _poly_tables(q: np.ndarray, n_max: int):
    """``p_0 = T`` and ``p_(j+1) = p_j' q``: ``g^(j) = p_j(g)`` when ``g' = q(g)``; with the
    real roots of each ``p_j'`` (the critical points of ``g^(j)`` in ``T``)."""
    polys = [np.array([0.0, 1.0])]
    for _ in range(n_max):
        polys.append(nppoly.polymul(nppoly.polyder(polys[-1]), q))
    crits = []
    for p in polys:
        d = nppoly.polyder(p)
        d = np.trim_zeros(d, "b")
        roots = nppoly.polyroots(d) if d.size > 1 else np.array([])
        # liberal: a spurious candidate is still a value of the polynomial in the interval
        crits.append(np.sort(roots[np.abs(roots.imag) < 1e-6].real))
    return polys, crits


class _PolyFamily:
    """A function whose derivatives are polynomials in a monotone increasing ``g`` with
    ``g' = q(g)``: ``f^(n) = p_(n - shift)(g)`` (ours). ``tanh`` and ``logistic`` are ``g``
    itself (``shift = 0``); ``softplus`` has ``f' = logistic`` (``shift = 1``) and its own
    value ``f0``. The range of ``f^(n)`` over ``[lo, hi]`` is the range of a polynomial over
    ``[g(lo), g(hi)]``: its values at both ends and at the roots of its derivative inside."""

    def __init__(self, name, g, g_range, q, rel, f0=None, f0_rel=0.0, shift=0, n_max=10):
        self.name, self.g, self.g_range, self.f0, self.f0_rel, self.shift = (
            name, g, g_range, f0, f0_rel, shift)
        self.rel = rel
        self.polys, self.crits = _poly_tables(np.asarray(q, np.float64), n_max)
        self.n_max = n_max

    def _poly(self, n):
        """``f^(n) = P(g)``: the polynomial ``P`` (``n >= shift``)."""
        if n - self.shift > self.n_max:
            raise ValueError(f"{self.name}: derivatives up to order {self.n_max + self.shift} "
                             f"are tabulated, asked for {n}")
        return self.polys[n - self.shift], self.crits[n - self.shift]

    def series(self, x, n):
        gx = self.g(x)
        coefs, errs = [], []
        for j in range(n + 1):
            if j < self.shift or (j == 0 and self.f0 is not None):
                v = self.f0(x)
                coefs.append(v)
                errs.append(self.f0_rel * jnp.abs(v) + tm.TINY)
                continue
            p, _ = self._poly(j)
            fact = math.factorial(j)
            coefs.append(_horner(p, gx) / fact)
            deg = len(p)
            # rounding of Horner (gamma_(2 deg)) and the error of g(x) propagated through p
            err = ((self.rel * deg + tm.gamma(2 * deg + 2))
                   * _horner(np.abs(p), jnp.abs(gx)) / fact)
            errs.append(err + tm.TINY)
        return jnp.stack(coefs), jnp.stack(errs)

    def derivative_range(self, lo, hi, n):
        if n < self.shift or (n == 0 and self.f0 is not None):
            a, b = self.f0(lo), self.f0(hi)  # f0 is increasing
            return _widen(a, b, 2 * self.f0_rel)
        if n == 0:  # g itself, increasing
            return _widen(self.g(lo), self.g(hi), 2 * self.rel)
        p, crit = self._poly(n)
        glo, ghi = self.g_range
        tlo = jnp.clip(self.g(lo) - self.rel * jnp.abs(self.g(lo)) - tm.TINY, glo, ghi)
        thi = jnp.clip(self.g(hi) + self.rel * jnp.abs(self.g(hi)) + tm.TINY, glo, ghi)
        values = [_horner(p, tlo), _horner(p, thi)]
        inside = [True, True]
        for c in crit:
            if glo <= c <= ghi:
                values.append(jnp.full_like(lo, float(_horner_np(p, c))))
                inside.append((tlo <= c) & (c <= thi))
        dlo, dhi = _hull_of(values, inside)
        fact = math.factorial(n)
        bound = float(_horner_np(np.abs(p), max(abs(glo), abs(ghi))))
        return _widen(dlo / fact, dhi / fact, 1.0, _DERIV_REL * bound / fact)


def _horner_np(p, x):
    return float(nppoly.polyval(x, p))


def _softplus(x):
    """``log(1 + e^x)`` computed stably (``jnp.logaddexp(x, 0)`` loses relative accuracy in the
    far negative tail on XLA's CPU backend)."""
    return jnp.where(x > 0, x + jnp.log1p(jnp.exp(-jnp.abs(x))), jnp.log1p(jnp.exp(-jnp.abs(x))))


_TANH = _PolyFamily("tanh", jnp.tanh, (-1.0, 1.0), [1.0, 0.0, -1.0], relative_error("tanh"))
_LOGISTIC = _PolyFamily("logistic", jax.nn.sigmoid, (0.0, 1.0), [0.0, 1.0, -1.0],
                        relative_error("logistic"))
# softplus = log1p(exp(-|x|)) + max(x, 0): exp's error, log1p's, and two roundings
_SOFTPLUS = _PolyFamily("softplus", jax.nn.sigmoid, (0.0, 1.0), [0.0, 1.0, -1.0],
                        relative_error("logistic"), f0=_softplus,
                        f0_rel=relative_error("log1p") + relative_error("exp") + tm.gamma(4),
                        shift=1)


def _family(obj) -> Smooth:
    return Smooth(obj.name, obj.series, obj.derivative_range)


# ------------------------------------------------------------------------------------------
# exp, expm1, log, log1p, powers: monotone derivatives


_EXP_REL = max(relative_error("exp"), relative_error("expm1"))


def _exp_series(x, n, first=None):
    e = jnp.exp(x)
    coefs = [e / math.factorial(j) for j in range(n + 1)]
    if first is not None:
        coefs[0] = first(x)
    coefs = jnp.stack(coefs)
    return coefs, (_EXP_REL + tm.gamma(2)) * jnp.abs(coefs) + tm.TINY


def _exp_range(lo, hi, n, first=None):
    f = first if (n == 0 and first is not None) else jnp.exp
    a, b = f(lo) / math.factorial(n), f(hi) / math.factorial(n)
    return _widen(a, b, 2 * _EXP_REL)


EXP = Smooth("exp", _exp_series, _exp_range)
EXPM1 = Smooth("expm1", lambda x, n: _exp_series(x, n, jnp.expm1),
               lambda lo, hi, n: _exp_range(lo, hi, n, jnp.expm1))


def _log_family(name, shift, first):
    """``log(x + shift)``: ``f^(j)(x) / j! = (-1)^(j-1) / (j y^j)``, ``y = x + shift > 0``."""
    rel = relative_error(name)

    def series(x, n):
        y = x + shift
        coefs = [first(x)]
        for j in range(1, n + 1):
            coefs.append((-1.0) ** (j - 1) / (j * y**j))
        coefs = jnp.stack(coefs)
        errs = (rel + tm.gamma(2 * n + 4)) * jnp.abs(coefs) + tm.TINY
        bad = ~(y > 0)
        return jnp.where(bad[None], jnp.nan, coefs), errs

    def derivative_range(lo, hi, n):
        ylo, yhi = lo + shift, hi + shift
        if n == 0:
            a, b = first(lo), first(hi)
        else:
            a, b = ((-1.0) ** (n - 1) / (n * ylo**n), (-1.0) ** (n - 1) / (n * yhi**n))
            a, b = jnp.minimum(a, b), jnp.maximum(a, b)
        a, b = _widen(a, b, 2 * rel + tm.gamma(n + 4))
        bad = ~(ylo > 0)
        return jnp.where(bad, jnp.nan, a), jnp.where(bad, jnp.nan, b)

    return Smooth(name, series, derivative_range)


LOG = _log_family("log", 0.0, jnp.log)
LOG1P = _log_family("log1p", 1.0, jnp.log1p)


def _power_family(name, p, base, rel, *, both_signs=False):
    """``x ** p``: ``f^(j)(x) / j! = binom(p, j) x^(p - j)``, monotone on ``x > 0`` (and on
    ``x < 0`` for an integer ``p``, ``both_signs``)."""
    binoms = [1.0]
    for j in range(1, 40):
        binoms.append(binoms[-1] * (p - j + 1) / j)

    def series(x, n):
        b = base(x)
        coefs = [b]
        acc = b
        for j in range(1, n + 1):
            acc = acc / x
            coefs.append(binoms[j] * acc)
        coefs = jnp.stack(coefs)
        errs = (rel + tm.gamma(2 * n + 4)) * jnp.abs(coefs) + tm.TINY
        ok = (x > 0) | ((x < 0) & both_signs)
        return jnp.where(ok[None], coefs, jnp.nan), errs

    def derivative_range(lo, hi, n):
        def at(x):
            return binoms[n] * base(x) / x**n if n else base(x)

        a, b = at(lo), at(hi)
        a, b = jnp.minimum(a, b), jnp.maximum(a, b)
        a, b = _widen(a, b, 2 * rel + tm.gamma(n + 4))
        # sqrt itself is defined at 0; where the enclosure may dip below it, nothing is claimed
        # (the box is split further, or the search names a point where the program is NaN)
        ok = (lo > 0) | ((hi < 0) & both_signs) | ((lo >= 0) & (name == "sqrt") & (n == 0))
        return jnp.where(ok, a, jnp.nan), jnp.where(ok, b, jnp.nan)

    return Smooth(name, series, derivative_range)


SQRT = _power_family("sqrt", 0.5, jnp.sqrt, relative_error("sqrt"))
RSQRT = _power_family("rsqrt", -0.5, jax.lax.rsqrt, relative_error("rsqrt"))
RECIPROCAL = _power_family("reciprocal", -1.0, lambda x: 1.0 / x, tm.gamma(1), both_signs=True)


def power_function(p: float) -> Smooth:
    """``x ** p`` for a real constant ``p`` (``x > 0``)."""
    return _power_family(f"pow {p}", float(p), lambda x: jnp.power(x, p), relative_error("pow"))


# ------------------------------------------------------------------------------------------
# sin, cos


def _sin_range(lo, hi):
    """The range of ``sin`` over ``[lo, hi]`` (peaks counted with a small outward slack)."""
    two_pi = 2.0 * math.pi
    slack = 1e-9 * (1.0 + jnp.abs(lo) + jnp.abs(hi))
    k_max = jnp.ceil((lo - 0.5 * math.pi - slack) / two_pi)
    has_max = 0.5 * math.pi + two_pi * k_max <= hi + slack
    k_min = jnp.ceil((lo - 1.5 * math.pi - slack) / two_pi)
    has_min = 1.5 * math.pi + two_pi * k_min <= hi + slack
    a, b = jnp.sin(lo), jnp.sin(hi)
    dlo = jnp.where(has_min, -1.0, jnp.minimum(a, b))
    dhi = jnp.where(has_max, 1.0, jnp.maximum(a, b))
    wide = (hi - lo) >= two_pi
    return jnp.where(wide, -1.0, dlo), jnp.where(wide, 1.0, dhi)


def _trig(name, phase):
    rel = relative_error(name)

    def series(x, n):
        s, c = jnp.sin(x), jnp.cos(x)
        cycle = [s, c, -s, -c]
        coefs = jnp.stack([cycle[(j + phase) % 4] / math.factorial(j) for j in range(n + 1)])
        errs = (rel + tm.gamma(2)) * jnp.abs(coefs) + tm.TINY
        return coefs, errs

    def derivative_range(lo, hi, n):
        shift = (n + phase) * 0.5 * math.pi
        a, b = _sin_range(lo + shift, hi + shift)
        return _widen(a / math.factorial(n), b / math.factorial(n), 4 * rel,
                      1.0 / math.factorial(n))

    return Smooth(name, series, derivative_range)


SIN = _trig("sin", 0)
COS = _trig("cos", 1)


# ------------------------------------------------------------------------------------------
# erf, erfc


def _hermite_tables(n_max: int):
    """Physicists' Hermite polynomials ``H_0 .. H_(n_max)`` (power-basis coefficients), the
    roots of each, and ``sup_x |H~_n(|x|)| e^(-x^2)`` (``H~`` with absolute coefficients)."""
    polys, roots, sups = [], [], []
    xs = np.linspace(0.0, 40.0, 40001)
    for n in range(n_max + 1):
        p = npherm.herm2poly([0.0] * n + [1.0])
        polys.append(p)
        roots.append(np.sort(npherm.hermroots([0.0] * n + [1.0])) if n else np.array([]))
        sups.append(float(np.max(nppoly.polyval(xs, np.abs(p)) * np.exp(-xs * xs))) * 1.5)
    return polys, roots, sups


_HERMITE, _HERMITE_ROOTS, _HERMITE_SUP = _hermite_tables(18)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf_family(name, sign, first):
    """``erf`` (``sign = 1``) or ``erfc = 1 - erf`` (``sign = -1``)."""
    rel = relative_error(name)

    def series(x, n):
        g = jnp.exp(-(x * x))
        coefs = [first(x)]
        errs = [rel * jnp.abs(coefs[0]) + tm.TINY]
        for j in range(1, n + 1):
            h = _HERMITE[j - 1]
            c = sign * _TWO_OVER_SQRT_PI * (-1.0) ** (j - 1) / math.factorial(j)
            coefs.append(c * _horner(h, x) * g)
            rel_j = relative_error("exp") + tm.gamma(2 * j + 6) + 2 * tm.UNIT_ROUNDOFF * x * x
            errs.append(rel_j * abs(c) * _horner(np.abs(h), jnp.abs(x)) * g + tm.TINY)
        return jnp.stack(coefs), jnp.stack(errs)

    def derivative_range(lo, hi, n):
        if n == 0:
            a, b = first(lo), first(hi)
            a, b = jnp.minimum(a, b), jnp.maximum(a, b)
            return _widen(a, b, 2 * rel)
        h = _HERMITE[n - 1]
        c = sign * _TWO_OVER_SQRT_PI * (-1.0) ** (n - 1) / math.factorial(n)

        def at(x):
            return c * _horner(h, x) * jnp.exp(-(x * x))

        values = [at(lo), at(hi)]
        inside = [True, True]
        for r in _HERMITE_ROOTS[n]:
            values.append(jnp.full_like(lo, c * float(nppoly.polyval(r, h)) * math.exp(-r * r)))
            inside.append((lo <= r) & (r <= hi))
        dlo, dhi = _hull_of(values, inside)
        return _widen(dlo, dhi, 1.0, _DERIV_REL * abs(c) * _HERMITE_SUP[n - 1])

    return Smooth(name, series, derivative_range)


ERF = _erf_family("erf", 1.0, jax.lax.erf)
ERFC = _erf_family("erfc", -1.0, jax.lax.erfc)

TANH = _family(_TANH)
LOGISTIC = _family(_LOGISTIC)
SOFTPLUS = _family(_SOFTPLUS)

#: The smooth functions defined here, by name.
SMOOTH_FUNCTIONS = {f.name: f for f in (TANH, LOGISTIC, SOFTPLUS, EXP, EXPM1, LOG, LOG1P, SQRT,
                                        RSQRT, RECIPROCAL, SIN, COS, ERF, ERFC)}


# ------------------------------------------------------------------------------------------
# composition


def compose(f: Smooth, a: tm.TaylorModel, mono: tm.Monomials) -> tm.TaylorModel:
    r"""``f(a)`` for a Taylor model ``a``, with or without remainder symbols.

    Without symbols: :func:`compose_series`. With them, ``a = p + delta`` (``p`` the polynomial,
    ``delta = sum_g gen_g e_g + rho`` the remainder, ``|delta| <= Delta``), the polynomial is
    composed through the series and the remainder through the mean value theorem:

    .. math::
       f(p + \delta) = f(p) + f'(\xi)\,\delta \in f(p) + s \sum_g \mathrm{gen}_g e_g
       + \big[\pm\big(|s|\,r + \sigma \Delta\big)\big],
       \qquad f'(\xi) \in [s - \sigma, s + \sigma],

    with ``[s - sigma, s + sigma]`` an enclosure of ``f'`` over the enclosure of ``a``: the
    symbols pass through ``f`` scaled by ``s``, exactly, and only ``sigma Delta`` (small where
    ``f'`` varies little over the value's range) joins the remainder. Where the plain interval
    ``f([lo, hi])`` is better, that interval (the symbols dropped there).
    """
    if a.gen is None:
        return compose_series(f, a, mono)
    base = compose_series(f, tm.TaylorModel(a.coef, jnp.zeros_like(a.rad)), mono,
                          fallback=False)
    n = tm.n_symbols(a)
    delta = tm.up(a.rad + tm.gen_abs(a), n + 1)
    lo, hi = tm.poly_range(a.coef, mono)
    lo, hi = lo - delta, hi + delta
    pad = tm.gamma(2) * jnp.maximum(jnp.abs(lo), jnp.abs(hi)) + tm.TINY
    dlo, dhi = f.derivative_range(lo - pad, hi + pad, 1)
    s = 0.5 * dlo + 0.5 * dhi
    sigma = tm.up(jnp.maximum(dhi - s, s - dlo), 2)
    # materialised once per entry (not recomputed for each of the G symbols' rows)
    s, sigma = tm.materialize(s), tm.materialize(sigma)
    gen = s[None] * a.gen
    rounding = tm.UNIT_ROUNDOFF * jnp.sum(jnp.abs(gen), axis=0)
    rad = tm.up(base.rad + jnp.abs(s) * a.rad + sigma * delta + rounding, 4)
    result = tm.TaylorModel(base.coef, rad, gen)
    rlo, rhi = f.derivative_range(lo - pad, hi + pad, 0)
    olo, ohi = tm.bounds(result, mono)
    width_i = rhi - rlo
    keep = (rad + tm.gen_abs(result) < 0.5 * width_i) & (ohi - olo < 4.0 * width_i)
    keep = keep & jnp.isfinite(s) & jnp.isfinite(sigma)
    use_interval = ~keep & jnp.isfinite(rlo) & jnp.isfinite(rhi)
    fallback = tm.from_interval(rlo, rhi, mono)
    # the choice materialised once per entry, not recomputed for every symbol's row
    use_interval = tm.materialize(use_interval)
    return tm.select(use_interval, result, fallback)


def compose_series(f: Smooth, a: tm.TaylorModel, mono: tm.Monomials, *,
                   fallback: bool = True) -> tm.TaylorModel:
    r"""``f(a)``: the Taylor series of ``f`` at ``a``'s constant coefficient ``u_0`` composed
    with ``v = a - u_0 = V + rho`` (``V`` its polynomial, ``|rho| <= r``); where the plain
    interval ``f([lo, hi])`` is better than the result (its remainder alone as wide, or its
    range four times wider: large boxes, saturated units), that interval instead (interval
    arithmetic as the fallback).

    With ``a_j = f^(j)(u_0) / j!`` and ``P_j = (V^j)_{<= K}`` (truncated powers: ``V`` has no
    constant term, so ``V^j`` starts at degree ``j`` and each product multiplies only the
    monomials that can meet),

    .. math::
       f(u_0 + v) \in a_0 + \sum_{j=1}^{K} a_j P_j + \Big[\pm \Big(\sum_j |a_j|\,
       \|V^j\|_{> K} + \sum_j |a_j|\, j\, r\, (\bar V + r)^{j-1} + |R_{K+1}|
       + \sum_j e_j (\bar V + r)^j\Big)\Big]

    where ``||V^j||_{>K}`` bounds the dropped high-degree part (from the degree norms of ``V``:
    the coefficients above ``K`` of ``(sum_k ||V_k|| s^k)^j``), the second sum the remainder
    ``rho`` (mean value theorem), ``R_(K+1)`` the Lagrange remainder and ``e_j`` the errors of
    the coefficients ``a_j``; plus the rounding of the arithmetic (``gamma``).
    """
    k = mono.order
    u0 = a.coef[0]
    r = a.rad
    vcoef = a.coef[1:]
    vlo, vhi = tm.poly_range(jnp.concatenate([jnp.zeros_like(u0)[None], vcoef], axis=0), mono)
    vlo, vhi = vlo - tm.up(r, 1), vhi + tm.up(r, 1)
    coefs, errs = f.series(u0, k)
    # f^(K+1) / (K+1)! over the range of u (the hull of [vlo, vhi] and the Chebyshev interval)
    mid, rho = _chebyshev_interval(vlo, vhi)
    pad = tm.gamma(2) * (jnp.abs(u0) + jnp.abs(mid) + rho) + tm.TINY
    xlo, xhi = u0 + (mid - rho) - pad, u0 + (mid + rho) + pad
    dlo, dhi = f.derivative_range(xlo, xhi, k + 1)
    dmax = jnp.maximum(jnp.abs(dlo), jnp.abs(dhi))
    # the Lagrange remainder f^(K+1)(xi) / (K+1)! v^(K+1), or Chebyshev interpolation's
    vmax = jnp.maximum(-vlo, vhi)
    rem = dmax * vmax ** (k + 1)
    cheb, cheb_rem = _chebyshev_series(f, u0, mid, rho, dmax, k)
    taylor_total = rem + sum(errs[j] * (vmax + 1.0) ** j for j in range(k + 1))
    use = (cheb_rem < taylor_total) & jnp.all(jnp.isfinite(cheb), axis=0)
    # materialised: fused into their consumers, the nodes' values would be recomputed for
    # every monomial of the products below
    coefs = tm.materialize(jnp.where(use[None], cheb, coefs))
    errs = tm.materialize(jnp.where(use[None], 0.0, errs))
    rem = tm.materialize(jnp.where(use, cheb_rem, rem))
    norms = tm.degree_norms(a.coef, mono)[1:]  # ||V_1|| .. ||V_K||
    vbar = sum(norms, jnp.zeros_like(u0)) if k else jnp.zeros_like(u0)
    vtot = vbar + r
    # truncated powers P_j and the norms of V^j split into degrees <= K (low) and above (high)
    vfull = jnp.concatenate([jnp.zeros_like(u0)[None], vcoef], axis=0)
    power = vfull  # P_1 (no constant term)
    low = [jnp.zeros_like(u0)] + norms  # degree norms of V^1 up to K
    high = jnp.zeros_like(u0)
    slack = jnp.zeros_like(u0)
    acc = jnp.zeros_like(vfull)
    for j in range(1, k + 1):
        if j > 1:
            power = tm.truncated_product(power, vfull, mono, j - 1, 1)
            new_low = [jnp.zeros_like(u0)] * (k + 1)
            new_high = high * vbar
            for i1 in range(j - 1, k + 1):
                for i2 in range(1, k + 1):
                    if i1 + i2 <= k:
                        new_low[i1 + i2] = new_low[i1 + i2] + low[i1] * norms[i2 - 1]
                    else:
                        new_high = new_high + low[i1] * norms[i2 - 1]
            low, high = new_low, new_high
            width = mono.product_indices(j - 1, 1)[3]
            slack = slack + jnp.abs(coefs[j]) * tm.gamma(j * width + 4) * vtot**j
        aj = coefs[j]
        acc = acc + aj[None] * power
        slack = (slack + jnp.abs(aj) * high + jnp.abs(aj) * j * r * vtot ** (j - 1)
                 + errs[j] * vtot**j + tm.gamma(2 * k + 2) * jnp.abs(aj) * sum(low))
    out_coef = jnp.concatenate([coefs[0][None], acc[1:]], axis=0)
    rounding = tm.gamma(2 * k + 4) * jnp.sum(jnp.abs(out_coef), axis=0)
    result = tm.TaylorModel(out_coef, tm.up(slack + errs[0] + rem + rounding, 3 * k + 8))
    if not fallback:
        return result
    # interval arithmetic as the fallback: it forgets the dependence on x, so only where the
    # Taylor model is no better (its remainder alone as wide) or far worse (a blown-up
    # polynomial on a large box)
    rlo, rhi = f.derivative_range(xlo, xhi, 0)
    olo, ohi = tm.bounds(result, mono)
    width_i = rhi - rlo
    keep = (result.rad < 0.5 * width_i) & (ohi - olo < 4.0 * width_i)
    use_interval = ~keep & jnp.isfinite(rlo) & jnp.isfinite(rhi)
    return tm.select(use_interval, result, tm.from_interval(rlo, rhi, mono))



# ------------------------------------------------------------------------------------------
# Chebyshev interpolation (ours: a Chebyshev model's remainder inside the Taylor model)


def _chebyshev_interval(vlo, vhi):
    """``(mid, rho)`` with ``[mid - rho, mid + rho]`` containing ``[vlo, vhi]`` (rounded out)."""
    mid = 0.5 * vlo + 0.5 * vhi
    return mid, tm.up(jnp.maximum(mid - vlo, vhi - mid), 2)


@functools.cache
def _chebyshev_tables(k: int):
    """The ``K + 1`` Chebyshev nodes ``s_i = cos((2i + 1) pi / (2K + 2))`` of ``[-1, 1]``, the
    matrix taking values at them to the power-basis coefficients of their interpolant, and the
    binomial table of the shift ``w -> w + mu`` (cached per ``K``, read-only)."""
    n = k + 1
    s = np.cos((2 * np.arange(n) + 1) * np.pi / (2 * n))
    tk = np.polynomial.chebyshev.chebvander(s, k)  # tk[i, j] = T_j(s_i)
    cheb = 2.0 / n * tk.T
    cheb[0] *= 0.5
    to_power = np.zeros((n, n))
    for j in range(n):
        to_power[: j + 1, j] = np.polynomial.chebyshev.cheb2poly([0.0] * j + [1.0])
    binom = np.array([[math.comb(m, j) for m in range(n)] for j in range(n)], np.float64)
    tables = (s, to_power @ cheb, binom)
    for table in tables:
        table.setflags(write=False)
    return tables


def _chebyshev_series(f: Smooth, u0, mid, rho, dmax, k: int):
    r"""The interpolant ``q(v) = sum_j b_j v^j`` of ``f(u_0 + v)`` at the ``K + 1`` Chebyshev
    nodes of ``[mid - rho, mid + rho]``, and a bound ``E`` on ``|f(u_0 + v) - q(v)|`` there.

    With ``I`` the exact interpolation at the nodes actually used (``v_i``, within ``delta`` of
    the Chebyshev nodes), ``f - q = (f - I f) + I(f - q)``:

    .. math::
       |f - I f| \le \max_\xi \Big|\frac{f^{(K+1)}(\xi)}{(K+1)!}\Big|
       \Big(\frac{\rho^{K+1}}{2^K} + (K+1)\,\delta\,(2\rho + \delta)^K\Big),
       \qquad |I(f - q)| \le \Lambda \max_i |f(u_0 + v_i) - q(v_i)|

    (the interpolation error with the nodes' polynomial ``prod_i (v - v_i)``, whose maximum is
    ``rho^(K+1) / 2^K`` at the Chebyshev nodes; ``Lambda`` twice Rivlin's bound
    ``2/pi ln(K+1) + 1`` on their Lebesgue constant, the factor two for the nodes' rounding).
    The first term is ``2^K`` times smaller than Taylor's Lagrange remainder on the same
    interval; the second is the rounding of the values, measured at the nodes, whatever
    rounding the coefficients ``b_j`` carry (they are noisy where ``rho`` is tiny, which the
    measurement sees). ``E`` is infinite where ``rho = 0`` (a point: Taylor's series is exact).
    """
    nodes, to_power, binom = _chebyshev_tables(k)
    shape = u0.shape
    v = mid[None] + rho[None] * jnp.asarray(nodes).reshape((-1,) + (1,) * len(shape))
    x = u0[None] + v
    values, verr = f.series(x, 0)
    values, verr = values[0], verr[0]
    d = jnp.tensordot(jnp.asarray(to_power), values, axes=1)  # q in w = (v - mid) / rho
    safe = jnp.where(rho > 0, rho, 1.0)
    # b~_j = sum_m binom(m, j) (-mu)^(m - j) d_m, mu = mid / rho: q in powers of v / rho; then
    # b_j = b~_j / rho^j (one table of powers and one contraction, for a small program)
    pows = _powers(-mid / safe, k)
    lag = np.subtract.outer(np.arange(k + 1), np.arange(k + 1)).T  # lag[j, m] = m - j
    shift = jnp.asarray(binom)[(...,) + (None,) * len(shape)] * pows[np.maximum(lag, 0)]
    scaled = jnp.sum(shift * d[None], axis=1)
    coefs = scaled / _powers(safe, k)
    # the nodes are v'_i = x_i - u_0 (real numbers, within delta of Chebyshev's): the
    # discrepancy there is the values' error, q(v'_i) - q(v_i) (|v'_i - v_i| <= u |x_i|, times
    # a bound on |q'|) and the rounding of q(v_i) (K + 1 products of at most K + 1 factors)
    vp = _powers(v, k)  # (K + 1, K + 1, *shape): v_i^j
    terms = coefs[:, None] * vp
    q = jnp.sum(terms, axis=0)
    q_abs = jnp.sum(jnp.abs(terms), axis=0)
    reach = tm.up(jnp.abs(mid) + rho, 2) * (1.0 + 1e-12)
    slope = jnp.sum(np.arange(1.0, k + 1.0).reshape((-1,) + (1,) * len(shape))
                    * jnp.abs(coefs[1:]) * _powers(reach, k - 1), axis=0)
    disc = (jnp.abs(values - q) + verr + slope[None] * tm.gamma(1) * jnp.abs(x)
            + tm.gamma(2 * k + 3) * (q_abs + jnp.abs(values)))
    lebesgue = 2.0 * (2.0 / math.pi * math.log(k + 1) + 1.0)
    delta = tm.gamma(4) * (jnp.abs(u0) + jnp.abs(mid) + rho) + tm.TINY
    nodal = rho ** (k + 1) / 2.0**k + (k + 1) * delta * (2.0 * rho + delta) ** k
    rem = tm.up(dmax * tm.up(nodal, k + 4) + lebesgue * tm.up(jnp.max(disc, axis=0), 1), 2)
    ok = (rho > 0) & jnp.isfinite(rem)
    return coefs, jnp.where(ok, rem, jnp.inf)


def _powers(x, k: int):
    """``x^0 .. x^k`` stacked on a new leading axis."""
    out = [jnp.ones_like(x)]
    for _ in range(k):
        out.append(out[-1] * x)
    return jnp.stack(out)
