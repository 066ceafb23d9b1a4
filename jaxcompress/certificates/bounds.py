"""Bound rules: per-activation closed forms for ``sup |sigma|`` and ``sup |sigma'|`` on complex
rectangles, real-line Lipschitz constants and distances to singularities.

Every certificate quantity that involves the activation goes through the
:class:`~jaxcompress.activations.BoundRule` on its activation record. The
rectangles are ``{u : |Im u| <= s, |Re u| <= A}`` (``s`` the strip half-width, ``A`` the
real-part bound, ``|u| <= U = sqrt(A^2 + s^2)``). The closed forms, with their proofs:

* sigmoid: ``|1 + e^{-a-ib}|^2 = 1 + 2 p cos b + p^2`` (``p = e^{-a}``) is ``>= 1`` if
  ``cos b >= 0`` and ``>= sin^2 b`` otherwise, so ``sup |sigma| = 1`` (``s <= pi/2``),
  ``1/sin s`` (``pi/2 < s < pi``). ``sigma' = 1/(4 cosh^2(u/2))`` and
  ``|cosh(a+ib)|^2 = sinh^2 a + cos^2 b`` give ``sup |sigma'| = 1/(4 cos^2(s/2))``.
* tanh: ``|tanh(a+ib)|^2 = (cosh 2a - cos 2b)/(cosh 2a + cos 2b)`` gives ``1`` (``s <= pi/4``),
  ``tan s`` (``s < pi/2``); ``|tanh'| = 1/(sinh^2 a + cos^2 b) <= 1/cos^2 s``.
* softplus ``log(1 + e^u)``: ``|arg(1 + e^u)| <= |b|`` and
  ``log m(s) <= log|1 + e^u| <= softplus(A)`` (``m = 1`` or ``sin s`` as for the sigmoid), so
  ``|softplus| <= sqrt(max(softplus(A), -log m(s))^2 + s^2)``; ``softplus' = sigma``.
* SiLU ``u sigma(u)``: ``U M_sigma(s)``; derivative ``M_sigma(s) + U/(4 cos^2(s/2))``.
* GELU ``u Phi(u)``: ``Phi(a+ib) = Phi(a) + i int_0^b phi(a+it) dt`` and
  ``|phi(a+it)| <= e^{t^2/2}/sqrt(2 pi)`` give ``|Phi| <= 1 + s e^{s^2/2}/sqrt(2 pi)``; so
  ``|gelu| <= U (1 + s e^{s^2/2}/sqrt(2 pi))``, ``|gelu'| <= that factor + U e^{s^2/2}/
  sqrt(2 pi)``.
* tanh-GELU ``u (1 + tanh v)/2``, ``v = c(u + beta u^3)``: ``|Im v| <= t := c(s + beta(3 A^2 s +
  s^3))``, then the tanh bounds at ``t`` (valid while ``t < pi/2``) and
  ``|v'| <= c(1 + 3 beta U^2)``.
* sin: ``|sin(a+ib)|^2 = sin^2 a + sinh^2 b <= cosh^2 b`` and ``|cos(a+ib)|^2 = cos^2 a +
  sinh^2 b <= cosh^2 b``: both ``<= cosh s``. Entire; real Lipschitz constant 1.
* identity: ``U`` and 1.

Real-line Lipschitz constants (Assumption 14 of the paper): sigmoid 1/4, tanh 1, softplus 1,
sin 1, identity 1 (exact); SiLU 1.0999, GELU 1.129, tanh-GELU 1.1291 (maxima 1.09984, 1.12890,
1.12899 found on a 1e-5 grid, rounded up by more than the grid's second-derivative correction;
checked in the tests). A rule with ``lipschitz = inf`` marks an activation that violates
Assumption 14 (such as ``exp``): the paper's Lemmas 15 and 19 then do not apply.

Distances to singularities (Eq. 5 of the paper): ``singular_distance(b)`` is the distance from a
real ``b`` to the nearest singularity; ``interval_distance(U)`` is
``inf_{|u| <= U, u real} singular_distance(u)``, the paper's ``rho_sigma`` when the layer's
centres ``w^T f(0)`` fill ``[-U, U]``. Rules may give it in closed form; otherwise
:func:`interval_distance` bounds it from below on a grid, using that a distance to a closed set
is 1-Lipschitz.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from jaxcompress.activations import (
    GELU_TANH_B,
    GELU_TANH_C,
    GELU_TANH_OMITTED_IM,
    BoundRule,
    gelu_tanh_poles,
    get_bound_rule,
    has_bound_rule,
    register_bound_rule,
)

# The rules live on the activation records (jaxcompress.activations: one registry); this module
# holds the closed forms and attaches them at import.
__all__ = ["BoundRule", "get_bound_rule", "has_bound_rule", "interval_distance",
           "register_bound_rule"]


def interval_distance(rule: BoundRule, half_width: float, n_grid: int = 4097) -> float:
    """``inf_{|u| <= U} dist(u, singularities of sigma)`` for real ``u`` (a lower bound).

    The rule's closed form when it has one. Otherwise ``dist`` is 1-Lipschitz (a distance to a
    closed set), so its minimum over ``[-U, U]`` is at least the minimum over a grid of spacing
    ``h`` minus ``h / 2``.
    """
    u_max = float(half_width)
    if rule.interval_distance is not None:
        return float(rule.interval_distance(u_max))
    if not math.isfinite(u_max):
        return float(np.min(rule.singular_distance(np.array([0.0]))))  # pragma: no cover
    grid = np.linspace(-u_max, u_max, n_grid)
    h = grid[1] - grid[0] if n_grid > 1 else 0.0
    vals = np.asarray(rule.singular_distance(grid), np.float64)
    return max(float(np.min(vals)) - h / 2, 0.0)


# ------------------------------------------------------------------------------------------------
# closed forms
# ------------------------------------------------------------------------------------------------


def _inf_where(cond: np.ndarray, value: np.ndarray) -> np.ndarray:
    return np.where(cond, value, np.inf)


def _sig_sup(s: np.ndarray) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        val = np.where(s <= np.pi / 2, 1.0, 1.0 / np.sin(np.minimum(s, np.pi)))
    return _inf_where(s < np.pi, val)


def _sig_dsup(s: np.ndarray) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        val = 0.25 / np.cos(np.minimum(s, np.pi) / 2) ** 2
    return _inf_where(s < np.pi, val)


def _tanh_sup(s: np.ndarray) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        val = np.where(s <= np.pi / 4, 1.0, np.tan(np.minimum(s, np.pi / 2)))
    return _inf_where(s < np.pi / 2, val)


def _tanh_dsup(s: np.ndarray) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        val = 1.0 / np.cos(np.minimum(s, np.pi / 2)) ** 2
    return _inf_where(s < np.pi / 2, val)


def _modulus(s, a):
    return np.sqrt(np.asarray(a, np.float64) ** 2 + np.asarray(s, np.float64) ** 2)


def _softplus_sup(s, a):
    s = np.asarray(s, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        low = np.where(s <= np.pi / 2, 0.0, -np.log(np.sin(np.minimum(s, np.pi))))
    lm = np.maximum(np.logaddexp(0.0, a), low)
    return _inf_where(s < np.pi, np.sqrt(lm * lm + s * s))


_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _gelu_phi_factor(s):
    s = np.asarray(s, np.float64)
    with np.errstate(over="ignore"):
        return np.exp(0.5 * s * s) / _SQRT_2PI


def _gelu_sup(s, a):
    return _modulus(s, a) * (1.0 + np.asarray(s, np.float64) * _gelu_phi_factor(s))


def _gelu_dsup(s, a):
    e = _gelu_phi_factor(s)
    return 1.0 + np.asarray(s, np.float64) * e + _modulus(s, a) * e


def _gelu_tanh_t(s, a):
    s = np.asarray(s, np.float64)
    a = np.asarray(a, np.float64)
    return GELU_TANH_C * (s + GELU_TANH_B * (3.0 * a * a * s + s**3))


def _gelu_tanh_sup(s, a):
    return _modulus(s, a) * (1.0 + _tanh_sup(_gelu_tanh_t(s, a))) / 2.0


def _gelu_tanh_dsup(s, a):
    t = _gelu_tanh_t(s, a)
    u = _modulus(s, a)
    vprime = GELU_TANH_C * (1.0 + 3.0 * GELU_TANH_B * u * u)
    return (1.0 + _tanh_sup(t)) / 2.0 + u * vprime * _tanh_dsup(t) / 2.0


def _cosh_sup(s, a):
    s = np.asarray(s, np.float64)
    with np.errstate(over="ignore"):
        return np.cosh(s) + 0.0 * np.asarray(a, np.float64)


def _dist_poles(offset: float) -> Callable[[np.ndarray], np.ndarray]:
    """Distance from real b to the nearest of the poles i*offset*(2m+1)."""

    def dist(b):
        return np.sqrt(np.asarray(b, np.float64) ** 2 + offset**2)

    return dist


def _min_at_zero(offset: float) -> Callable[[float], float]:
    """``inf_{|u| <= U} sqrt(u^2 + offset^2) = offset`` (attained at ``u = 0``)."""
    return lambda u_max: float(offset)


def _dist_entire(b):
    return np.full(np.shape(b), np.inf)


def _interval_entire(u_max: float) -> float:
    return math.inf


def _dist_gelu_tanh(b):
    b = np.asarray(b, np.float64)
    d = np.min(np.abs(b[..., None] - gelu_tanh_poles()), axis=-1)
    return np.minimum(d, GELU_TANH_OMITTED_IM)


def _interval_gelu_tanh(u_max: float) -> float:
    """Per pole ``p``: ``min_{|u| <= U} |u - p| = |Im p|`` if ``|Re p| <= U``, else
    ``sqrt((|Re p| - U)^2 + Im p^2)`` (exact); the omitted poles are at least
    :data:`GELU_TANH_OMITTED_IM` away."""
    p = gelu_tanh_poles()
    gap = np.maximum(np.abs(p.real) - float(u_max), 0.0)
    return float(min(np.min(np.sqrt(gap**2 + p.imag**2)), GELU_TANH_OMITTED_IM))


def _c_sigmoid(z):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def _c_dsigmoid(z):
    s = _c_sigmoid(z)
    return s * (1.0 - s)


def _c_softplus(z):
    with np.errstate(all="ignore"):
        return np.where(z.real > 0, z + np.log1p(np.exp(-z)), np.log1p(np.exp(z)))


def _c_Phi(z):
    from scipy.special import erf  # jax depends on scipy; erf accepts complex arguments

    return 0.5 * (1.0 + erf(z / math.sqrt(2.0)))


def _c_phi(z):
    with np.errstate(all="ignore"):
        return np.exp(-0.5 * z * z) / _SQRT_2PI


def _c_gelu_tanh(z):
    with np.errstate(all="ignore"):
        return 0.5 * z * (1.0 + np.tanh(GELU_TANH_C * (z + GELU_TANH_B * z**3)))


def _c_dgelu_tanh(z):
    with np.errstate(all="ignore"):
        th = np.tanh(GELU_TANH_C * (z + GELU_TANH_B * z**3))
        return 0.5 * (1.0 + th) + 0.5 * z * (1.0 - th * th) * GELU_TANH_C * (
            1.0 + 3 * GELU_TANH_B * z * z)


def _ignore_a(fn):
    return lambda s, a: fn(s) + 0.0 * np.asarray(a, np.float64)


register_bound_rule(BoundRule(
    name="sigmoid", sup=_ignore_a(_sig_sup), dsup=_ignore_a(_sig_dsup), lipschitz=0.25,
    singular_distance=_dist_poles(math.pi), cfn=_c_sigmoid, cdfn=_c_dsigmoid,
    interval_distance=_min_at_zero(math.pi),
    how="sup|sigma| = 1 (s <= pi/2), 1/sin s (s < pi); sup|sigma'| = 1/(4 cos^2(s/2))"))
register_bound_rule(BoundRule(
    name="tanh", sup=_ignore_a(_tanh_sup), dsup=_ignore_a(_tanh_dsup), lipschitz=1.0,
    singular_distance=_dist_poles(math.pi / 2), cfn=np.tanh,
    cdfn=lambda z: 1.0 - np.tanh(z) ** 2, interval_distance=_min_at_zero(math.pi / 2),
    how="sup|tanh| = 1 (s <= pi/4), tan s (s < pi/2); sup|tanh'| = 1/cos^2 s"))
register_bound_rule(BoundRule(
    name="softplus", sup=_softplus_sup, dsup=_ignore_a(_sig_sup), lipschitz=1.0,
    singular_distance=_dist_poles(math.pi), cfn=_c_softplus, cdfn=_c_sigmoid,
    interval_distance=_min_at_zero(math.pi),
    how="|log(1+e^u)| <= sqrt(max(softplus(A), -log m(s))^2 + s^2); softplus' = sigmoid"))
register_bound_rule(BoundRule(
    name="silu", sup=lambda s, a: _modulus(s, a) * _sig_sup(s),
    dsup=lambda s, a: _sig_sup(s) + _modulus(s, a) * _sig_dsup(s), lipschitz=1.0999,
    singular_distance=_dist_poles(math.pi), cfn=lambda z: z * _c_sigmoid(z),
    cdfn=lambda z: _c_sigmoid(z) + z * _c_dsigmoid(z), interval_distance=_min_at_zero(math.pi),
    how="|u sigma(u)| <= |u| sup|sigma|; derivative sigma + u sigma'"))
register_bound_rule(BoundRule(
    name="gelu", sup=_gelu_sup, dsup=_gelu_dsup, lipschitz=1.129,
    singular_distance=_dist_entire, cfn=lambda z: z * _c_Phi(z),
    cdfn=lambda z: _c_Phi(z) + z * _c_phi(z), interval_distance=_interval_entire,
    how="|Phi(a+ib)| <= 1 + s e^{s^2/2}/sqrt(2 pi), |phi(a+ib)| <= e^{s^2/2}/sqrt(2 pi)"))
register_bound_rule(BoundRule(
    name="gelu_tanh", sup=_gelu_tanh_sup, dsup=_gelu_tanh_dsup, lipschitz=1.1291,
    singular_distance=_dist_gelu_tanh, cfn=_c_gelu_tanh, cdfn=_c_dgelu_tanh, strip_only=False,
    interval_distance=_interval_gelu_tanh,
    how="tanh bounds at |Im c(u + 0.044715 u^3)| <= c(s + 0.044715 (3 A^2 s + s^3))"))
register_bound_rule(BoundRule(
    name="sin", sup=_cosh_sup, dsup=_cosh_sup, lipschitz=1.0, singular_distance=_dist_entire,
    cfn=np.sin, cdfn=np.cos, interval_distance=_interval_entire,
    how="|sin(a+ib)|, |cos(a+ib)| <= cosh b"))
register_bound_rule(BoundRule(
    name="identity", sup=_modulus, dsup=lambda s, a: np.ones(np.broadcast(s, a).shape),
    lipschitz=1.0, singular_distance=_dist_entire, cfn=lambda z: z,
    cdfn=lambda z: np.ones_like(z), interval_distance=_interval_entire,
    how="|u| <= sqrt(A^2 + s^2); derivative 1"))
