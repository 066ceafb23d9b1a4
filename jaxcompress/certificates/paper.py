"""The paper's formulas as written (Wang, Wang & Ziyin 2026, arXiv 2608.21752).

Each function computes one equation of the paper; its docstring quotes it. Notation: the network
``h^(0) = x``, ``h^(l) = sigma(W^(l) h^(l-1) + b^(l))`` for the ``L - 1`` hidden layers
``l = 1..L-1``, ``y_out = W^(L) h^(L-1)`` (Eq. 3). Our kernels are in Flax layout,
``K_l = W^(l)^T`` (``fan_in x fan_out``), so the incoming weight vector ``w_i`` of neuron ``i``
is column ``i`` of ``K_l`` and row ``j`` of ``W^(l+1)`` is column ``j`` of ``K_{l+1}``. The
domain is a ball of radius ``R`` about its centre, which is the expansion point (folded into the
first bias, as in :mod:`jaxcompress.certificates.chain`).

Readings of the paper where it is ambiguous (each chosen so that the paper's own proofs, Lemma 9
and Theorem 5, are valid; each is tested in ``tests/test_certify_paper.py``):

1. **The bias is absorbed** (Section 2: "``b^(l)`` can be absorbed into ``W^(l)`` ... by
   appending a constant coordinate equal to 1"): ``f = h^(l-1)`` becomes
   ``fbar = (f, 1)`` and ``w_i`` becomes ``wbar_i = (w_i, b_i)``. So ``W_max`` (Eq. 6) is
   ``max_i ||(w_i, b_i)||_2``. Why: Eq. 5 and Eq. 17 take an inf / sup over the ball
   ``{||w|| <= W_max}``, and Theorem 5's Cauchy estimate applies Eq. 17 to every actual neuron
   ``g(z, w_i) = sigma(w_i^T f(z) + b_i)``, which lies in that ball only if the bias is part of
   the vector (for an activation whose modulus grows with ``Re u``, such as GELU, the bias-free
   sup is not a bound on the neurons). The constant coordinate has zero derivative, so
   ``J fbar = (J f, 0)``: ``L_f`` (Eq. 4) and ``rho_f`` are unchanged, and
   ``||fbar(0)||^2 = ||f(0)||^2 + 1``.
2. **``V_max`` (Eq. 7) and the operator norms of Lemma 15 exclude the next layer's bias.** The
   appended constant coordinate is not one of the ``d_l`` neurons being compressed (Theorem 5's
   sums run over ``i in [d_l]``; the constant's contribution is the same in ``y`` and
   ``ytilde``), and a constant shift does not change a Lipschitz constant. Eq. 10 also writes
   ``W^(l+1) in R^{d_{l+1} x d_l}``.
3. **``rho_sigma`` (Eq. 5)** is ``inf_{||wbar|| <= W_max} dist(wbar^T fbar(0), C \\ D_sigma)``.
   As ``wbar`` runs over the ball, ``wbar^T fbar(0)`` fills the real interval
   ``[-U, U]``, ``U = W_max ||fbar(0)||``, so ``rho_sigma = inf_{|u| <= U} dist(u, ...)``. For
   the sigmoid, tanh, softplus and SiLU the inf is attained at ``u = 0`` (``pi, pi/2, pi, pi``)
   and the bias does not enter; for the tanh-GELU (poles off the imaginary axis) it does, through
   ``U``; entire activations have ``rho_sigma = inf``.

Quantities that are suprema the paper does not say how to compute are bounded in the direction
that keeps every theorem valid, and the report says so ("(upper bound)", "(lower bound)"):

4. **``L_f(r)`` (Eq. 4), upper bound** (``h^(0) = x``, so ``L_{h^0} = 1``): for hidden layer
   ``m``, ``J h^(m)(z) = diag(sigma'(u^(m)(z))) W^(m) J h^(m-1)(z)``, hence

   .. math:: \\bar L_{h^m}(r) = \\|W^{(m)}\\|_2 \\, \\max_i \\overline{|\\sigma'|}(s_i, A_i)
             \\, \\bar L_{h^{m-1}}(r), \\qquad s_i = \\|w_i\\| r \\bar L_{h^{m-1}}(r),
             \\quad A_i = |u_i(0)| + s_i,

   because Eq. 32 (``|f(z) - f(0)| <= r L_f(r)``) puts ``u_i(z)`` in the disc of radius ``s_i``
   about the real ``u_i(0)``, inside the rectangle ``|Im| <= s_i``, ``|Re| <= A_i`` where the
   bound rule bounds ``|sigma'|``. The same disc lies in ``D_sigma`` while
   ``s_i < dist(u_i(0), C \\ D_sigma)``: Lemma 9's argument, neuron by neuron, proves ``h^(m)``
   holomorphic on ``B_C(0, r)``. ``rho_f`` (Assumption 1) is reported as the largest ``r`` for
   which this proves ``f = h^(l-1)`` holomorphic with ``Lbar_f(r)`` finite: a **lower bound**.
5. **``rho`` (Eq. 8), lower bound**: ``sup{r < rho_f : r W_max Lbar_f(r) < rho_sigma}``. With
   ``Lbar_f >= L_f`` (both nondecreasing) the set is a subset of Eq. 8's, so the value is
   ``<= rho``; ``R <`` it proves Assumption 4. For layer 1, ``f = id``, ``L_f = 1`` and
   ``rho = rho_sigma / W_max`` exactly.
6. **``M_g`` (Eq. 17), upper bound**: ``u = wbar^T fbar(z) = wbar^T fbar(0) + w^T (f(z) - f(0))``
   has ``|Im u| <= s_0 = W_max rho0 Lbar_f(rho0)`` and
   ``|Re u| <= W_max ||fbar(0)|| + s_0``; the bound rule's sup over that rectangle bounds
   ``|g|`` over the whole ball of Eq. 17.

Everything else is computed exactly from those inputs: ``C0``, ``lambda`` (Eq. 20), ``k*``
(Eq. 21/23, with its ``d_in log(k + d_in) - log(d_in!)`` term, i.e. ``2 (k + d_in)^d_in /
d_in!`` in place of ``1 + D_k``), ``k_cert`` (Eq. 72, with ``1 + D_k``), Lemma 15's downstream
factors (which need Assumption 14: ``sigma`` globally Lipschitz), Lemma 19's fixed point over
the ``L - 1`` hidden layers, the uniform split (Eq. 62), the width and parameter bounds
(Eqs. 68-69) and the non-vacuity conditions (Eqs. 74-75). The paper's a priori numbers assume
Algorithm 1's exact maximum-volume selection (Lemma 10: ``|C_ij| <= 1``); the library's
``selector="maxvol"`` gives ``|C_ij| <= 1 + delta`` (our bounds account for ``delta``).

``d_in`` is the dimension of the coordinates the derivatives are taken in (the ambient input
dimension; Appendix D's ``m``).
"""

