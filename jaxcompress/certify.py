"""Certificates: the compression theorem's constants as numbers, and compression to a tolerance.

**Provenance of the constants.** The paper's text (Wang, Wang & Ziyin 2026) is not available to
us. Every bound in this module is our own derivation from first principles, organised like the
paper's Theorems 5-6, Lemmas 10, 15, 19 and Appendices C, D, G. Equation numbers (Eq. 4-8, 17, 20,
21, 62, 68, 69, 72, 75, 100, 101) are *labels* saying which quantity of the paper a number plays
the role of; they are not transcriptions, and our constants may differ from the paper's. The
proofs are short and given below; each report entry says whether it is ``"rigorous"`` (a proven
bound, computed in closed form or by exact linear algebra; floating-point rounding aside) or an
``"estimate"`` (sampled), and how it was obtained.

Setting
-------
Hidden layers ``l = 1..L``: ``u^l = h^{l-1} K_l + b_l``, ``h^l = sigma(u^l)``, ``h^0 = z``,
``F = h^L K_{L+1} + b_{L+1}`` (Flax layout; column ``i`` of ``K_l`` is the incoming weight vector
``w_i`` of neuron ``i``). The domain is a ball of radius ``R`` around its centre ``c`` (a box is
replaced by its circumscribed ball); we write ``z = x - c`` and fold ``c K_1`` into ``b_1``, so the
expansion point is ``0``. The complex ball is ``B^C_r = {x + iy in C^d : |x|^2 + |y|^2 < r^2}``;
for a real unit vector ``e`` it contains the disc ``{t e : t in C, |t| < r}``.

1. Taylor tail (Theorems 5-6 analogue, Schwarz form)
   Compressing layer ``l`` replaces ``y = sum_i v_i g_i`` (``g_i = sigma(u^l_i)``, ``v`` a column
   of the outgoing kernel) by ``ytilde = sum_{j in K} vt_j g_j`` whose Taylor coefficients at 0
   agree with ``y``'s up to order ``k``. Then ``e = y - ytilde = sum_i w_i g_i`` with
   ``w = v - embed(vt)``. If every ``g_i`` is holomorphic on ``B^C_rho0`` with ``|g_i| <= M_i``,
   put ``phi(t) = e(t x/|x|)``: holomorphic on ``|t| < rho0``, ``|phi| <= A := sum_i |w_i| M_i``,
   with a zero of order ``k + 1`` at 0. By the maximum principle applied to ``phi(t)/t^{k+1}``
   on circles ``|t| = r -> rho0`` (the Schwarz lemma),

   .. math:: |e(x)| = |\\phi(|x|)| \\le A\\,(R/\\rho_0)^{k+1}, \\qquad |x| \\le R.

   The Cauchy-estimate form ``|phi_j| <= A rho0^{-j}`` summed over ``j > k`` gives the weaker
   ``A (R/rho0)^{k+1} rho0/(rho0 - R)``; that is the form of ``C0 = V_max M_g rho0/(rho0 - R)``,
   ``lambda = log(rho0/R)`` (Eq. 20) and of ``k*`` (Eq. 21). ``k_cert`` (Eq. 72) uses the Schwarz
   form and optimises ``rho0`` per ``k``; since its candidate radii include ``rho0`` and
   ``rho0/(rho0 - R) > 1``, ``k_cert <= k*``. Because ``e(0) = 0`` too,
   ``e = sum_i w_i (g_i - g_i(0))`` and ``A`` may be replaced by ``sum_i |w_i| M'_i`` with
   ``M'_i >= sup |g_i(z) - g_i(0)|``: by the mean-value inequality on the segment
   ``u_i(0) -> u_i(z)`` (notation of section 3) ``M'_i = min(M_i + |g_i(0)|, S_i (a_i +
   delta_i))``, far below ``M_i`` for the nearly constant neurons of deep layers. ``k_cert``
   uses ``M'_g = min(M_g, max_i M'_i)``; ``M_g`` (Eq. 17) and ``C0`` keep ``sup |g_i|``.

2. Selection factor (Lemma 10 analogue)
   With maxvol, ``|C_ai| <= 1 + delta`` and ``C_ai = [a = i]`` for kept ``i``. Then
   ``w_i = v_i`` (``i`` not kept) and ``w_a = -sum_{i not kept} C_ai v_i`` (``a`` kept), so
   ``||w||_1 <= (1 + n (1 + delta)) ||v||_1`` with ``n = min(D_k, d_l)`` kept neurons. A priori,
   ``||v||_1 <= V_max = max_o ||K_{l+1}[:, o]||_1`` (Eq. 7). Writing ``Gamma_k = 1 + n_k(1+delta)``:

   .. math:: k^* = \\min\\{k : \\Gamma_k C_0 e^{-\\lambda (k+1)} \\le \\epsilon_l\\}, \\quad
             k_{cert} = \\min\\{k : \\min_{R<r<\\rho} \\Gamma_k V_{max} M'_g(r) (R/r)^{k+1}
             \\le \\epsilon_l\\}.

   Both are monotone in ``eps`` by construction (a smallest element of a growing set).

3. Holomorphy radius: the deviation chain (Eq. 4, 8 analogues)
   For ``z in B^C_r`` put ``delta^m_i(r) >= sup |u^m_i(z) - u^m_i(Re z)|``. Since ``u^m(Re z)``
   is real, ``|Im u^m_i(z)| <= delta^m_i``, and the segment from ``u^m_i(Re z)`` to
   ``u^m_i(z)`` stays in the strip ``|Im| <= delta^m_i``; with ``S_i = sup |sigma'|`` there, the
   mean-value inequality gives ``|h^m_i(z) - h^m_i(Re z)| <= S_i delta^m_i =: Delta_i``. Hence
   (layer 1 exactly: ``u^1(z) - u^1(Re z) = i y K_1``, ``|y| < r``)

   .. math:: \\delta^1_i = \\|w_i\\|_2 r, \\quad
             \\delta^{m+1}_i = \\min\\Big(\\sum_j |K_{m+1}|_{ji} \\Delta_j,\\;
             \\|K_{m+1}[:, i]\\|_2 N_m\\Big),

   with ``N_m = min(||Delta||_2, max_j S_j E_m)`` a bound on ``|h^m(z) - h^m(Re z)|_2`` and
   ``E_{m+1} = min(||K_{m+1}||_2 N_m, ||delta^{m+1}||_2)`` on ``|u^{m+1}(z) - u^{m+1}(Re z)|_2``
   (``E_1 = ||K_1||_2 r``). Both chains are valid, so their minimum is. The chain is valid (and
   every ``h^m`` holomorphic on ``B^C_r``, by induction) while every ``delta^m_i`` lies where the
   activation's bound rule is finite (``< rho_sigma``, Eq. 5). For activations unbounded on the
   strip the rules also need ``|Re u| <= A_i = |u_i(0)| + a_i + delta_i``, with ``a_i`` a bound on
   ``|u_i(x) - u_i(0)|`` over the real ball of radius ``r`` from the same two chains with the
   real-line Lipschitz constant. We report ``D_{l-1}(r) = N_{l-1}`` (``D_0 = r``),
   ``L_f(r) = D_{l-1}(r)/r`` (so ``|f(x+iy) - f(x)| <= L_f(r) r``), ``rho_f`` = the largest ``r``
   for which the chain is valid through layer ``l - 1`` (``inf`` for ``l = 1``), and ``rho`` = the
   largest ``r < rho_f`` for which it is valid through layer ``l`` (bisection; ``delta`` grows
   with ``r``). For layer 1, ``rho = rho_sigma / W_max`` exactly, ``W_max = max_i ||w_i||_2``
   (Eq. 6). Assumption 4 is ``R < rho``. ``M_g(r) = max_i sup |sigma|`` over the strip (or
   rectangle) of neuron ``i`` (Eq. 17).

4. Activation bounds (closed forms; ``s`` the strip half-width, ``A`` the real-part bound,
   ``|u| <= U = sqrt(A^2 + s^2)``)
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
   * identity: ``U`` and 1.
   Real-line Lipschitz constants: sigmoid 1/4, tanh 1, softplus 1, identity 1 (exact); SiLU
   1.0999, GELU 1.129, tanh-GELU 1.1291 (maxima 1.09984, 1.12890, 1.12899 found on a 1e-5 grid,
   rounded up by more than the grid's second-derivative correction; checked in the tests).

5. Downstream factors (Lemma 15 analogue), Lambda-bar (Lemma 19), budget (Eq. 62)
   In backward order the error of compressing layer ``l`` enters the (already compressed)
   layer ``l + 1`` as a perturbation ``e`` of its pre-activation, ``|e_j| <= E_j``. On the real
   line ``|sigma(a) - sigma(b)| <= Lip |a - b|`` componentwise, so the output moves by at most
   ``Lip^{L-l} E |Kt_{l+2}| ... |Kt_{L+1}|`` (absolute-value matrices, per output). Summing the
   ``L`` steps of the telescoping sum (network with layers ``>= l`` compressed minus the one with
   layers ``> l`` compressed) bounds ``sup |F - Ft|``. A priori, every column of
   ``Kt_{m+1} = C_m K_{m+1}[...]`` has l1 norm ``<= n_m (1 + delta) V_max^(m)``, so
   ``Lambda_l = Lip^{L-l} prod_{m>l} n_m (1 + delta) V_max^(m)``; ``Lambda_bar = max_l Lambda_l``
   depends on the orders, which depend on the budget ``eps_l = eps / (L Lambda_bar)`` (Eq. 62):
   we iterate to the fixed point (orders only grow and ``n_m <= d_m`` caps ``Lambda``, so it is
   reached). Then ``sum_l Lambda_l eps_l <= eps``. The certified widths are ``n_l = min(D_{k_l},
   d_l)``; ``width_bound = max_l n_l`` (Eq. 68), ``param_bound`` the parameter count of that
   architecture (Eq. 69), and the certificate is non-vacuous (Eq. 75) when every layer satisfies
   Assumption 4 and ``param_bound`` is below the original count.

6. A posteriori certificate
   Given the compressed network and its :class:`~jaxcompress.CompressInfo` (backward order; any
   selector or feature kind), the actual ``w`` of every layer is known, and so are the error's
   Taylor coefficients ``e_a = (Z w)_a``, computed by a float64 Taylor pass of the original
   network up to ``K_top = max_l k_l + extra_orders``. On the line ``phi(t) = e(t x/|x|)``,
   ``phi_j = p_j(xhat) = sum_{|a|=j} e_a xhat^a``, and Cauchy-Schwarz with the multinomial
   identity ``sum_{|a|=j} (j!/a!) xhat^{2a} = |xhat|^{2j} = 1`` gives
   ``|p_j(xhat)| <= P_j := (sum_{|a|=j} |e_a|^2 a!/j!)^{1/2}`` (never more than
   ``sum_{|a|=j} |e_a|``). So for every ``K <= K_top``

   .. math:: |e(x)| \\le \\sum_{j \\le K} P_j R^j + \\mathrm{tail}_K,

   with the tail beyond order ``K`` bounded either by Cauchy estimates on ``phi - phi_0``
   (``A' (R/rho0)^{K+1} rho0/(rho0 - R)``, ``A' = min(sum |w_i| M_i + |e_0|,
   sum |w_i| M'_i) >= sup |e - e_0|``) or by the Schwarz lemma applied to ``e - T_K e``
   (``(A + sum_{j<=K} P_j rho0^j) (R/rho0)^{K+1}``, ``A = min(sum |w_i| M_i, sum |w_i|
   M'_i)``); the minimum over ``K``, ``rho0`` and both forms is taken per output component. The
   terms ``|a| <= k`` are the matching residual of Eq. (41), recomputed in float64 (the info's
   float residual is reported alongside). The downstream factors use the actual compressed
   kernels. Explicit coefficients capture the cancellation between neurons that a single
   ``sum |w_i| M_i`` cannot, which makes this bound typically 10-100x the measured error.

7. Appendix G diagnostics (Eq. 100, 101)
   ``rho_pole``: the exact distance from 0 to the nearest singularity of a layer-1 neuron in the
   complex ball norm, ``min_j dist(b_j, singularities of sigma) / ||w_j||_2`` (the image of
   ``B^C_r`` under ``z -> w.z + b`` is exactly the disc of radius ``||w|| r`` around ``b``). For
   layer 1 it is the exact holomorphy radius of the layer's own neurons (``>= rho``); for layer 2
   that of ``f = h^1``; deeper it bounds the radius of ``f`` from above unless singularities
   cancel (an estimate). ``L_f_sampled`` is the sampled ``sup ||d f/dz||_2`` over ``B^C_R`` (the
   complex Jacobian, by the chain rule in complex arithmetic), ``q_hat = W_max L_f_sampled R /
   rho_sigma`` (Eq. 101 analogue: ``q_hat < 1`` means the sampled complex ball of radius ``R``
   maps into the holomorphy strip, ``q_hat > 1`` that Assumption 4 fails), and ``strip_ratio`` the
   sampled ``max |Im u^l_i| / rho_sigma`` on ``B^C_R``. All three are estimates.

References:
  Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks"
  (structure and labels only; see the provenance note above).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import Activation, get_activation
from jaxcompress.compression import CompressInfo, compress_layer
from jaxcompress.evaluate import sup_error
from jaxcompress.features import LayerFeatures, derivative_features
from jaxcompress.mlp import Params, layer_sizes, num_params, validate_params
from jaxcompress.select import MaxVol, as_selector
from jaxcompress.taylor import monomials, num_monomials

__all__ = [
    "BoundRule",
    "Certificate",
    "LayerCertificate",
    "ToleranceResult",
    "certify",
    "compress_to_tolerance",
    "get_bound_rule",
    "register_bound_rule",
]

RIGOROUS = "rigorous"
ESTIMATE = "estimate"

# ------------------------------------------------------------------------------------------------
# Bound rules: per-activation closed forms for sup |sigma|, sup |sigma'| on strips / rectangles
# ------------------------------------------------------------------------------------------------

ArrayFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class BoundRule:
    """Certified bounds for one activation (see section 4 of the module docstring).

    Attributes:
      name: the activation's registry name.
      sup: ``sup(s, A)``: an upper bound on ``|sigma(u)|`` over ``{|Im u| <= s, |Re u| <= A}``
        (arrays, broadcast), ``inf`` where no bound is proven (e.g. ``s >= rho_sigma``).
      dsup: the same for ``|sigma'(u)|``.
      lipschitz: ``sup_x |sigma'(x)|`` on the real line (an upper bound).
      singular_distance: ``dist(b)``: distance from real ``b`` to the nearest singularity of
        ``sigma`` in the complex plane (``inf`` for entire functions).
      cfn, cdfn: ``sigma`` and ``sigma'`` on complex NumPy arrays (for the sampled diagnostics).
      strip_only: whether ``sup``/``dsup`` are finite exactly when ``s < rho_sigma`` (then the
        first layer's radius is ``rho_sigma / W_max`` in closed form).
      how: one line saying where the bounds come from.
    """

    name: str
    sup: ArrayFn
    dsup: ArrayFn
    lipschitz: float
    singular_distance: Callable[[np.ndarray], np.ndarray]
    cfn: Callable[[np.ndarray], np.ndarray]
    cdfn: Callable[[np.ndarray], np.ndarray]
    strip_only: bool = True
    how: str = ""


_BOUND_RULES: dict[str, BoundRule] = {}


def register_bound_rule(rule: BoundRule, *, overwrite: bool = False) -> BoundRule:
    """Register the certificate's bound rule for an activation (``rule.name`` = its name)."""
    if rule.name in _BOUND_RULES and not overwrite:
        raise ValueError(f"register_bound_rule: {rule.name!r} already has a rule; pass "
                         "overwrite=True to replace it")
    _BOUND_RULES[rule.name] = rule
    return rule


def get_bound_rule(activation: str | Activation | Callable) -> BoundRule:
    """The :class:`BoundRule` of a registered activation, or a clear error."""
    act = get_activation(activation)
    if act.name not in _BOUND_RULES:
        raise ValueError(
            f"certify: no certified bound rule for activation {act.name!r} (rules exist for "
            f"{', '.join(_BOUND_RULES)}). Derive sup|sigma| and sup|sigma'| on strips and "
            "register them with jaxcompress.register_bound_rule(jaxcompress.BoundRule(...))."
        )
    return _BOUND_RULES[act.name]


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


_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_B = 0.044715


def _gelu_tanh_t(s, a):
    s = np.asarray(s, np.float64)
    a = np.asarray(a, np.float64)
    return _GELU_C * (s + _GELU_B * (3.0 * a * a * s + s**3))


def _gelu_tanh_sup(s, a):
    return _modulus(s, a) * (1.0 + _tanh_sup(_gelu_tanh_t(s, a))) / 2.0


def _gelu_tanh_dsup(s, a):
    t = _gelu_tanh_t(s, a)
    u = _modulus(s, a)
    vprime = _GELU_C * (1.0 + 3.0 * _GELU_B * u * u)
    return (1.0 + _tanh_sup(t)) / 2.0 + u * vprime * _tanh_dsup(t) / 2.0


def _dist_poles(offset: float) -> Callable[[np.ndarray], np.ndarray]:
    """Distance from real b to the nearest of the poles i*offset*(2m+1)."""

    def dist(b):
        return np.sqrt(np.asarray(b, np.float64) ** 2 + offset**2)

    return dist


def _dist_entire(b):
    return np.full(np.shape(b), np.inf)


@functools.cache
def _gelu_tanh_poles() -> np.ndarray:
    poles = []
    for m in range(-60, 60):
        target = 1j * math.pi * (m + 0.5) / _GELU_C
        poles.extend(np.roots([_GELU_B, 0.0, 1.0, -target]))
    return np.asarray(poles)


def _dist_gelu_tanh(b):
    b = np.asarray(b, np.float64)
    return np.min(np.abs(b[..., None] - _gelu_tanh_poles()), axis=-1)


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
        return 0.5 * z * (1.0 + np.tanh(_GELU_C * (z + _GELU_B * z**3)))


def _c_dgelu_tanh(z):
    with np.errstate(all="ignore"):
        th = np.tanh(_GELU_C * (z + _GELU_B * z**3))
        return 0.5 * (1.0 + th) + 0.5 * z * (1.0 - th * th) * _GELU_C * (1.0 + 3 * _GELU_B * z * z)


def _ignore_a(fn):
    return lambda s, a: fn(s) + 0.0 * np.asarray(a, np.float64)


register_bound_rule(BoundRule(
    name="sigmoid", sup=_ignore_a(_sig_sup), dsup=_ignore_a(_sig_dsup), lipschitz=0.25,
    singular_distance=_dist_poles(math.pi), cfn=_c_sigmoid, cdfn=_c_dsigmoid,
    how="sup|sigma| = 1 (s <= pi/2), 1/sin s (s < pi); sup|sigma'| = 1/(4 cos^2(s/2))"))
register_bound_rule(BoundRule(
    name="tanh", sup=_ignore_a(_tanh_sup), dsup=_ignore_a(_tanh_dsup), lipschitz=1.0,
    singular_distance=_dist_poles(math.pi / 2), cfn=np.tanh,
    cdfn=lambda z: 1.0 - np.tanh(z) ** 2,
    how="sup|tanh| = 1 (s <= pi/4), tan s (s < pi/2); sup|tanh'| = 1/cos^2 s"))
register_bound_rule(BoundRule(
    name="softplus", sup=_softplus_sup, dsup=_ignore_a(_sig_sup), lipschitz=1.0,
    singular_distance=_dist_poles(math.pi), cfn=_c_softplus, cdfn=_c_sigmoid,
    how="|log(1+e^u)| <= sqrt(max(softplus(A), -log m(s))^2 + s^2); softplus' = sigmoid"))
register_bound_rule(BoundRule(
    name="silu", sup=lambda s, a: _modulus(s, a) * _sig_sup(s),
    dsup=lambda s, a: _sig_sup(s) + _modulus(s, a) * _sig_dsup(s), lipschitz=1.0999,
    singular_distance=_dist_poles(math.pi), cfn=lambda z: z * _c_sigmoid(z),
    cdfn=lambda z: _c_sigmoid(z) + z * _c_dsigmoid(z),
    how="|u sigma(u)| <= |u| sup|sigma|; derivative sigma + u sigma'"))
register_bound_rule(BoundRule(
    name="gelu", sup=_gelu_sup, dsup=_gelu_dsup, lipschitz=1.129,
    singular_distance=_dist_entire, cfn=lambda z: z * _c_Phi(z),
    cdfn=lambda z: _c_Phi(z) + z * _c_phi(z),
    how="|Phi(a+ib)| <= 1 + s e^{s^2/2}/sqrt(2 pi), |phi(a+ib)| <= e^{s^2/2}/sqrt(2 pi)"))
register_bound_rule(BoundRule(
    name="gelu_tanh", sup=_gelu_tanh_sup, dsup=_gelu_tanh_dsup, lipschitz=1.1291,
    singular_distance=_dist_gelu_tanh, cfn=_c_gelu_tanh, cdfn=_c_dgelu_tanh, strip_only=False,
    how="tanh bounds at |Im c(u + 0.044715 u^3)| <= c(s + 0.044715 (3 A^2 s + s^3))"))
register_bound_rule(BoundRule(
    name="identity", sup=_modulus, dsup=lambda s, a: np.ones(np.broadcast(s, a).shape),
    lipschitz=1.0, singular_distance=_dist_entire, cfn=lambda z: z,
    cdfn=lambda z: np.ones_like(z), how="|u| <= sqrt(A^2 + s^2); derivative 1"))


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------

#: Per-layer keys of ``to_dict()`` that scripts may rely on (the issue's contract).
LAYER_KEYS = ("W_max", "V_max", "rho_sigma", "rho_f", "L_f", "rho", "assumption4", "rho0", "M_g",
              "C0", "lam", "k_star", "k_cert", "D_k", "Lambda", "eps_layer")
#: Top-level keys of ``to_dict()``.
TOP_KEYS = ("Lambda_bar", "width_bound", "param_bound", "non_vacuous")


@dataclasses.dataclass(frozen=True)
class LayerCertificate:
    """The certificate's numbers for one hidden layer (see the module docstring).

    ``status[key]`` is ``"rigorous"`` or ``"estimate"`` and ``how[key]`` says how the value was
    obtained, for every numeric field. Entries that need Assumption 4 are ``None`` when it fails.
    The ``*_post`` fields and ``order``/``residual``/``bound_layer``/``contribution`` are the a
    posteriori certificate (``None`` unless a compressed network was given).
    """

    layer: int
    width: int
    W_max: float
    V_max: float
    rho_sigma: float
    rho_f: float
    L_f: float
    L_f_radius: float
    rho: float
    assumption4: bool
    rho0: float | None
    M_g: float | None
    C0: float | None
    lam: float | None
    k_star: int | None
    k_cert: int | None
    rho_cert: float | None
    D_k: int | None
    new_width: int | None
    Lambda: float | None
    eps_layer: float | None
    bound_a_priori: float | None
    rho_pole: float
    L_f_sampled: float
    q_hat: float
    strip_ratio: float
    order: int | None = None
    residual: float | None = None
    K_tail: int | None = None
    bound_layer: float | None = None
    Lambda_post: float | None = None
    contribution: float | None = None
    status: dict = dataclasses.field(default_factory=dict)
    how: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["status"] = dict(self.status)
        out["how"] = dict(self.how)
        return out


@dataclasses.dataclass(frozen=True)
class Certificate:
    """What the theory guarantees for a network on a domain, as numbers.

    ``str(cert)`` is a readable table; :meth:`to_dict` gives JSON-ready values with the keys of
    :data:`LAYER_KEYS` per layer (under ``"layers"``) and :data:`TOP_KEYS` at the top level.
    Infinite radii are ``float('inf')`` (``json.dumps`` writes ``Infinity``); orders that no
    ``k <= k_max`` reaches are ``None``.
    """

    activation: str
    sizes: tuple[int, ...]
    radius: float
    center: tuple[float, ...] | None
    eps: float
    delta: float
    layers: tuple[LayerCertificate, ...]
    Lambda_bar: float | None
    eps_uniform: float | None
    orders: tuple[int | None, ...]
    widths: tuple[int | None, ...]
    width_bound: int | None
    param_bound: int | None
    num_params: int
    non_vacuous: bool
    bound_a_priori: float | None
    a_posteriori_bound: float | None = None
    notes: tuple[str, ...] = ()
    status: dict = dataclasses.field(default_factory=dict)
    how: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "activation": self.activation, "sizes": list(self.sizes), "radius": self.radius,
            "center": None if self.center is None else list(self.center), "eps": self.eps,
            "delta": self.delta, "layers": [li.to_dict() for li in self.layers],
            "Lambda_bar": self.Lambda_bar, "eps_uniform": self.eps_uniform,
            "orders": list(self.orders), "widths": list(self.widths),
            "width_bound": self.width_bound, "param_bound": self.param_bound,
            "num_params": self.num_params, "non_vacuous": self.non_vacuous,
            "bound_a_priori": self.bound_a_priori, "a_posteriori_bound": self.a_posteriori_bound,
            "notes": list(self.notes), "status": dict(self.status), "how": dict(self.how),
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        return _format(self)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "NO"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    v = float(v)
    if math.isinf(v):
        return "inf"
    if math.isnan(v):
        return "nan"
    return f"{v:.3e}"


_TABLE_ROWS = (
    ("W_max", "Eq. 6"), ("V_max", "Eq. 7"), ("rho_sigma", "Eq. 5"), ("rho_f", ""),
    ("L_f", "Eq. 4"), ("rho", "Eq. 8"), ("assumption4", "R < rho"), ("rho0", ""),
    ("M_g", "Eq. 17"), ("C0", "Eq. 20"), ("lam", "Eq. 20"), ("k_star", "Eq. 21"),
    ("k_cert", "Eq. 72"), ("D_k", ""), ("Lambda", "Lemma 15"), ("eps_layer", "Eq. 62"),
    ("bound_a_priori", ""), ("rho_pole", "Eq. 100"), ("L_f_sampled", ""), ("q_hat", "Eq. 101"),
    ("strip_ratio", ""),
)
_POST_ROWS = (("order", ""), ("residual", "Eq. 41"), ("K_tail", ""), ("bound_layer", ""),
              ("Lambda_post", ""), ("contribution", ""))


def _format(c: Certificate) -> str:
    center = "0" if c.center is None else str([round(x, 4) for x in c.center])
    lines = [
        f"Certificate: {c.activation} MLP {list(c.sizes)} on the ball |x - c| <= {c.radius:g} "
        f"(c = {center}), eps = {c.eps:g}, maxvol delta = {c.delta:g}",
        "(our own derivations, organised like the paper's Theorems 5-6; equation numbers are "
        "labels)",
    ]
    head = f"{'quantity':<15}{'label':<10}{'status':<10}" + "".join(
        f"{'layer ' + str(li.layer):>12}" for li in c.layers)
    lines.append(head)
    lines.append("-" * len(head))
    rows = _TABLE_ROWS + (_POST_ROWS if c.a_posteriori_bound is not None else ())
    for key, label in rows:
        statuses = {li.status.get(key, RIGOROUS) for li in c.layers}
        status = statuses.pop() if len(statuses) == 1 else "mixed"
        lines.append(f"{key:<15}{label:<10}{status:<10}" + "".join(
            f"{_fmt(getattr(li, key)):>12}" for li in c.layers))
    lines.append("")
    lines.append(f"Lambda_bar (Lemma 19)   {_fmt(c.Lambda_bar):>12}   uniform eps_l (Eq. 62) "
                 f"{_fmt(c.eps_uniform)}")
    lines.append(f"certified orders        {str(list(c.orders)):>12}   widths "
                 f"{list(c.widths)}")
    lines.append(f"width_bound (Eq. 68)    {_fmt(c.width_bound):>12}   param_bound (Eq. 69) "
                 f"{_fmt(c.param_bound)} of {c.num_params:,}")
    lines.append(f"non_vacuous (Eq. 75)    {_fmt(c.non_vacuous):>12}   a priori bound "
                 f"{_fmt(c.bound_a_priori)} <= eps")
    if c.a_posteriori_bound is not None:
        lines.append(f"a posteriori bound      {_fmt(c.a_posteriori_bound):>12}   (rigorous, for "
                     "the given compressed network)")
    for note in c.notes:
        lines.append(f"note: {note}")
    lines.append("")
    lines.append("how each entry is obtained:")
    keys = list(dict.fromkeys(k for li in c.layers for k in li.how))
    for key in keys:
        variants: dict[tuple[str, str], list[int]] = {}
        for li in c.layers:
            if key in li.how:
                variants.setdefault((li.status.get(key, RIGOROUS), li.how[key]), []).append(
                    li.layer)
        for (status, text), which in variants.items():
            scope = "" if len(variants) == 1 else f" (layer {', '.join(map(str, which))})"
            lines.append(f"  {key}{scope} [{status}]: {text}")
    for key, text in c.how.items():
        lines.append(f"  {key} [{c.status.get(key, RIGOROUS)}]: {text}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# The deviation chain (section 3)
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Net:
    """A network in float64 NumPy, centre folded into the first bias."""

    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    u0: list[np.ndarray]  # real pre-activations at the expansion point, per hidden layer
    g0: list[np.ndarray]  # sigma(u0)
    rule: BoundRule
    col2: list[np.ndarray] = dataclasses.field(init=False)
    spec: list[float] = dataclasses.field(init=False)
    absk: list[np.ndarray] = dataclasses.field(init=False)

    def __post_init__(self):
        self.col2 = [np.linalg.norm(k, axis=0) for k in self.kernels]
        self.spec = [_spectral_norm(k) for k in self.kernels]
        self.absk = [np.abs(k) for k in self.kernels]

    @property
    def n_hidden(self) -> int:
        return len(self.kernels) - 1


def _spectral_norm(k: np.ndarray) -> float:
    """An upper bound on ``||K||_2`` (rounding aside), within 1% of it.

    Small Gram matrices ``G``: the largest eigenvalue. Large ones: power iteration gives
    ``theta <= lambda_max(G)``; a successful Cholesky factorisation of ``t I - G`` then proves
    ``lambda_max(G) < t`` for ``t = 1.01 theta`` (raised by 5% until it succeeds).
    """
    gram = k.T @ k if k.shape[0] >= k.shape[1] else k @ k.T
    n = gram.shape[0]
    if n <= 256:
        return float(np.sqrt(max(float(np.linalg.eigvalsh(gram)[-1]), 0.0)))
    v = np.random.default_rng(0).standard_normal(n)
    for _ in range(30):
        v = gram @ v
        v /= max(float(np.linalg.norm(v)), 1e-300)
    t = max(float(v @ gram @ v), 1e-300) * 1.01
    eye = np.eye(n)
    for _ in range(200):
        try:
            np.linalg.cholesky(t * eye - gram)
            return float(np.sqrt(t))
        except np.linalg.LinAlgError:
            t *= 1.05
    return float(np.sqrt(max(float(np.linalg.eigvalsh(gram)[-1]), 0.0)))


def _chain(net: _Net, radii: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Deviation chain at each radius: per hidden layer ``delta, A, M, valid, D_up``.

    ``delta[r, i]`` bounds ``|u_i(z) - u_i(Re z)|`` on ``B^C_r``, ``A[r, i]`` the real part on
    the mean-value segments, ``M[r, i]`` = sup |sigma| there, ``valid[r]`` whether the chain
    proves holomorphy through this layer, ``D_up[r]`` the bound on ``|f(z) - f(Re z)|_2`` for the
    layer's upstream map.
    """
    rule, lip = net.rule, net.rule.lipschitz
    radii = np.asarray(radii, np.float64)
    r = radii[:, None]
    delta = net.col2[0][None, :] * r
    e_norm = net.spec[0] * radii
    a = net.col2[0][None, :] * r
    p_norm = net.spec[0] * radii
    valid = np.ones(radii.shape, bool)
    d_up = radii.copy()
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        for l in range(1, net.n_hidden + 1):
            big_a = np.abs(net.u0[l - 1])[None, :] + a + delta
            m = rule.sup(delta, big_a)
            s = rule.dsup(delta, big_a)
            ok = valid & np.all(np.isfinite(m) & np.isfinite(s), axis=1)
            m = np.where(ok[:, None], m, np.inf)
            # sup |g_i(z) - g_i(0)|: mean value on the segment u_i(0) -> u_i(z) (section 1)
            g0 = np.abs(net.g0[l - 1])[None, :]
            mc = np.where(ok[:, None], np.minimum(m + g0, s * (a + delta)), np.inf)
            out.append({"delta": delta, "A": big_a, "M": m, "Mc": mc, "valid": ok,
                        "D_up": np.where(valid, d_up, np.inf)})
            if l == net.n_hidden:
                break
            dh = np.where(ok[:, None], s * delta, 0.0)
            smax = np.where(ok, np.max(np.where(ok[:, None], s, 0.0), axis=1), 0.0)
            n_norm = np.minimum(np.linalg.norm(dh, axis=1), smax * e_norm)
            delta = np.minimum(dh @ net.absk[l], net.col2[l][None, :] * n_norm[:, None])
            e_norm = np.minimum(net.spec[l] * n_norm, np.linalg.norm(delta, axis=1))
            q = lip * np.minimum(p_norm, np.linalg.norm(a, axis=1))
            a = np.minimum(lip * (a @ net.absk[l]), net.col2[l][None, :] * q[:, None])
            p_norm = np.minimum(net.spec[l] * q, np.linalg.norm(a, axis=1))
            delta = np.where(ok[:, None], delta, np.inf)
            d_up = np.where(ok, n_norm, np.inf)
            valid = ok
    return out


def _radii_of_validity(net: _Net, scale: float) -> list[float]:
    """``rho`` per hidden layer: sup of the radii where the chain is valid through it."""
    n = net.n_hidden
    rule = net.rule
    grid = scale * np.geomspace(1e-8, 1e8, 321)
    res = _chain(net, grid)
    lo = np.zeros((n,))
    hi = np.full((n,), np.inf)
    for l in range(n):
        ok = res[l]["valid"]
        if ok.all():
            lo[l] = np.inf
        elif ok[0]:
            i = int(np.argmin(ok))  # first invalid grid radius (validity is monotone in r)
            lo[l], hi[l] = grid[i - 1], grid[i]
    todo = np.isfinite(hi) & (lo > 0)
    for _ in range(60):  # bisection, all layers at once
        if not todo.any():
            break
        mid = np.where(todo, 0.5 * (lo + hi), 1.0)
        res = _chain(net, mid)
        for l in np.nonzero(todo)[0]:
            if res[l]["valid"][l]:
                lo[l] = mid[l]
            else:
                hi[l] = mid[l]
        todo &= hi - lo > 1e-14 * hi
    rhos = [float(x) for x in lo]
    if rule.strip_only and math.isfinite(rhos[0]):
        # first layer in closed form: delta_i = ||w_i|| r < rho_sigma (section 3)
        rho_sigma = _rho_sigma(rule)
        rhos[0] = rho_sigma / float(np.max(net.col2[0]))
        rhos = [min(rhos[0], r) if i else r for i, r in enumerate(rhos)]
    return rhos


def _rho_sigma(rule: BoundRule) -> float:
    return float(get_activation(rule.name).rho_sigma)


def _radius_grid(radius: float, rho: float, n: int = 48) -> np.ndarray:
    """Candidate working radii in ``(R, rho)``, dense near both ends."""
    if math.isinf(rho):
        return radius * np.geomspace(1.0 + 1e-4, 1e3, 2 * n)
    q = np.unique(np.concatenate([np.geomspace(1e-5, 0.5, n), 1.0 - np.geomspace(1e-5, 0.5, n)]))
    return radius + (rho - radius) * q


# ------------------------------------------------------------------------------------------------
# Diagnostics of Appendix G (section 7): sampled complex Jacobians, pole distance
# ------------------------------------------------------------------------------------------------


def _complex_diagnostics(net: _Net, radius: float, n_samples: int, seed: int):
    """Per hidden layer: sampled sup ||df/dz||_2 and max |Im u| on B^C_R."""
    rng = np.random.default_rng(seed)
    k1 = net.kernels[0]
    d = k1.shape[0]
    g = rng.standard_normal((n_samples, 2 * d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    rad = np.ones((n_samples, 1))
    half = n_samples // 2  # half on the sphere |x|^2 + |y|^2 = R^2, half inside
    rad[half:, 0] = rng.uniform(size=n_samples - half) ** (1.0 / (2 * d))
    pts = radius * rad * g
    z = pts[:, :d] + 1j * pts[:, d:]
    rule = net.rule
    lf, im = [], []
    with np.errstate(all="ignore"):
        u = z @ k1 + net.biases[0][None, :]
        ju = np.broadcast_to(k1.T[None], (n_samples,) + k1.T.shape)
        lf.append(1.0)
        for l in range(1, net.n_hidden + 1):
            im.append(float(np.max(np.abs(u.imag))) if np.all(np.isfinite(u)) else math.inf)
            if l == net.n_hidden:
                break
            jh = rule.cdfn(u)[:, :, None] * ju
            if np.all(np.isfinite(jh)):
                # ||J||_2^2 = largest eigenvalue of the d x d matrix J^H J
                gram = np.swapaxes(jh.conj(), 1, 2) @ jh
                lf.append(float(np.sqrt(np.max(np.linalg.eigvalsh(gram)[:, -1]))))
            else:
                lf.append(math.inf)
            kern = net.kernels[l].astype(np.complex128)
            u = rule.cfn(u) @ kern + net.biases[l][None, :]
            # one GEMM: rows (sample, input direction), columns the next layer's neurons
            flat = np.swapaxes(jh, 1, 2).reshape(n_samples * d, -1) @ kern
            ju = np.swapaxes(flat.reshape(n_samples, d, -1), 1, 2)
    return lf, im


# ------------------------------------------------------------------------------------------------
# certify
# ------------------------------------------------------------------------------------------------


def _domain_geometry(domain, d: int) -> tuple[float, np.ndarray | None]:
    """``(R, centre or None)`` of a Ball, a Box (its circumscribed ball) or a radius."""
    if isinstance(domain, (int, float, np.floating, np.integer)) and not isinstance(domain, bool):
        radius, center = float(domain), None
    elif all(hasattr(domain, a) for a in ("dim", "radius", "center")):
        if domain.dim != d:
            raise ValueError(f"certify: domain has dim {domain.dim}; the network takes inputs of "
                             f"size {d}")
        radius = float(np.asarray(domain.radius))
        c = domain.center
        center = None if c is None else np.asarray(c, np.float64).reshape(d)
        if center is not None and not np.any(center):
            center = None
    else:
        raise TypeError(f"certify: domain must be a jaxcompress.Ball, a jaxcompress.Box or a "
                        f"radius, got {type(domain).__name__}")
    if not (radius > 0 and math.isfinite(radius)):
        raise ValueError(f"certify: the domain radius must be positive and finite, got {radius}")
    return radius, center


def _to_net(params: Params, rule: BoundRule, center: np.ndarray | None) -> _Net:
    ks = [np.asarray(layer["kernel"], np.float64) for layer in params]
    bs = [np.asarray(layer["bias"], np.float64) for layer in params]
    if center is not None:
        bs[0] = bs[0] + center @ ks[0]
    fn = rule.cfn
    u0, g0 = [], []
    h = np.zeros((ks[0].shape[0],))
    for k, b in zip(ks[:-1], bs[:-1], strict=True):
        u = h @ k + b
        u0.append(u)
        h = np.real(fn(u.astype(np.complex128)))
        g0.append(h)
    return _Net(kernels=ks, biases=bs, u0=u0, g0=g0, rule=rule)


def _gamma(d: int, width: int, delta: float, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """``(n_k, Gamma_k = 1 + n_k (1 + delta))`` for ``k = 0..k_max``."""
    n = np.array([min(num_monomials(d, k), width) for k in range(k_max + 1)], np.float64)
    return n, 1.0 + n * (1.0 + delta)


def _first_k(log_bound: np.ndarray, log_eps: float) -> int | None:
    idx = np.nonzero(log_bound <= log_eps)[0]
    return int(idx[0]) if idx.size else None


@dataclasses.dataclass
class _LayerPlan:
    """Per-layer a priori ingredients on the radius grid."""

    grid: np.ndarray
    log_m: np.ndarray  # log max_i M_i(r) on the grid (M_g of Eq. 17)
    log_mc: np.ndarray  # log of the Schwarz-form constant: min(max_i M_i, max_i Mc_i)
    log_gamma: np.ndarray  # (k_max + 1,)
    log_v: float
    d_up: np.ndarray


def _k_cert(plan: _LayerPlan, radius: float, log_eps: float):
    """``(k_cert, rho_cert)`` (section 2), the radius optimised per k over the grid (which
    contains ``rho0``, so ``k_cert <= k*``)."""
    if plan.grid.size == 0:
        return None, None
    ks = np.arange(plan.log_gamma.size)[:, None]
    logb = (plan.log_gamma[:, None] + plan.log_v + plan.log_mc[None, :]
            + (ks + 1) * np.log(radius / plan.grid)[None, :])
    best = np.min(logb, axis=1)
    k = _first_k(best, log_eps)
    if k is None:
        return None, None
    return k, float(plan.grid[int(np.argmin(logb[k]))])


def _k_star_at(plan: _LayerPlan, radius: float, log_eps: float, j: int):
    """``(k*, log C0)`` at grid radius index j (Cauchy form)."""
    r = plan.grid[j]
    log_c0 = plan.log_v + plan.log_m[j] + math.log(r / (r - radius))
    lam = math.log(r / radius)
    ks = np.arange(plan.log_gamma.size)
    return _first_k(plan.log_gamma + log_c0 - lam * (ks + 1), log_eps), log_c0


def _choose_rho0(plan: _LayerPlan, radius: float, log_eps: float) -> int:
    """Grid index minimising k* (ties: the smaller bound at that k)."""
    best, best_key = 0, (math.inf, math.inf)
    ks = np.arange(plan.log_gamma.size)
    for j in range(plan.grid.size):
        k, log_c0 = _k_star_at(plan, radius, log_eps, j)
        lam = math.log(plan.grid[j] / radius)
        kk = plan.log_gamma.size - 1 if k is None else k
        logb = float(plan.log_gamma[kk] + log_c0 - lam * (ks[kk] + 1))
        key = (math.inf if k is None else k, logb)
        if key < best_key:
            best, best_key = j, key
    return best


class _Prepared:
    """Everything about (network, activation, domain) that does not depend on ``eps``.

    Built once by :func:`certify` (and once per call of :func:`compress_to_tolerance`, which asks
    for many certificates of the same teacher): the float64 network, the radii of validity, the
    deviation chain on each layer's grid of working radii, the sampled diagnostics and the
    float64 Taylor features of the original network.
    """

    def __init__(self, params, activation, domain, rho0=None, n_samples=128, seed=0):
        params = validate_params(params, where="certify")
        if params[0]["kernel"].ndim != 2:
            raise ValueError("certify: expected one network (2-D kernels); certify each "
                             "separately")
        self.params = params
        self.act = get_activation(activation)
        self.rule = get_bound_rule(self.act)
        self.sizes = tuple(layer_sizes(params))
        self.d = self.sizes[0]
        self.n_hidden = len(params) - 1
        self.radius, self.center = _domain_geometry(domain, self.d)
        self.net = _to_net(params, self.rule, self.center)
        self.rho_sigma = _rho_sigma(self.rule)
        self.w_max = [float(np.max(c)) for c in self.net.col2[:-1]]
        self.v_max = [float(np.max(np.sum(a, axis=0))) for a in self.net.absk[1:]]
        self.rhos = _radii_of_validity(self.net, 1.0 / max(self.w_max[0], 1e-300))
        self.rho_fs = [math.inf] + self.rhos[:-1]
        self.assumption = [self.radius < r for r in self.rhos]
        self.rho0_user = _rho0_list(rho0, self.n_hidden)
        self.n_samples, self.seed = int(n_samples), int(seed)
        grids = []
        for l in range(self.n_hidden):
            ok = self.assumption[l]
            g = _radius_grid(self.radius, self.rhos[l]) if ok else np.zeros((0,))
            if self.rho0_user is not None and ok:
                r0 = self.rho0_user[l]
                if not self.radius < r0 < self.rhos[l]:
                    raise ValueError(
                        f"certify: rho0 = {r0:g} for hidden layer {l + 1} must lie in (R, rho) "
                        f"= ({self.radius:g}, {self.rhos[l]:.6g})")
                g = np.unique(np.concatenate([g, [r0]]))
            grids.append(g)
        self.grids = grids
        res = _chain(self.net, np.concatenate(grids + [np.array([self.radius])]))
        self.chains = []
        start = 0
        for l in range(self.n_hidden):
            sl = slice(start, start + grids[l].size)
            start += grids[l].size
            self.chains.append({key: val[sl] for key, val in res[l].items()})
        self.d_up_at_r = [float(res[l]["D_up"][-1]) for l in range(self.n_hidden)]
        self._diag = None
        self._feats: tuple[int, list[np.ndarray]] | None = None

    def diagnostics(self):
        if self._diag is None:
            self._diag = _complex_diagnostics(self.net, self.radius, self.n_samples, self.seed)
        return self._diag

    def features(self, order: int) -> list[np.ndarray]:
        """float64 Taylor coefficients ``Z_l`` (``D_order x d_l``) of the original network."""
        if self._feats is None or self._feats[0] < order:
            with jax.enable_x64(True):
                p64 = [{k: jnp.asarray(np.asarray(v, np.float64)) for k, v in layer.items()}
                       for layer in self.params]
                c = np.zeros((self.d,)) if self.center is None else self.center
                z = _features_jit(p64, jnp.asarray(c, jnp.float64), activation=self.act.name,
                                  order=int(order))
                self._feats = (int(order), [np.asarray(x, np.float64) for x in z])
        n = num_monomials(self.d, order)
        return [f[:n] for f in self._feats[1]]


def certify(
    params: Params,
    *,
    activation: str | Activation,
    domain,
    eps: float,
    rho0: float | Sequence[float] | None = None,
    delta: float = 1e-2,
    compressed: Params | None = None,
    info: CompressInfo | None = None,
    n_samples: int = 128,
    seed: int = 0,
    k_max: int = 100,
    extra_orders: int = 10,
) -> Certificate:
    """The compression certificate of ``params`` on ``domain`` for the error budget ``eps``.

    Every quantity of the module docstring is computed per hidden layer: ``W_max`` (Eq. 6),
    ``V_max`` (Eq. 7), ``rho_sigma`` (Eq. 5), ``rho_f`` and ``L_f(rho0)`` (Eq. 4), ``rho``
    (Eq. 8), Assumption 4 (``R < rho``), the working radius ``rho0``, ``M_g`` (Eq. 17), ``C0``
    and ``lam`` (Eq. 20), ``k*`` (Eq. 21), ``k_cert`` (Eq. 72), ``D_k``, the downstream factor
    ``Lambda`` (Lemma 15), plus ``Lambda_bar`` (Lemma 19), the uniform budget (Eq. 62), the width
    and parameter bounds (Eqs. 68-69), non-vacuity (Eq. 75) and the Appendix G diagnostics
    (``rho_pole``, ``L_f_sampled``, ``q_hat``, ``strip_ratio``).

    Args:
      params: the network (list of ``{"kernel", "bias"}``).
      activation: a registered activation with a :class:`BoundRule` (sigmoid, tanh, softplus,
        silu, gelu, gelu_tanh, identity).
      domain: a :class:`jaxcompress.Ball` (any centre: it is the expansion point, as in
        :func:`jaxcompress.compress`), a :class:`jaxcompress.Box` (certified on its
        circumscribed ball) or a radius (ball at the origin).
      eps: the target sup error on the domain.
      rho0: working radius (one value or one per hidden layer) in ``(R, rho)``; default: per
        layer, the radius on a grid in ``(R, rho)`` that minimises ``k*``.
      delta: the maxvol tolerance of Lemma 10 (``|C_ij| <= 1 + delta``) assumed a priori.
      compressed, info: a backward-order compression of ``params`` (the untrimmed output of
        :func:`jaxcompress.compress` on the same domain, any selector and feature kind): adds
        the rigorous a posteriori bound on ``sup |F - Ft|`` (section 6).
      n_samples, seed: sample size and NumPy seed of the complex-ball diagnostics (estimates).
      k_max: largest order considered a priori.
      extra_orders: the a posteriori bound computes the error's Taylor coefficients exactly up
        to ``max(order) + extra_orders`` (section 6; fewer if that Taylor pass would need more
        than 1 GiB).

    Returns:
      A :class:`Certificate`; ``str()`` is a table, ``to_dict()`` JSON-ready.
    """
    prep = _Prepared(params, activation, domain, rho0=rho0, n_samples=n_samples, seed=seed)
    return _certify(prep, eps=eps, delta=delta, compressed=compressed, info=info, k_max=k_max,
                    extra_orders=extra_orders)


def _certify(prep: _Prepared, *, eps, delta, compressed=None, info=None, k_max=100,
             extra_orders=10) -> Certificate:
    eps = float(eps)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"certify: eps must be positive and finite, got {eps}")
    delta = float(delta)
    if not (delta >= 0 and math.isfinite(delta)):
        raise ValueError(f"certify: delta must be >= 0, got {delta}")
    sizes, d, n_hidden, radius = prep.sizes, prep.d, prep.n_hidden, prep.radius
    rule, rhos, v_max, w_max = prep.rule, prep.rhos, prep.v_max, prep.w_max
    lip = rule.lipschitz
    k_max = int(k_max)
    plans: list[_LayerPlan | None] = []
    for l in range(n_hidden):
        if not prep.assumption[l]:
            plans.append(None)
            continue
        ch = prep.chains[l]
        with np.errstate(divide="ignore"):
            _, gam = _gamma(d, sizes[l + 1], delta, k_max)
            log_m = np.log(np.max(ch["M"], axis=1))
            log_mc = np.minimum(log_m, np.log(np.max(ch["Mc"], axis=1)))
            plans.append(_LayerPlan(grid=prep.grids[l], log_m=log_m, log_mc=log_mc,
                                    log_gamma=np.log(gam),
                                    log_v=math.log(v_max[l]) if v_max[l] > 0 else -math.inf,
                                    d_up=ch["D_up"]))

    # Lemma 19 fixed point: orders -> Lambda_bar -> eps_l -> orders (monotone, capped by widths)
    notes: list[str] = []
    orders: list[int | None] = [0] * n_hidden
    lam_l: list[float] = [1.0] * n_hidden
    lam_bar = eps_l = None
    certifiable = all(prep.assumption)
    if not certifiable:
        orders = [None] * n_hidden
        bad = [l + 1 for l in range(n_hidden) if not prep.assumption[l]]
        notes.append(
            "Assumption 4 fails in hidden layer(s) " + ", ".join(
                f"{l} (rho = {rhos[l - 1]:.4g} <= R = {radius:g})" for l in bad)
            + ": no certificate; see q_hat and rho_pole")
    else:
        for _ in range(10 * k_max + 10):
            widths = [min(num_monomials(d, k), sizes[l + 1]) for l, k in enumerate(orders)]
            lam_l = [lip ** (n_hidden - l - 1) * math.prod(
                widths[m] * (1.0 + delta) * v_max[m] for m in range(l + 1, n_hidden))
                for l in range(n_hidden)]
            lam_bar = max(lam_l)
            eps_l = eps / (n_hidden * lam_bar)
            new = [_k_cert(plans[l], radius, math.log(eps_l))[0] for l in range(n_hidden)]
            if any(k is None for k in new):
                orders = new
                bad = [l + 1 for l, k in enumerate(new) if k is None]
                notes.append(f"no order <= k_max = {k_max} certifies eps_l = {eps_l:.3g} in "
                             f"hidden layer(s) {bad}")
                certifiable = False
                break
            new = [max(a, b) for a, b in zip(orders, new, strict=True)]
            if new == orders:
                break
            orders = new

    layers = []
    total_a_priori = 0.0 if certifiable else None
    widths_out: list[int | None] = []
    lf_s, im_s = prep.diagnostics()
    pole1 = float(np.min(rule.singular_distance(prep.net.biases[0]) / prep.net.col2[0]))
    rho_sigma = prep.rho_sigma
    for l in range(n_hidden):
        plan = plans[l]
        entry: dict[str, Any] = {
            "layer": l + 1, "width": sizes[l + 1], "W_max": w_max[l], "V_max": v_max[l],
            "rho_sigma": rho_sigma, "rho_f": prep.rho_fs[l], "rho": rhos[l],
            "assumption4": prep.assumption[l],
        }
        r0 = c0 = lamv = m_g = k_star = k_cert = rho_cert = dk = new_w = None
        lf_r = radius
        lf = prep.d_up_at_r[l] / radius
        bound_l = None
        if plan is not None and eps_l is not None:
            log_eps = math.log(eps_l)
            if prep.rho0_user is not None:
                j = int(np.argmin(np.abs(plan.grid - prep.rho0_user[l])))
            else:
                j = _choose_rho0(plan, radius, log_eps)
            r0 = float(plan.grid[j])
            k_star, log_c0 = _k_star_at(plan, radius, log_eps, j)
            c0 = math.exp(log_c0)
            lamv = math.log(r0 / radius)
            m_g = math.exp(plan.log_m[j])
            lf_r = r0
            lf = float(plan.d_up[j]) / r0
            k_cert, rho_cert = _k_cert(plan, radius, log_eps)
            if orders[l] is not None:
                dk = num_monomials(d, orders[l])
                new_w = min(dk, sizes[l + 1])
                kk = orders[l]
                bound_l = lam_l[l] * math.exp(float(np.min(
                    plan.log_gamma[kk] + plan.log_v + plan.log_mc
                    + (kk + 1) * np.log(radius / plan.grid))))
                if total_a_priori is not None:
                    total_a_priori += bound_l
        widths_out.append(new_w)
        entry.update({
            "L_f": lf, "L_f_radius": lf_r, "rho0": r0, "M_g": m_g, "C0": c0, "lam": lamv,
            "k_star": k_star, "k_cert": k_cert, "rho_cert": rho_cert, "D_k": dk,
            "new_width": new_w, "Lambda": lam_l[l] if certifiable else None,
            "eps_layer": eps_l, "bound_a_priori": bound_l,
            "rho_pole": pole1, "L_f_sampled": lf_s[l],
            "q_hat": (w_max[l] * lf_s[l] * radius / rho_sigma if math.isfinite(rho_sigma)
                      else 0.0),
            "strip_ratio": im_s[l] / rho_sigma if math.isfinite(rho_sigma) else 0.0,
        })
        entry["status"], entry["how"] = _provenance(l == 0, l + 1, rule)
        layers.append(entry)

    if certifiable:
        arch = [d] + list(widths_out) + [sizes[-1]]
        param_bound = sum(a * b + b for a, b in zip(arch[:-1], arch[1:], strict=True))
        width_bound = max(widths_out)
    else:
        param_bound = width_bound = None
    n0 = num_params(prep.params)
    non_vacuous = bool(certifiable and param_bound is not None and param_bound < n0)

    post_total = None
    if compressed is not None or info is not None:
        if compressed is None or info is None:
            raise ValueError("certify: pass both compressed= and info= for the a posteriori bound")
        post = _a_posteriori(prep, compressed, info, int(extra_orders))
        post_total = post["total"]
        for l, entry in enumerate(layers):
            entry.update(post["layers"][l])
            for key in _POST_HOW:
                entry["status"][key] = RIGOROUS
                entry["how"][key] = _POST_HOW[key]

    top_status = {k: RIGOROUS for k in ("Lambda_bar", "eps_uniform", "width_bound",
                                        "param_bound", "non_vacuous", "bound_a_priori")}
    top_how = {
        "Lambda_bar": "max_l Lambda_l at the fixed point of orders -> Lambda -> budget "
                      "(Lemma 19 analogue)",
        "eps_uniform": "eps / (L Lambda_bar) (Eq. 62): then sum_l Lambda_l eps_l <= eps",
        "width_bound": "max_l min(D_{k_l}, d_l) at the certified orders (Eq. 68)",
        "param_bound": "parameters of [d_in, n_1, ..., n_L, d_out], n_l = min(D_{k_l}, d_l) "
                       "(Eq. 69)",
        "non_vacuous": "Assumption 4 in every layer and param_bound < original count (Eq. 75)",
        "bound_a_priori": "sum_l Lambda_l Gamma_k V_max M_g(r) (R/r)^{k+1} at the certified "
                          "orders (<= eps)",
    }
    if post_total is not None:
        top_status["a_posteriori_bound"] = RIGOROUS
        top_how["a_posteriori_bound"] = (
            "max over outputs of sum_l Lip^{L-l} E_l |Kt_{l+2}| ... |Kt_{L+1}|, E_l from the "
            "error's exact Taylor coefficients up to K plus a Cauchy/Schwarz tail (section 6)")
    center = prep.center
    return Certificate(
        activation=prep.act.name, sizes=sizes, radius=radius,
        center=None if center is None else tuple(float(x) for x in center), eps=eps,
        delta=delta, layers=tuple(LayerCertificate(**e) for e in layers),
        Lambda_bar=lam_bar if certifiable else None,
        eps_uniform=eps_l if certifiable else None, orders=tuple(orders),
        widths=tuple(widths_out), width_bound=width_bound, param_bound=param_bound,
        num_params=n0, non_vacuous=non_vacuous, bound_a_priori=total_a_priori,
        a_posteriori_bound=post_total, notes=tuple(notes), status=top_status, how=top_how,
    )


def _rho0_list(rho0, n_hidden: int) -> list[float] | None:
    if rho0 is None:
        return None
    if isinstance(rho0, (int, float, np.floating, np.integer)):
        return [float(rho0)] * n_hidden
    vals = [float(r) for r in rho0]
    if len(vals) != n_hidden:
        raise ValueError(f"certify: rho0 has {len(vals)} entries; expected one per hidden layer "
                         f"({n_hidden})")
    return vals


_POST_HOW = {
    "order": "the compressed layer's Taylor order k",
    "residual": "Eq. (41) matching residual max|Z_K Kt - Z K| recorded in the CompressInfo",
    "K_tail": "order K after which the Cauchy/Schwarz tail takes over (best for the worst "
              "component)",
    "bound_layer": "max_j min_{K, rho0} [sum_{|a|<=K} |e_a| R^|a| + tail_K(rho0)]: sup error "
                   "this layer adds to the next pre-activation (section 6)",
    "Lambda_post": "Lip^{L-l} max_o (1^T |Kt_{l+2}| ... |Kt_{L+1}|)_o with the compressed "
                   "kernels",
    "contribution": "max_o of this layer's error propagated to the outputs",
}


def _provenance(first: bool, layer: int, rule: BoundRule) -> tuple[dict, dict]:
    """``(status, how)`` of every per-layer entry."""
    status = {k: RIGOROUS for k in (
        "W_max", "V_max", "rho_sigma", "rho_f", "L_f", "rho", "assumption4", "rho0", "M_g",
        "C0", "lam", "k_star", "k_cert", "D_k", "Lambda", "eps_layer", "bound_a_priori",
        "rho_pole")}
    status.update({k: ESTIMATE for k in ("L_f_sampled", "q_hat", "strip_ratio")})
    if layer >= 3:
        status["rho_pole"] = ESTIMATE
    how = {
        "W_max": "max_i ||K_l[:, i]||_2, exact (Eq. 6)",
        "V_max": "max_o sum_i |K_{l+1}[i, o]|, exact (Eq. 7)",
        "rho_sigma": "activation registry: distance from the real axis to the nearest "
                     "singularity (Eq. 5)",
        "rho_f": ("inf: f is the identity" if first else
                  "largest r for which the deviation chain proves every upstream neuron "
                  "holomorphic on B^C_r (bisection)"),
        "L_f": ("1: f is the identity" if first else
                "D_{l-1}(r)/r at r = rho0: chain bound on sup|f(x+iy) - f(x)| over B^C_r"),
        "rho": ("rho_sigma / W_max, exact for the strip bound" if first and rule.strip_only else
                "largest r < rho_f for which the chain keeps every pre-activation of the layer "
                "where the bound rule is finite (bisection; Eq. 8 analogue)"),
        "assumption4": "R < rho",
        "rho0": "working radius in (R, rho): given, or the grid point minimising k*",
        "M_g": f"max_i sup|sigma| on the neuron's strip at rho0 (Eq. 17): {rule.how}",
        "C0": "V_max M_g rho0/(rho0 - R) (Eq. 20)",
        "lam": "log(rho0/R) (Eq. 20)",
        "k_star": "smallest k with (1 + n_k(1+delta)) C0 exp(-lam (k+1)) <= eps_layer "
                  "(Cauchy form, Lemma-10 factor; Eq. 21 analogue)",
        "k_cert": "smallest k with min_r (1 + n_k(1+delta)) V_max M'_g(r) (R/r)^{k+1} <= "
                  "eps_layer (Schwarz form, r optimised per k, M'_g <= M_g; Eq. 72 analogue); "
                  "<= k_star",
        "D_k": "C(d_in + k_cert, d_in)",
        "Lambda": "Lip^{L-l} prod_{m>l} n_m (1+delta) V_max^(m), a priori (Lemma 15 analogue)",
        "eps_layer": "eps / (L Lambda_bar) (Eq. 62)",
        "bound_a_priori": "Lambda_l times the layer's Schwarz bound at k_cert",
        "rho_pole": ("min_i dist(b_i, singularities)/||w_i||: exact holomorphy radius of the "
                     "layer's neurons (Eq. 100)" if first else
                     "min_j dist(b_j, singularities)/||w_j|| over layer-1 neurons (Eq. 100): "
                     + ("the exact holomorphy radius of f = h^1" if layer == 2 else
                        "an upper bound on the radius of f unless singularities cancel")),
        "L_f_sampled": "max over sampled z in B^C_R of ||df/dz||_2 (complex chain rule)",
        "q_hat": "W_max L_f_sampled R / rho_sigma (Eq. 101 analogue; > 1: Assumption 4 fails)",
        "strip_ratio": "max over sampled z in B^C_R of |Im u_i(z)| / rho_sigma",
    }
    return status, how


# ------------------------------------------------------------------------------------------------
# A posteriori certificate (section 6)
# ------------------------------------------------------------------------------------------------


def _a_posteriori(prep: _Prepared, compressed: Params, info: CompressInfo,
                  extra_orders: int) -> dict:
    where = "certify"
    if not isinstance(info, CompressInfo):
        raise TypeError(f"{where}: info must be the CompressInfo returned with the compression")
    if info.layer_order != "backward":
        raise ValueError(
            f"{where}: the a posteriori certificate needs a backward-order compression (every "
            f"layer's upstream map is then the original one); got layer_order="
            f"{info.layer_order!r}")
    if get_activation(info.activation).name != prep.act.name:
        raise ValueError(f"{where}: info was made with activation {info.activation!r}, not "
                         f"{prep.act.name!r}")
    compressed = validate_params(compressed, where=where)
    n_hidden, d, radius = prep.n_hidden, prep.d, prep.radius
    params = prep.params
    if len(compressed) != n_hidden + 1 or len(info.layers) != n_hidden:
        raise ValueError(f"{where}: the compressed network / info has "
                         f"{len(compressed) - 1} / {len(info.layers)} hidden layers; expected "
                         f"{n_hidden}")
    kept = [np.asarray(li.kept).astype(np.int64) for li in info.layers]
    ktil = [np.asarray(layer["kernel"], np.float64) for layer in compressed]
    orig = [np.asarray(layer["kernel"], np.float64) for layer in params]
    for l in range(n_hidden):
        if ktil[l].shape[1] != kept[l].size:
            raise ValueError(f"{where}: compressed hidden layer {l + 1} has width "
                             f"{ktil[l].shape[1]}; info keeps {kept[l].size} neurons (pass the "
                             "untrimmed output of compress)")
        same_bias = np.array_equal(np.asarray(compressed[l]["bias"], np.float64),
                                   np.asarray(params[l]["bias"], np.float64)[kept[l]])
        if not same_bias or (l == 0 and not np.array_equal(ktil[0], orig[0][:, kept[0]])):
            raise ValueError(f"{where}: compressed hidden layer {l + 1} does not keep original "
                             "neurons of params at info's kept indices: compressed/info do not "
                             "belong to params")
    lip = prep.rule.lipschitz
    k_list = [int(li.order) for li in info.layers]
    k_top = max(max(k_list), 0) + int(extra_orders)
    while k_top > max(k_list) and math.comb(2 * d + k_top, 2 * d) * max(prep.sizes[1:-1]) * 8 \
            > _EXTRA_ORDER_BYTES:
        k_top -= 1  # keep the extra Taylor pass small (it is only a sharpening)
    feats = prep.features(k_top)
    mons = monomials(d, k_top)
    deg = mons.sum(axis=1)
    # Cauchy-Schwarz, multinomial weights: |sum_{|a|=j} e_a x^a| <= |x|^j (sum |e_a|^2 a!/j!)^.5
    lgamma = np.vectorize(math.lgamma)
    weight = np.exp(lgamma(mons + 1.0).sum(axis=1) - lgamma(deg + 1.0))[:, None]
    per_layer = []
    totals = np.zeros((ktil[-1].shape[1],))
    for l in range(n_hidden):
        g = prep.grids[l]
        v = orig[l + 1] if l + 1 == n_hidden else orig[l + 1][:, kept[l + 1]]
        w = v.copy()
        np.subtract.at(w, kept[l], ktil[l + 1])
        abs_w = np.abs(w)
        coef = feats[l] @ w  # e_alpha per output component, (D_K, n_out)
        # by_deg[j] >= sup_{|xhat| = 1} |sum_{|a|=j} e_a xhat^a|
        by_deg = np.stack([np.sqrt(np.sum(weight[deg == j] * coef[deg == j] ** 2, axis=0))
                           for j in range(k_top + 1)])
        explicit = np.cumsum(by_deg * (radius ** np.arange(k_top + 1))[:, None], axis=0)
        e_vec = np.full((w.shape[1],), np.inf)
        k_tail = np.full((w.shape[1],), -1)
        if g.size:
            ch = prep.chains[l]
            with np.errstate(invalid="ignore", over="ignore"):
                sup_e = ch["M"] @ abs_w  # >= sup |e| on B^C_r
                sup_de = ch["Mc"] @ abs_w  # >= sup |e - e_0|
                amp_c = np.minimum(sup_e + by_deg[0][None, :], sup_de)  # >= sup |e - e_0|
                amp_s = np.minimum(sup_e, sup_de)
                powers = g[:, None] ** np.arange(k_top + 1)[None, :]  # (n_grid, K + 1)
                cum_g = np.cumsum(by_deg[None, :, :] * powers[:, :, None], axis=1)
                for kk in range(k_top + 1):
                    q = (radius / g) ** (kk + 1)
                    cauchy = amp_c * (q * g / (g - radius))[:, None]
                    schwarz = (amp_s + cum_g[:, kk, :]) * q[:, None]
                    tail = np.min(np.where(np.isfinite(cauchy), np.minimum(cauchy, schwarz),
                                           np.inf), axis=0)
                    cand = explicit[kk] + tail
                    better = cand < e_vec
                    e_vec = np.where(better, cand, e_vec)
                    k_tail = np.where(better, kk, k_tail)
        down = np.eye(ktil[l + 1].shape[1])
        for m in range(l + 2, n_hidden + 1):
            down = down @ np.abs(ktil[m])
        down = down * lip ** (n_hidden - l - 1)
        if np.all(np.isfinite(e_vec)):
            contrib = e_vec @ down
        else:
            contrib = np.full((down.shape[1],), np.inf)
        totals = totals + contrib
        worst = int(np.argmax(e_vec))
        per_layer.append({
            "order": k_list[l],
            "residual": float(np.max(np.asarray(info.layers[l].residual, np.float64))),
            "K_tail": int(k_tail[worst]), "bound_layer": float(np.max(e_vec)),
            "Lambda_post": float(np.max(np.sum(down, axis=0))),
            "contribution": float(np.max(contrib)),
        })
    return {"layers": per_layer, "total": float(np.max(totals))}


# ------------------------------------------------------------------------------------------------
# Compression to a tolerance
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ToleranceResult:
    """What :func:`compress_to_tolerance` returns.

    Attributes:
      params: the compressed network (untrimmed: static widths ``min(D_k, d_l)``; pass it to
        :func:`jaxcompress.trim` to drop rank-deficient neurons).
      orders: the Taylor order chosen per hidden layer.
      report: the :class:`Certificate` (with the a posteriori bound of ``params``).
      measured_error: :func:`jaxcompress.sup_error` (samples + local search) of ``params``.
      info: the :class:`jaxcompress.CompressInfo` of the compression.
      mode: ``"certified"`` or ``"measured"``.
      history: one line per step of the search (what was tried and why).
    """

    params: Params
    orders: tuple[int, ...]
    report: Certificate
    measured_error: float
    info: CompressInfo
    mode: str
    history: tuple[str, ...] = ()

    def __iter__(self):  # ``params, orders, report = compress_to_tolerance(...)[:3]`` style
        return iter((self.params, self.orders, self.report))


class _Compressor:
    """Backward-order derivative matching with cached per-(layer, order) selections.

    Each hidden layer's selection depends only on its features in the original network
    (backward order), so compressing any subset of layers is an assembly of cached pieces.
    ``padded`` builds a network with the original shapes whose dropped neurons have zero
    outgoing weight (the same function as the compressed one; one ``sup_error`` compilation for
    every candidate); ``assemble`` builds the compressed network itself, identical to
    :func:`jaxcompress.compress` with ``order=orders``.
    """

    def __init__(self, params, act_name, radius, center, selector, delta):
        self.params = params
        self.act = act_name
        self.radius = radius
        self.center = center
        self.selector = selector
        self.delta = float(delta)
        self.d = int(params[0]["kernel"].shape[0])
        self.widths = [int(layer["kernel"].shape[1]) for layer in params[:-1]]
        self.k_feat = -1
        self.feats = None
        self.cache: dict[tuple[int, int], tuple] = {}
        self.dtype = np.dtype(jnp.result_type(params[0]["kernel"]))
        self.host = [{k: np.asarray(v) for k, v in layer.items()} for layer in params]

    def features(self, k: int):
        if k > self.k_feat:
            k_new = max(k, self.k_feat + 4, 4)  # few recompilations as the order grows
            dtype = jnp.result_type(self.params[0]["kernel"])
            center = (jnp.zeros((self.d,), dtype) if self.center is None
                      else jnp.asarray(self.center, dtype))
            self.feats = _features_jit(self.params, center, activation=self.act, order=k_new)
            self.k_feat = k_new
        return self.feats

    def select(self, l: int, k: int):
        """``(kept, new outgoing kernel (width x d_{l+1}), LayerInfo, Z)`` for layer l, order k
        (host arrays)."""
        key = (l, k)
        if key not in self.cache:
            d_k = num_monomials(self.d, k)
            z = self.features(k)[l - 1][:d_k]
            width = min(d_k, self.widths[l - 1])
            scale = np.asarray(self.radius, self.dtype) ** monomials(self.d, k).sum(axis=1)
            sel = MaxVol(delta=self.delta) if self.selector == "maxvol" else as_selector(
                self.selector)
            kout, li = _select_jit(z, jnp.asarray(scale, self.dtype), self.params[l]["kernel"],
                                   width=width, selector=sel, layer=l, order=k,
                                   coord_dim=self.d)
            self.cache[key] = (np.asarray(li.kept), np.asarray(kout), li, np.asarray(z))
        return self.cache[key]

    def padded(self, orders: dict[int, int]) -> Params:
        out = list(self.host)
        for l, k in orders.items():
            kept, kout, _, _ = self.select(l, k)
            kern = np.zeros_like(self.host[l]["kernel"])
            kern[kept] = kout
            out[l] = {"kernel": kern, "bias": self.host[l]["bias"]}
        return [{key: jnp.asarray(v) for key, v in layer.items()} for layer in out]

    def assemble(self, orders: Sequence[int]) -> tuple[Params, CompressInfo]:
        n = len(orders)
        host = self.host
        sel = [self.select(l, orders[l - 1]) for l in range(1, n + 1)]
        new = []
        for l in range(1, n + 1):
            kept = sel[l - 1][0]
            inc = host[0]["kernel"][:, kept] if l == 1 else sel[l - 2][1][:, kept]
            new.append({"kernel": inc, "bias": host[l - 1]["bias"][kept]})
        new.append({"kernel": sel[n - 1][1], "bias": host[n]["bias"]})
        infos = []
        for l in range(1, n + 1):
            kept, _, li, z = sel[l - 1]
            v = host[l]["kernel"] if l == n else host[l]["kernel"][:, sel[l][0]]
            zn = z.astype(np.float64)
            resid = np.max(np.abs(zn[:, kept] @ new[l]["kernel"].astype(np.float64)
                                  - zn @ v.astype(np.float64)))
            infos.append(dataclasses.replace(li, residual=jnp.asarray(resid, self.dtype)))
        info = CompressInfo(layers=tuple(infos), activation=self.act, layer_order="backward",
                            features="taylor", selector=self.selector, coordinates="input",
                            method=f"derivative_matching(order={tuple(orders)}, "
                                   f"selector={self.selector}, backward)")
        return [{key: jnp.asarray(v) for key, v in layer.items()} for layer in new], info


@functools.partial(jax.jit, static_argnames=("width", "selector", "layer", "order",
                                             "coord_dim"))
def _select_jit(z, scale, out_kernel, *, width, selector, layer, order, coord_dim):
    """:func:`compress_layer` on one hidden layer's derivative features, compiled."""
    feats = LayerFeatures(z=z, scale=scale, layer=layer, order=order, num_features=z.shape[0],
                          coord_dim=coord_dim)
    _, kernel, li = compress_layer(feats, out_kernel, width, selector)
    return kernel, li


#: Memory cap of the extra-order Taylor pass of the a posteriori certificate.
_EXTRA_ORDER_BYTES = 2**30

_features_jit = jax.jit(
    lambda params, center, activation, order: derivative_features(
        params, activation=activation, order=order, center=center),
    static_argnames=("activation", "order"))


def compress_to_tolerance(
    params: Params,
    *,
    activation: str | Activation,
    domain,
    eps: float,
    mode: str = "certified",
    selector: str | None = None,
    delta: float = 1e-2,
    refine: bool = False,
    max_order: int = 20,
    key: jax.Array | None = None,
    n_samples: int = 4096,
    local_search_steps: int = 100,
) -> ToleranceResult:
    """Compress ``params`` so that the sup error on ``domain`` is at most ``eps``.

    Modes:
      ``"certified"``: the orders ``k_cert`` of the uniform budget split (Eq. 62, Lemma 19) of
        :func:`certify`, compressed with ``selector="maxvol"`` (so Lemma 10 holds); the a
        posteriori certificate of the result is then computed and, should it exceed ``eps``
        (floating-point residuals, maxvol swap cap), the order of the layer contributing most is
        raised until it does not. Refuses with ``ValueError`` (naming the layer and ``rho`` vs
        ``R``) when Assumption 4 fails, or when no order certifies the budget. With
        ``refine=True`` the orders are then lowered, deepest layer first (bisection on each
        layer's order), to the smallest found whose a posteriori certificate is ``<= eps``
        (still rigorous, usually much smaller networks).
      ``"measured"``: the smallest uniform order ``k_u`` whose measured sup error
        (:func:`jaxcompress.sup_error`, samples plus projected local search) is ``<= eps``
        bounds the search; then, deepest layer first, each layer alone gets the smallest order
        ``<= k_u`` meeting ``eps / L``; orders are raised (largest single-layer error first)
        until the whole network meets ``eps`` and finally lowered, deepest first, while it still
        does. Every order is ``<= k_u``, so no width exceeds the uniform one. Nothing is
        guaranteed beyond the measurement.

    Args:
      params, activation, domain, eps: as in :func:`certify` (``domain`` a Ball or Box).
      mode: ``"certified"`` or ``"measured"``.
      selector: ``"maxvol"`` (forced in certified mode) or a deterministic selector of
        :func:`jaxcompress.compress` in measured mode (default ``"pivoted_qr"``).
      delta: maxvol tolerance.
      refine: certified mode only, see above.
      max_order: the largest order tried.
      key, n_samples, local_search_steps: the sup-error measurement (default key
        ``PRNGKey(0)``).

    Returns:
      A :class:`ToleranceResult` (``params``, ``orders``, ``report``, ``measured_error``, ...).
      The compressed network equals ``jaxcompress.compress(params, order=orders,
      selector=..., domain=domain)``.
    """
    if mode not in ("certified", "measured"):
        raise ValueError(f"compress_to_tolerance: mode must be 'certified' or 'measured', got "
                         f"{mode!r}")
    params = validate_params(params, where="compress_to_tolerance")
    act = get_activation(activation)
    d = int(params[0]["kernel"].shape[0])
    radius, center = _domain_geometry(domain, d)
    eps = float(eps)
    n_hidden = len(params) - 1
    key = jax.random.PRNGKey(0) if key is None else key
    if isinstance(domain, (int, float, np.floating, np.integer)):
        from jaxcompress.domains import Ball

        domain = Ball(d, radius)
    history: list[str] = []

    def measure(p) -> float:
        return float(sup_error(params, p, activation=act.name, domain=domain, key=key,
                               n_samples=n_samples, local_search_steps=local_search_steps))

    if mode == "certified":
        if selector not in (None, "maxvol"):
            raise ValueError("compress_to_tolerance: mode='certified' uses selector='maxvol' "
                             f"(Lemma 10's coefficient bound), got {selector!r}")
        prep = _Prepared(params, act, domain)
        report = _certify(prep, eps=eps, delta=delta)
        for li in report.layers:
            if not li.assumption4:
                raise ValueError(
                    f"compress_to_tolerance: Assumption 4 fails in hidden layer {li.layer}: the "
                    f"certified holomorphy radius rho = {li.rho:.4g} is not larger than the "
                    f"domain radius R = {radius:g} (q_hat = {li.q_hat:.3g}); no certificate "
                    "exists. Use mode='measured', a smaller domain, or smaller weights.")
        if any(k is None for k in report.orders):
            raise ValueError("compress_to_tolerance: " + "; ".join(report.notes)
                             + "; use mode='measured' or a larger eps")
        comp = _Compressor(params, act.name, radius, center, "maxvol", delta)
        orders = [int(k) for k in report.orders]
        history.append(f"a priori orders k_cert = {orders} (budget eps_l = "
                       f"{report.eps_uniform:.3g}, Lambda_bar = {report.Lambda_bar:.3g})")

        def post(ords):
            small, info = comp.assemble(ords)
            rep = _certify(prep, eps=eps, delta=delta, compressed=small, info=info)
            return small, info, rep

        small, info, rep = post(orders)
        while rep.a_posteriori_bound > eps:
            contrib = [li.contribution for li in rep.layers]
            cands = [l for l in range(n_hidden) if orders[l] < max_order
                     and num_monomials(d, orders[l]) < int(params[l]["kernel"].shape[1])]
            if not cands:
                raise ValueError(
                    f"compress_to_tolerance: the a posteriori certificate "
                    f"{rep.a_posteriori_bound:.3g} exceeds eps = {eps:g} at orders {orders} "
                    "and no order can be raised")
            l = max(cands, key=lambda i: contrib[i])
            orders[l] += 1
            history.append(f"a posteriori bound {rep.a_posteriori_bound:.3g} > eps: raise "
                           f"layer {l + 1} to k = {orders[l]}")
            small, info, rep = post(orders)
        history.append(f"a posteriori bound {rep.a_posteriori_bound:.3g} <= eps at {orders}")
        if refine:
            # bisection per layer, deepest first; only verified orders are ever accepted
            for l in range(n_hidden - 1, -1, -1):
                lo, hi = -1, orders[l]
                while hi - lo > 1:
                    trial = list(orders)
                    trial[l] = (lo + hi) // 2
                    t_small, t_info, t_rep = post(trial)
                    if t_rep.a_posteriori_bound <= eps:
                        hi = trial[l]
                        orders, small, info, rep = trial, t_small, t_info, t_rep
                        history.append(f"refine: layer {l + 1} -> k = {orders[l]}, a posteriori "
                                       f"bound {rep.a_posteriori_bound:.3g}")
                    else:
                        lo = trial[l]
        err = measure(small)
        return ToleranceResult(params=small, orders=tuple(orders), report=rep,
                               measured_error=err, info=info, mode=mode,
                               history=tuple(history))

    # --- measured ---------------------------------------------------------------------------
    selector = "pivoted_qr" if selector is None else selector
    if selector == "random":
        raise ValueError("compress_to_tolerance: selector='random' is not supported (the search "
                         "compares many compressions; use a deterministic selector)")
    comp = _Compressor(params, act.name, radius, center, selector, delta)

    def err_of(ords: dict[int, int]) -> float:
        return measure(comp.padded(ords))

    k_u = None
    for k in range(max_order + 1):
        e = err_of({l: k for l in range(1, n_hidden + 1)})
        history.append(f"uniform k = {k}: measured {e:.3e}")
        if e <= eps:
            k_u = k
            break
    if k_u is None:
        raise ValueError(f"compress_to_tolerance: no uniform order <= max_order = {max_order} "
                         f"reaches a measured sup error of {eps:g}; raise max_order")
    orders = [k_u] * n_hidden
    single = [0.0] * n_hidden
    budget = eps / n_hidden
    for l in range(n_hidden, 0, -1):
        for k in range(k_u + 1):
            e = err_of({l: k})
            if e <= budget or k == k_u:
                orders[l - 1], single[l - 1] = k, e
                break
        history.append(f"layer {l} alone: k = {orders[l - 1]} (measured {single[l - 1]:.3e}, "
                       f"budget {budget:.3e})")
    total = err_of({l: orders[l - 1] for l in range(1, n_hidden + 1)})
    while total > eps:
        cands = [l for l in range(n_hidden) if orders[l] < k_u]
        l = max(cands, key=lambda i: single[i])
        orders[l] += 1
        single[l] = err_of({l + 1: orders[l]})
        total = err_of({m: orders[m - 1] for m in range(1, n_hidden + 1)})
        history.append(f"whole network above eps: layer {l + 1} -> k = {orders[l]}, measured "
                       f"{total:.3e}")
    for l in range(n_hidden - 1, -1, -1):
        while orders[l] > 0:
            trial = list(orders)
            trial[l] -= 1
            e = err_of({m: trial[m - 1] for m in range(1, n_hidden + 1)})
            if e > eps:
                break
            orders, total = trial, e
            history.append(f"lower layer {l + 1} -> k = {orders[l]}, measured {e:.3e}")
    small, info = comp.assemble(orders)
    err = measure(small)
    history.append(f"final orders {orders} (uniform would be {k_u}): measured {err:.3e}")
    report = certify(params, activation=act, domain=domain, eps=eps, delta=delta,
                     compressed=small, info=info) if _has_rule(act) else None
    return ToleranceResult(params=small, orders=tuple(orders), report=report,
                           measured_error=err, info=info, mode=mode, history=tuple(history))


def _has_rule(act: Activation) -> bool:
    return act.name in _BOUND_RULES

