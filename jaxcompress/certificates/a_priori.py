"""A priori certificates: the paper's (Theorems 6, 16, 22 with Lemma 19's budget split) and ours.

**The paper's** (:func:`paper_a_priori`), from :mod:`jaxcompress.certificates.paper`: per hidden
layer the constants of Theorem 6 at a working radius ``rho0`` in ``(R, rho)``; the budget of
Eq. 62 with ``Lambda_bar`` of Lemma 19 (``C*``, ``lambda*`` of Eq. 53); per layer ``k*``
(Eq. 21/23) and ``k_cert`` (Eq. 72); the certified orders are ``k_cert`` (Appendix D.1: the
sharper order that Eq. 71 allows; ``k_cert <= k*``, so Proposition 20's argument, which needs
``D_{k_t} <= Dbar(eps_t)``, still applies). The a priori bound is Theorem 16's sum with Lemma 15
and Eq. 65 at those orders, ``<= eps`` by Proposition 20. ``rho0`` (the paper: "pick any"):
given, or per layer the grid radius that minimises ``k*`` at the budget (ties: smaller
``k_cert``, then the smaller Eq. 71 bound), chosen at ``eps / (L - 1)`` first and once more at the
resulting ``eps_t``; ``Lambda_bar`` and ``eps_t`` are recomputed with the final choice, so every
number belongs to one fixed set of radii, as Theorem 22 requires.

**Ours** (:func:`ours_a_priori`): the same structure with sharper ingredients.

1. Taylor tail, Schwarz form. Compressing layer ``l`` replaces ``y = sum_i v_i g_i`` by
   ``ytilde = sum_{j in K} vt_j g_j`` with the same Taylor coefficients up to order ``k``, so
   ``e = y - ytilde = sum_i w_i g_i`` (``w = v - embed(vt)``). If every actual neuron ``g_i``
   is holomorphic on ``B^C_rho0`` with ``|g_i| <= M_i``, ``phi(t) = e(t x/|x|)`` is holomorphic
   on ``|t| < rho0``, ``|phi| <= A := sum_i |w_i| M_i``, with a zero of order ``k + 1`` at 0; the
   maximum principle applied to ``phi(t)/t^{k+1}`` (the Schwarz lemma) gives

   .. math:: |e(x)| \\le A\\,(R/\\rho_0)^{k+1}, \\qquad |x| \\le R,

   without the paper's factor ``rho0/(rho0 - R)``. Since ``e(0) = 0`` too, ``A`` may use
   ``M'_i >= sup |g_i(z) - g_i(0)|``, by the mean-value inequality
   ``min(M_i + |g_i(0)|, S_i (a_i + delta_i))`` (deviation chain notation), far below ``M_i`` for
   the nearly constant neurons of deep layers. ``M_i`` comes from our deviation chain
   (:mod:`jaxcompress.certificates.chain`), per actual neuron rather than over the ball of
   Eq. 17, and the radius ``r`` is optimised per ``k``.
2. Selection factor. With maxvol, ``|C_ai| <= 1 + delta`` and ``C_ai = [a = i]`` for kept
   ``i``; then ``||w||_1 <= (1 + n (1 + delta)) ||v||_1`` with ``n = min(D_k, d_l)`` kept
   neurons (the paper: ``1 + D_k`` for exact maximum volume). Hence
   ``k_ours = min{k : min_{R<r<rho_ours} Gamma_k V_max M'(r) (R/r)^{k+1} <= eps_l}``,
   ``Gamma_k = 1 + n_k (1 + delta)``.
3. Downstream factors. In backward order, the error of compressing layer ``l`` enters the
   (already compressed) layer ``l + 1`` as a perturbation of its pre-activation; on the real
   line ``|sigma(a) - sigma(b)| <= Lip |a - b|``, and every column of the compressed kernel
   ``Kt_{m+1} = C_m K_{m+1}[...]`` has l1 norm ``<= n_m (1 + delta) V_max^(m)``, so
   ``Lambda_ours(l) = Lip^{L-l-1} prod_{m>l} n_m (1 + delta) V_max^(m)``. The orders depend on
   the budget ``eps / ((L - 1) max_l Lambda_ours(l))``, which depends on the orders: we iterate
   to the fixed point (orders only grow, and ``n_m <= d_m`` caps them). Then
   ``sum_l Lambda_ours(l) eps_l <= eps``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxcompress.certificates import paper
from jaxcompress.certificates.prepared import Prepared
from jaxcompress.certificates.records import (
    OursLayer,
    OursNetwork,
    PaperBudget,
    PaperLayer,
    PaperLayerBudget,
    PaperNetwork,
)
from jaxcompress.mlp import num_params
from jaxcompress.taylor import num_monomials


def _first_k(log_bound: np.ndarray, log_eps: float) -> int | None:
    idx = np.nonzero(log_bound <= log_eps)[0]
    return int(idx[0]) if idx.size else None


# ------------------------------------------------------------------------------------------------
# the paper
# ------------------------------------------------------------------------------------------------


def _choose(prep: Prepared, l: int, s: float, k_max: int) -> int:
    """Grid index of the working radius of hidden layer ``l`` (0-based) at budget ``s``."""
    if prep.rho0_user is not None:
        return int(np.argmin(np.abs(prep.grids[l] - prep.rho0_user[l])))
    best, best_key = 0, (math.inf, math.inf, math.inf)
    for j in range(prep.grids[l].size):
        c0, lam = float(prep.c0[l][j]), float(prep.lam[l][j])
        ks = paper.k_star(c0, lam, s, prep.d, k_max)
        kc = paper.k_cert(c0, lam, s, prep.d, k_max)
        key = (math.inf if ks is None else ks, math.inf if kc is None else kc,
               math.inf if kc is None else paper.eq71(c0, lam, prep.d, kc))
        if key < best_key:
            best, best_key = j, key
    return best


def _budget(prep: Prepared, idx: list[int], eps: float, k_max: int):
    c_star = max(float(prep.c0[l][j]) for l, j in enumerate(idx))
    lam_star = min(float(prep.lam[l][j]) for l, j in enumerate(idx))
    lam_bar, k_bar = paper.lemma19(c_star, lam_star, eps, prep.op_norms, prep.lipschitz,
                                   prep.d, k_max)
    return c_star, lam_star, lam_bar, k_bar


def _layer_budget(prep: Prepared, l: int, j: int, eps_t: float, k_max: int) -> PaperLayerBudget:
    """Theorem 6 for hidden layer ``l`` (0-based) at grid radius ``j`` and budget ``eps_t``."""
    d, width = prep.d, prep.sizes[l + 1]
    c0, lam = float(prep.c0[l][j]), float(prep.lam[l][j])
    ks = paper.k_star(c0, lam, eps_t, d, k_max)
    kc = paper.k_cert(c0, lam, eps_t, d, k_max)
    return PaperLayerBudget(
        rho0=float(prep.grids[l][j]), L_f=float(prep.lf[l][j]),
        L_f_radius=float(prep.grids[l][j]), M_g=float(prep.m_g[l][j]), C0=c0, lam=lam,
        k_star=ks, D_k_star=None if ks is None else paper.num_features(d, ks), k_cert=kc,
        D_k=None if kc is None else paper.num_features(d, kc),
        coef_bound=None if kc is None else min(paper.num_features(d, kc), width),
        bound_layer=None if kc is None else paper.eq71(c0, lam, d, kc),
        eps_layer=eps_t, eq74=paper.eq74(kc, d, width),
        eq75=paper.eq75(c0, lam, eps_t, d, width))


def paper_a_priori(prep: Prepared, eps: float, k_max: int) \
        -> tuple[list[PaperLayer], PaperNetwork | None, list[str]]:
    """The paper's certificate: per hidden layer, the network, and notes on what fails."""
    n, d, radius = prep.n_hidden, prep.d, prep.radius

    def layers(budgets=(None,) * n) -> list[PaperLayer]:
        return [PaperLayer(
            W_max=prep.w_max[l], V_max=prep.v_max[l], rho_sigma=prep.rho_sigma[l],
            rho_f=prep.rho_f[l], rho=prep.rho[l], assumption4=prep.assumption4[l],
            Lambda=(paper.lemma15(prep.op_norms, prep.lipschitz, l + 1)
                    if prep.assumption14 else None),
            budget=budgets[l]) for l in range(n)]

    if not all(prep.assumption4):
        bad = [l + 1 for l in range(n) if not prep.assumption4[l]]
        return layers(), None, [
            "the paper's Assumption 4 is not proven in hidden layer(s) " + ", ".join(
                f"{l} (the proven rho = {prep.rho[l - 1]:.4g} is not above R = {radius:g})"
                for l in bad) + ": no paper certificate; see q_hat and rho_pole"]
    if not prep.assumption14:
        return layers(), None, [
            f"Assumption 14 fails ({prep.act.name} is not globally Lipschitz): the paper's "
            "Lemmas 15 and 19 and the budget split do not apply"]
    idx = [_choose(prep, l, eps / n, k_max) for l in range(n)]
    c_star, lam_star, lam_bar, k_bar = _budget(prep, idx, eps, k_max)
    if lam_bar is not None and prep.rho0_user is None:
        idx = [_choose(prep, l, paper.eq62(eps, n, lam_bar), k_max) for l in range(n)]
        c_star, lam_star, lam_bar, k_bar = _budget(prep, idx, eps, k_max)
    if lam_bar is None:
        return layers(), PaperNetwork(C_star=c_star, lam_star=lam_star), [
            f"Lemma 19: no k <= k_max = {k_max} satisfies Eq. 54 on the way to Lambda_bar; "
            "raise k_max"]
    eps_t = paper.eq62(eps, n, lam_bar)
    width_bound = paper.num_features(d, k_bar)
    budgets = [_layer_budget(prep, l, idx[l], eps_t, k_max) for l in range(n)]
    orders = tuple(b.k_cert for b in budgets)
    network = dict(
        Lambda_bar=lam_bar, eps_uniform=eps_t, k_bar=k_bar, width_bound=width_bound,
        param_bound=paper.eq69(d, [width_bound] * n, prep.sizes[-1]),
        non_vacuous=all(b.eq75 for b in budgets), narrower=all(b.eq74 for b in budgets),
        orders=orders)
    notes = []
    if any(k is None for k in orders):
        notes.append(f"Eq. 72: no k <= k_max = {k_max} in hidden layer(s) "
                     f"{[l + 1 for l, k in enumerate(orders) if k is None]}")
    else:
        steps = paper.theorem16_factors(list(orders), prep.op_norms, prep.lipschitz, d)
        budgets = [dataclasses.replace(b, Lambda_step=st) for b, st in zip(budgets, steps,
                                                                           strict=True)]
        network.update(
            widths=tuple(min(paper.num_features(d, k), w) for k, w in zip(
                orders, prep.sizes[1:-1], strict=True)),
            bound_a_priori=float(sum(steps[l] * budgets[l].bound_layer for l in range(n))))
    return layers(budgets), PaperNetwork(C_star=c_star, lam_star=lam_star,
                                         budget=PaperBudget(**network)), notes