from __future__ import annotations

import math

import numpy as np

from jaxcompress.certificates.bounds import BoundRule, interval_distance
from jaxcompress.certificates.chain import Net, bisect_radii


def num_features(d: int, k: int) -> int:
    """``D_k = C(d + k, d)`` (Eq. 18 / 31)."""
    return math.comb(d + k, d)


def w_max(kernel: np.ndarray, bias: np.ndarray) -> float:
    """Eq. 6 with the bias absorbed: ``W_max = max_i ||(w_i, b_i)||_2``."""
    return float(np.max(np.sqrt(np.sum(kernel**2, axis=0) + bias**2)))


def op_inf(kernel: np.ndarray) -> float:
    """``||W||_{op,inf} = max_j sum_i |W_ji|`` (Lemma 15) of ``W = kernel^T``."""
    return float(np.max(np.sum(np.abs(kernel), axis=0)))


def v_max(next_kernel: np.ndarray) -> float:
    """Eq. 7: ``V_max = max_j ||W^(l+1)_{j,:}||_1`` (the next layer's bias excluded)."""
    return op_inf(next_kernel)


def rho_sigma(rule: BoundRule, wmax: float, f0_norm: float) -> float:
    """Eq. 5: ``inf_{||wbar|| <= W_max} dist(wbar^T fbar(0), C \\ D_sigma)`` =
    ``inf_{|u| <= W_max ||fbar(0)||} dist(u, ...)`` (reading 3 of the module docstring)."""
    return interval_distance(rule, wmax * f0_norm)


def jacobian_chain(net: Net, radii: np.ndarray) -> list[np.ndarray]:
    """``Lbar_{h^m}(r)`` for ``m = 0..L-2`` at each radius (reading 4), ``inf`` where the chain
    does not prove ``h^m`` holomorphic on ``B_C(0, r)`` with a finite bound.

    Returns a list whose entry ``l - 1`` is the upstream bound ``Lbar_f`` of hidden layer ``l``.
    """
    rule = net.rule
    radii = np.asarray(radii, np.float64)
    lip = np.ones(radii.shape)
    out = [lip]
    with np.errstate(over="ignore", invalid="ignore"):
        for m in range(1, net.n_hidden):
            u0 = net.u0[m - 1]
            s = net.col2[m - 1][None, :] * (radii * lip)[:, None]
            dsup = rule.dsup(s, np.abs(u0)[None, :] + s)
            dist = rule.singular_distance(u0)
            ok = np.isfinite(lip) & np.all(np.isfinite(dsup) & (s < dist[None, :]), axis=1)
            lip = np.where(ok, net.spec[m - 1] * np.max(np.where(ok[:, None], dsup, 0.0),
                                                         axis=1) * lip, np.inf)
            out.append(lip)
    return out


