"""A posteriori certificates of a given backward-order compression: the paper's Theorem 5 applied
to the actual weights, and ours (sharper).

Both take the compressed network and its :class:`~jaxcompress.CompressInfo` (backward order, any
selector and feature kind: every layer's upstream map is then the original one). For hidden
layer ``l`` the outgoing weights before (``v``: the original kernel restricted to the neurons
kept in layer ``l + 1``) and after (``vt``) are known, and so are the error's Taylor
coefficients ``e_a = (Z w)_a``, ``w = v - embed(vt)``, computed by a float64 Taylor pass of the
original network up to ``K_top = max_l k_l + extra_orders``.

**The paper's** (``bound_thm5``, ``a_posteriori_paper``): Theorem 5 (Eq. 16),
``|y_j - yt_j| <= (||v_{:,j}||_1 + ||vt_{:,j}||_1) M_g rho0/(rho0 - R) (R/rho0)^{k+1}``, at every
working radius of the paper's grid (any ``rho0`` in ``(R, rho)`` is valid; the smallest is
kept per output ``j``), plus ``sum_{|a| <= k} |e_a| R^|a|``: Theorem 5 assumes exact matching,
and this term bounds what the float matching residual adds (``|T_k e(x)| <= sum |e_a| |x^a|``).
Theorem 16 sums the layers with Lemma 15's factors of the compressed network.

**Ours** (``bound_post``, ``a_posteriori_bound``). On the line ``phi(t) = e(t x/|x|)``,
``phi_j = p_j(xhat) = sum_{|a|=j} e_a xhat^a``, and Cauchy-Schwarz with the multinomial identity
``sum_{|a|=j} (j!/a!) xhat^{2a} = |xhat|^{2j} = 1`` gives
``|p_j(xhat)| <= P_j := (sum_{|a|=j} |e_a|^2 a!/j!)^{1/2}``. So for every ``K <= K_top``

.. math:: |e(x)| \\le \\sum_{j \\le K} P_j R^j + \\mathrm{tail}_K,

with the tail beyond order ``K`` bounded either by Cauchy estimates on ``phi - phi_0``
(``A' (R/rho0)^{K+1} rho0/(rho0 - R)``, ``A' = min(sum |w_i| M_i + |e_0|,
sum |w_i| M'_i) >= sup |e - e_0|``) or by the Schwarz lemma applied to ``e - T_K e``
(``(A + sum_{j<=K} P_j rho0^j) (R/rho0)^{K+1}``, ``A = min(sum |w_i| M_i, sum |w_i|
M'_i)``), with ``M_i, M'_i`` from our deviation chain; the minimum over ``K``, ``rho0`` and both
forms is taken per output component. The downstream factors use the actual compressed kernels
entrywise (``|Kt_{l+2}| ... |Kt_L|``), not their operator norms. Explicit coefficients capture
the cancellation between neurons that a single ``sum |w_i| M_i`` cannot.
"""

from __future__ import annotations

import math

import numpy as np

from jaxcompress.activations import get_activation
from jaxcompress.certificates import paper
from jaxcompress.certificates.a_priori import ours_at_orders, paper_at_orders
from jaxcompress.certificates.prepared import Prepared
from jaxcompress.certificates.records import APosterioriLayer, APosterioriNetwork
from jaxcompress.layer import CompressInfo
from jaxcompress.mlp import validate_params
from jaxcompress.taylor import monomials

#: Memory cap of the extra-order Taylor pass.
EXTRA_ORDER_BYTES = 2**30


def _check(prep: Prepared, compressed, info: CompressInfo):
    """``(kept indices, compressed kernels, original kernels)`` of a compression of
    ``prep.params``, or a clear error when ``compressed`` / ``info`` do not belong to it."""
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
    n_hidden, params = prep.n_hidden, prep.params
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
    return kept, ktil, orig


class _Taylor:
    """The error's Taylor coefficients up to ``k_top``, grouped by degree (module docstring)."""

    def __init__(self, prep: Prepared, k_top: int):
        self.k_top, self.radius = k_top, prep.radius
        self.feats = prep.features(k_top)
        mons = monomials(prep.d, k_top)
        self.deg = mons.sum(axis=1)
        # Cauchy-Schwarz, multinomial weights: |sum_{|a|=j} e_a x^a| <= |x|^j (sum |e_a|^2 a!/j!)^.5
        lgamma = np.vectorize(math.lgamma)
        self.weight = np.exp(lgamma(mons + 1.0).sum(axis=1) - lgamma(self.deg + 1.0))[:, None]

    def coefficients(self, l: int, w: np.ndarray):
        """``(e_alpha, P_j)`` per output component of layer ``l``'s error weights ``w``."""
        coef = self.feats[l] @ w  # e_alpha per output component, (D_K, n_out)
        deg, weight = self.deg, self.weight
        by_deg = np.stack([np.sqrt(np.sum(weight[deg == j] * coef[deg == j] ** 2, axis=0))
                           for j in range(self.k_top + 1)])
        return coef, by_deg