def paper_at_orders(prep: Prepared, orders: list[int]) -> float | None:
    """The paper's a priori bound (Theorem 16, Lemma 15, Eq. 65, Eq. 71) for a compression at
    the given orders; each layer's ``rho0`` is the grid radius that minimises its Eq. 71 bound
    (any fixed ``rho0`` in ``(R, rho)`` is valid). None when Assumption 4 or 14 fails."""
    if not (all(prep.assumption4) and prep.assumption14):
        return None
    d = prep.d
    steps = paper.theorem16_factors(list(orders), prep.op_norms, prep.lipschitz, d)
    total = 0.0
    for l, k in enumerate(orders):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            log_b = (math.log1p(paper.num_features(d, k)) + np.log(prep.c0[l])
                     - (k + 1) * prep.lam[l])
        total += steps[l] * float(np.exp(np.min(log_b)))
    return total


# ------------------------------------------------------------------------------------------------
# ours
# ------------------------------------------------------------------------------------------------


class _Plan:
    """Per-layer ingredients of our bound on its radius grid."""

    def __init__(self, prep: Prepared, l: int, delta: float, k_max: int):
        ch = prep.chains[l]
        self.grid = prep.ours_grids[l]
        with np.errstate(divide="ignore"):
            log_m = np.log(np.max(ch["M"], axis=1))
            self.log_mc = np.minimum(log_m, np.log(np.max(ch["Mc"], axis=1)))
            n_k = np.array([min(num_monomials(prep.d, k), prep.sizes[l + 1])
                            for k in range(k_max + 1)], np.float64)
            self.log_gamma = np.log(1.0 + n_k * (1.0 + delta))
            v = prep.v_max[l]
            self.log_v = math.log(v) if v > 0 else -math.inf

    def log_bounds(self, radius: float, k: int) -> np.ndarray:
        return (self.log_gamma[k] + self.log_v + self.log_mc
                + (k + 1) * np.log(radius / self.grid))

    def k_ours(self, radius: float, log_eps: float):
        """``(k_ours, r)``: least k whose Schwarz bound, minimised over the grid, is <= eps."""
        if self.grid.size == 0:
            return None, None
        ks = np.arange(self.log_gamma.size)[:, None]
        logb = (self.log_gamma[:, None] + self.log_v + self.log_mc[None, :]
                + (ks + 1) * np.log(radius / self.grid)[None, :])
        k = _first_k(np.min(logb, axis=1), log_eps)
        if k is None:
            return None, None
        return k, float(self.grid[int(np.argmin(logb[k]))])