def f0_norms(net: Net) -> list[float]:
    """``||fbar(0)|| = sqrt(||h^(l-1)(0)||^2 + 1)`` per hidden layer (``h^0(0) = 0``)."""
    return [1.0] + [float(math.sqrt(float(np.sum(g**2)) + 1.0)) for g in net.g0[:-1]]


def radii(net: Net, wmax: list[float], rho_sig: list[float]) -> tuple[list[float], list[float]]:
    """``(rho_f, rho)`` per hidden layer: the lower bounds of readings 4 and 5."""
    n = net.n_hidden
    scale = 1.0 / max(wmax[0], 1e-300)

    def f_valid(r):
        return [np.isfinite(x) for x in jacobian_chain(net, r)]

    def rho_valid(r):
        lf = jacobian_chain(net, r)
        with np.errstate(invalid="ignore", over="ignore"):
            return [np.isfinite(lf[l]) & (r * wmax[l] * lf[l] < rho_sig[l]) for l in range(n)]

    rho_f = [math.inf] + bisect_radii(f_valid, n, scale)[1:]
    rho = bisect_radii(rho_valid, n, scale)
    rho[0] = rho_sig[0] / wmax[0]  # layer 1: f = id, L_f = 1, Eq. 8 in closed form
    rho = [min(r, rf) for r, rf in zip(rho, rho_f, strict=True)]
    return rho_f, rho