def _ours_layer(prep: Prepared, l: int, taylor: _Taylor, by_deg: np.ndarray, abs_w: np.ndarray):
    """``(E, K_tail)`` per output component: ours, ``min_{K, rho0}`` of the explicit terms
    ``sum_{j<=K} P_j R^j`` plus the better of the Cauchy and Schwarz tails."""
    radius, k_top = prep.radius, taylor.k_top
    g = prep.ours_grids[l]
    explicit = np.cumsum(by_deg * (radius ** np.arange(k_top + 1))[:, None], axis=0)
    e_vec = np.full((abs_w.shape[1],), np.inf)
    k_tail = np.full((abs_w.shape[1],), -1)
    if g.size:
        ch = prep.chains[l]
        with np.errstate(invalid="ignore", over="ignore"):
            sup_e = ch["M"] @ abs_w  # >= sup |e| on B^C_r
            sup_de = ch["Mc"] @ abs_w  # >= sup |e - e_0|
            amp_c = np.minimum(sup_e + by_deg[0][None, :], sup_de)
            amp_s = np.minimum(sup_e, sup_de)
            powers = g[:, None] ** np.arange(k_top + 1)[None, :]
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
    return e_vec, k_tail


def _paper_layer(prep: Prepared, l: int, k: int, taylor: _Taylor, coef, v, ktil) -> tuple[
        float, float]:
    """``(bound_thm5, Lambda_post_paper)``: Theorem 5 (Eq. 16) on the actual weights plus the
    float matching residual, and Lemma 15 with the compressed downstream kernels."""
    radius, deg, n_hidden = prep.radius, taylor.deg, prep.n_hidden
    l1 = np.sum(np.abs(v), axis=0) + np.sum(np.abs(ktil[l + 1]), axis=0)  # per j
    resid = np.sum(np.abs(coef[deg <= k]) * (radius ** deg[deg <= k])[:, None], axis=0)
    r0 = prep.grids[l]
    with np.errstate(over="ignore", invalid="ignore"):
        tail = prep.m_g[l] * r0 / (r0 - radius) * (radius / r0) ** (k + 1)
        per_j = np.min(tail[:, None] * l1[None, :], axis=0) + resid
    lam15 = prep.lipschitz ** (n_hidden - l - 1) * math.prod(
        paper.op_inf(ktil[j]) for j in range(l + 2, n_hidden + 1))
    return float(np.max(per_j)), lam15


def _extra_order_top(prep: Prepared, k_list: list[int], extra_orders: int) -> int:
    """``max_l k_l + extra_orders``, lowered while the Taylor pass would pass
    :data:`EXTRA_ORDER_BYTES` (it is only a sharpening)."""
    k_top = max(max(k_list), 0) + int(extra_orders)
    while k_top > max(k_list) and math.comb(2 * prep.d + k_top, 2 * prep.d) * max(
            prep.sizes[1:-1]) * 8 > EXTRA_ORDER_BYTES:
        k_top -= 1
    return k_top


def a_posteriori(prep: Prepared, compressed, info: CompressInfo, extra_orders: int,
                 delta: float) -> tuple[list[APosterioriLayer], APosterioriNetwork]:
    """Both a posteriori certificates: per hidden layer, and for the network."""
    kept, ktil, orig = _check(prep, compressed, info)
    n_hidden = prep.n_hidden
    k_list = [int(li.order) for li in info.layers]
    taylor = _Taylor(prep, _extra_order_top(prep, k_list, extra_orders))
    paper_ok = all(prep.assumption4) and prep.assumption14
    per_layer = []
    totals = np.zeros((ktil[-1].shape[1],))
    total_paper = 0.0
    for l in range(n_hidden):
        v = orig[l + 1] if l + 1 == n_hidden else orig[l + 1][:, kept[l + 1]]
        w = v.copy()
        np.subtract.at(w, kept[l], ktil[l + 1])
        coef, by_deg = taylor.coefficients(l, w)
        e_vec, k_tail = _ours_layer(prep, l, taylor, by_deg, np.abs(w))
        down = np.eye(ktil[l + 1].shape[1])
        for m in range(l + 2, n_hidden + 1):
            down = down @ np.abs(ktil[m])
        down = down * prep.lipschitz ** (n_hidden - l - 1)
        contrib = e_vec @ down if np.all(np.isfinite(e_vec)) else np.full((down.shape[1],),
                                                                          np.inf)
        totals = totals + contrib
        bound5, lam15 = _paper_layer(prep, l, k_list[l], taylor, coef, v, ktil) if paper_ok \
            else (None, None)
        if paper_ok:
            total_paper += lam15 * bound5
        per_layer.append(APosterioriLayer(
            order=k_list[l],
            residual=float(np.max(np.asarray(info.layers[l].residual, np.float64))),
            max_coef=float(np.max(np.asarray(info.layers[l].max_coef, np.float64))),
            inflation=paper.op_inf(ktil[l + 1]) / max(paper.op_inf(v), 1e-300),
            K_tail=int(k_tail[int(np.argmax(e_vec))]), bound_post=float(np.max(e_vec)),
            Lambda_post=float(np.max(np.sum(down, axis=0))),
            contribution=float(np.max(contrib)), bound_thm5=bound5, Lambda_post_paper=lam15))
    ours = float(np.max(totals))
    return per_layer, APosterioriNetwork(
        a_posteriori_bound=ours if math.isfinite(ours) else None,
        a_posteriori_paper=total_paper if paper_ok else None,
        a_priori_at_orders=paper_at_orders(prep, k_list),
        a_priori_at_orders_ours=ours_at_orders(prep, k_list, delta))