def _lambda_ours(prep: Prepared, widths: list[int], delta: float) -> list[float]:
    n = prep.n_hidden
    return [prep.lipschitz ** (n - l - 1) * math.prod(
        widths[m] * (1.0 + delta) * prep.v_max[m] for m in range(l + 1, n)) for l in range(n)]


def _ours_orders(prep: Prepared, plans: list[_Plan], eps: float, delta: float, k_max: int):
    """Our fixed point orders -> Lambda -> budget: ``(orders or None, Lambda_ours, eps_l)``."""
    n, d = prep.n_hidden, prep.d
    orders: list[int | None] = [0] * n
    lam_l = [1.0] * n
    eps_l = eps
    for _ in range(10 * k_max + 10):
        widths = [min(num_monomials(d, k), prep.sizes[l + 1]) for l, k in enumerate(orders)]
        lam_l = _lambda_ours(prep, widths, delta)
        eps_l = eps / (n * max(lam_l))
        new = [plans[l].k_ours(prep.radius, math.log(eps_l))[0] for l in range(n)]
        if any(k is None for k in new):
            return new, lam_l, eps_l
        new = [max(a, b) for a, b in zip(orders, new, strict=True)]
        if new == orders:
            break
        orders = new
    return orders, lam_l, eps_l


def ours_a_priori(prep: Prepared, eps: float, delta: float, k_max: int) \
        -> tuple[list[OursLayer], OursNetwork | None, list[str]]:
    """Our certificate: per hidden layer, the network, and notes on what fails."""
    n, d, radius = prep.n_hidden, prep.d, prep.radius
    bare = [OursLayer(rho_ours=prep.rho_ours[l]) for l in range(n)]
    if not all(prep.holomorphic_ours):
        bad = [l + 1 for l in range(n) if not prep.holomorphic_ours[l]]
        return bare, None, [
            "our deviation chain does not prove holomorphy beyond R in hidden layer(s) "
            + ", ".join(f"{l} (rho_ours = {prep.rho_ours[l - 1]:.4g})" for l in bad)
            + ": no certificate of ours"]
    if not prep.assumption14:
        return bare, None, [f"{prep.act.name} is not globally Lipschitz: our downstream "
                            "factors do not apply"]
    plans = [_Plan(prep, l, delta, k_max) for l in range(n)]
    orders, lam_l, eps_l = _ours_orders(prep, plans, eps, delta, k_max)
    if any(k is None for k in orders):
        return bare, OursNetwork(Lambda_bar_ours=max(lam_l), eps_uniform_ours=eps_l), [
            f"ours: no order <= k_max = {k_max} certifies eps_l = {eps_l:.3g} in hidden "
            f"layer(s) {[l + 1 for l, k in enumerate(orders) if k is None]}"]
    total = 0.0
    layers = []
    for l in range(n):
        k = orders[l]
        logb = plans[l].log_bounds(radius, k)
        bound = lam_l[l] * math.exp(float(np.min(logb)))
        total += bound
        layers.append(OursLayer(
            rho_ours=prep.rho_ours[l], k_ours=k, rho0_ours=float(plans[l].grid[int(np.argmin(
                logb))]), width_ours=min(num_monomials(d, k), prep.sizes[l + 1]),
            Lambda_ours=lam_l[l], eps_layer_ours=eps_l, bound_ours=bound))
    widths = tuple(li.width_ours for li in layers)
    arch = [d, *widths, prep.sizes[-1]]
    param_bound = sum(a * b + b for a, b in zip(arch[:-1], arch[1:], strict=True))
    return layers, OursNetwork(
        Lambda_bar_ours=max(lam_l), eps_uniform_ours=eps_l, orders_ours=tuple(orders),
        widths_ours=widths, width_bound_ours=max(widths), param_bound_ours=param_bound,
        non_vacuous_ours=param_bound < num_params(prep.params), bound_a_priori_ours=total), []


def ours_at_orders(prep: Prepared, orders: list[int], delta: float) -> float | None:
    """Our a priori bound for a compression at the given orders (maxvol tolerance ``delta``)."""
    if not (all(prep.holomorphic_ours) and prep.assumption14):
        return None
    k_max = max(orders)
    widths = [min(num_monomials(prep.d, k), prep.sizes[l + 1]) for l, k in enumerate(orders)]
    lam_l = _lambda_ours(prep, widths, delta)
    total = 0.0
    for l, k in enumerate(orders):
        plan = _Plan(prep, l, delta, k_max)
        total += lam_l[l] * math.exp(float(np.min(plan.log_bounds(prep.radius, k))))
    return total