def m_g(rule: BoundRule, wmax: float, f0_norm: float, rho0, lf) -> np.ndarray:
    """Eq. 17, upper bound (reading 6): the rule's sup over ``|Im u| <= s_0``,
    ``|Re u| <= W_max ||fbar(0)|| + s_0``, ``s_0 = W_max rho0 Lbar_f(rho0)``."""
    s0 = wmax * np.asarray(rho0, np.float64) * np.asarray(lf, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return rule.sup(s0, wmax * f0_norm + s0)


def c0_lam(vmax: float, mg, rho0, radius: float):
    """Eq. 20: ``C0 = V_max M_g rho0 / (rho0 - R)``, ``lambda = log(rho0 / R)``."""
    rho0 = np.asarray(rho0, np.float64)
    return vmax * np.asarray(mg) * rho0 / (rho0 - radius), np.log(rho0 / radius)


def _first(cond: np.ndarray) -> int | None:
    idx = np.nonzero(cond)[0]
    return int(idx[0]) if idx.size else None


def k_star(c0: float, lam: float, eps: float, d: int, k_max: int) -> int | None:
    """Eq. 21/23: the least ``k >= 0`` with
    ``(k+1) lambda >= log(2 C0 / eps) + d log(k + d) - log(d!)`` (None if none ``<= k_max``)."""
    if c0 == 0:
        return 0  # the degenerate case below Eq. 20: zero error
    if not (math.isfinite(c0) and lam > 0):
        return None
    k = np.arange(k_max + 1, dtype=np.float64)
    rhs = math.log(2.0 * c0 / eps) + d * np.log(k + d) - math.lgamma(d + 1)
    return _first((k + 1) * lam >= rhs)


def log_features(d: int, k: np.ndarray) -> np.ndarray:
    """``log D_k`` for an array of orders."""
    from scipy.special import gammaln

    k = np.asarray(k, np.float64)
    return gammaln(d + k + 1) - gammaln(k + 1) - gammaln(d + 1)


def k_cert(c0: float, lam: float, eps: float, d: int, k_max: int) -> int | None:
    """Eq. 72: the least ``k >= 0`` with ``(1 + D_k) C0 exp(-(k+1) lambda) <= eps``."""
    if c0 == 0:
        return 0
    if not (math.isfinite(c0) and lam > 0):
        return None
    k = np.arange(k_max + 1, dtype=np.float64)
    log_b = np.logaddexp(0.0, log_features(d, k)) + math.log(c0) - (k + 1) * lam
    return _first(log_b <= math.log(eps))


def eq71(c0: float, lam: float, d: int, k: int) -> float:
    """Eq. 71: ``(1 + D_k) C0 exp(-(k+1) lambda)``, the single-layer bound at order ``k``."""
    return (1.0 + num_features(d, k)) * c0 * math.exp(-(k + 1) * lam)


def lemma15(op_norms: list[float], lip: float, layer: int) -> float:
    """Lemma 15 (Eq. 48): ``L_sigma^{L-l-1} prod_{j=l+2}^{L} ||W^(j)||_{op,inf}``.

    ``op_norms[j - 1] = ||W^(j)||_{op,inf}`` for ``j = 1..L``; ``layer`` is ``l`` (1-based).
    """
    n_layers = len(op_norms)  # L
    return lip ** (n_layers - layer - 1) * math.prod(op_norms[layer + 1:])


def d_bar(c_star: float, lam_star: float, s: float, d: int, k_max: int):
    """Eq. 54: ``(k*(s), Dbar(s) = C(d + k*(s), d))`` with ``C*``, ``lambda*`` (None if no
    ``k <= k_max``)."""
    k = k_star(c_star, lam_star, s, d, k_max)
    return (None, None) if k is None else (k, num_features(d, k))


def lemma19(c_star: float, lam_star: float, eps: float, op_norms: list[float], lip: float,
            d: int, k_max: int):
    """Lemma 19: the least ``Lambda >= 1`` with ``psi(Lambda) <= Lambda`` (Eq. 56),

    .. math:: \\psi(\\Lambda) = (L_\\sigma^+)^{L-2}\\,\\Lambda_0^\\star\\,
              \\bar D\\big(\\epsilon / ((L-1)\\Lambda)\\big)^{L-2},

    ``L_sigma^+ = max(1, L_sigma)``, ``Lambda_0* = prod_{j=2}^{L} max(1, ||W^(j)||_{op,inf})``.
    Computed by ``Lambda_0 = 1``, ``Lambda_{n+1} = max(1, psi(Lambda_n))`` until
    ``psi(Lambda_n) <= Lambda_n``: ``psi`` is nondecreasing, so by induction every iterate is
    ``<=`` every feasible ``Lambda`` and the sequence is nondecreasing; it stops because
    ``Dbar`` takes integer values and increases at every step that does not stop (each step
    raises ``k*`` by at least one). Returns ``(Lambda_bar, k*(eps_t))`` or ``(None, None)`` when
    ``k*`` would exceed ``k_max``. Works in logs (``Lambda_bar`` can be astronomically large).
    """
    n_layers = len(op_norms)
    lp = max(1.0, lip)
    log_l0 = sum(math.log(max(1.0, x)) for x in op_norms[1:])
    log_lam = 0.0
    for _ in range(k_max + 2):
        s = eps / ((n_layers - 1) * math.exp(log_lam))
        k, dk = d_bar(c_star, lam_star, s, d, k_max)
        if k is None:
            return None, None
        log_psi = (n_layers - 2) * (math.log(lp) + math.log(dk)) + log_l0
        if log_psi <= log_lam:
            return math.exp(log_lam), k
        log_lam = max(0.0, log_psi)
    return None, None  # pragma: no cover (the iteration stops within k_max + 1 steps)


def eq62(eps: float, n_hidden: int, lam_bar: float) -> float:
    """Eq. 62: ``eps_t = eps / ((L - 1) Lambda_bar)``."""
    return eps / (n_hidden * lam_bar)


def eq69(d_in: int, widths: list[int], d_out: int) -> int:
    """Eq. 69's left side: ``sum_{l=1}^{L} d'_l d'_{l-1}`` (``d'_0 = d_in``, ``d'_L = d_out``;
    weights only, the paper absorbs the biases)."""
    sizes = [d_in, *widths, d_out]
    return int(sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True)))


def eq75(c0: float, lam: float, eps: float, m: int, width: int) -> bool:
    """Eq. 75: ``lambda [(m! d_l)^{1/m} - m] >= log((1 + d_l) C0 / eps_l)`` (for ``d_l >= 2``)."""
    if width < 2:
        return False
    if c0 == 0:
        return True
    lhs = lam * ((math.factorial(m) * width) ** (1.0 / m) - m)
    return bool(lhs >= math.log((1 + width) * c0 / eps))


def eq74(k: int | None, m: int, width: int) -> bool:
    """Eq. 74: ``D_{k_cert} < d_l``."""
    return k is not None and num_features(m, k) < width


def theorem16_factors(orders: list[int], op_norms: list[float], lip: float, d: int):
    """Per hidden layer ``l``, Lemma 15 on the backward-compressed network with Eq. 65's bound
    ``||W^(j, t-1)||_{op,inf} <= D_{k_{j-1}} ||W^(j, 0)||_{op,inf}`` for every downstream
    ``j = l+2..L``: ``L_sigma^{L-l-1} prod_j D_{k_{j-1}} ||W^(j,0)||_{op,inf}``."""
    n_layers = len(op_norms)
    out = []
    for layer in range(1, n_layers):
        prod = 1.0
        for j in range(layer + 2, n_layers + 1):
            prod *= num_features(d, orders[j - 2]) * op_norms[j - 1]
        out.append(lip ** (n_layers - layer - 1) * prod)
    return out
