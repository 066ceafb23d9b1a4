"""Compression to an error budget: choose the Taylor orders, certified or measured.

:func:`compress_to_tolerance` picks per-layer orders for a backward-order derivative-matching
compression so that the sup error on the domain is at most ``eps``, either with a proof
(``mode="certified"``: the a priori orders of the paper's or our certificate, checked by our a
posteriori certificate) or by measurement (``mode="measured"``: :func:`jaxcompress.sup_error`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import Activation, get_activation
from jaxcompress.certificates.bounds import has_bound_rule
from jaxcompress.certificates.certificate import certify, certify_prepared
from jaxcompress.certificates.chain import domain_geometry
from jaxcompress.certificates.prepared import Prepared, _features_jit
from jaxcompress.certificates.report import Certificate
from jaxcompress.compress import CompressInfo, compress_layer
from jaxcompress.evaluate import sup_error
from jaxcompress.mlp import Params, validate_params
from jaxcompress.taylor import monomials, num_monomials

__all__ = ["ToleranceResult", "compress_to_tolerance"]


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
      orders_from: certified mode: ``"paper"`` (the paper's ``k_cert``, Eq. 72), ``"ours"``
        (``k_ours``), or ``"best"`` (default: whichever of the two certifies the smaller
        network, by parameter count; the paper's on ties).
      history: one line per step of the search (what was tried and why).
      orders_source: certified mode: ``"paper"`` (the paper's ``k_cert``, Eq. 72) or ``"ours"``
        (``k_ours``), the certificate whose a priori orders started the search; measured mode:
        ``"measured"``.
    """

    params: Params
    orders: tuple[int, ...]
    report: Certificate
    measured_error: float
    info: CompressInfo
    mode: str
    history: tuple[str, ...] = ()
    orders_source: str = "measured"

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
            # a stand-in incoming layer: the compilation then depends only on (d_l, d_{l+1},
            # D_k, width), shared by every hidden layer of the same shape
            stand_in = {"kernel": np.zeros((1, z.shape[1]), self.dtype),
                        "bias": self.params[l - 1]["bias"]}
            kout, li = _select_jit(
                (stand_in, self.params[l]), z, np.asarray(self.radius, self.dtype),
                monomials(self.d, k).sum(axis=1), width=width, selector=self.selector,
                delta=self.delta)
            self.cache[key] = (np.asarray(li.kept), np.asarray(kout),
                               dataclasses.replace(li, layer=l), np.asarray(z))
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
            k = orders[l - 1]
            infos.append(dataclasses.replace(
                li, residual=jnp.asarray(resid, self.dtype), layer=l, order=k,
                num_features=num_monomials(self.d, k), num_rows=int(z.shape[0]),
                coord_dim=self.d))
        info = CompressInfo(layers=tuple(infos), activation=self.act, layer_order="backward",
                            features="taylor", selector=self.selector, coordinates="input")
        return [{key: jnp.asarray(v) for key, v in layer.items()} for layer in new], info


@functools.partial(jax.jit, static_argnames=("width", "selector", "delta"))
def _select_jit(pair, z, radius, degrees, *, width, selector, delta):
    """:func:`compress_layer` on the two layers around one hidden layer, compiled."""
    new, li = compress_layer(list(pair), 1, z, width=width, selector=selector, radius=radius,
                             degrees=degrees, delta=delta)
    return new[1]["kernel"], li


def compress_to_tolerance(
    params: Params,
    *,
    activation: str | Activation,
    domain,
    eps: float,
    mode: str = "certified",
    orders_from: str = "best",
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
      ``"certified"``: the a priori orders of :func:`certify` (``orders_from``: the paper's
        ``k_cert`` of Eq. 72 at the uniform budget of Eq. 62 and Lemma 19, or ours ``k_ours``),
        compressed with ``selector="maxvol"`` (Lemma 10's coefficient bound, up to
        ``1 + delta``); the a posteriori certificates of the result (ours and the paper's
        Theorem 5 on the actual weights; the smaller is used) are then computed and,
        should it exceed ``eps`` (floating-point residuals, maxvol swap cap), the order of the
        layer contributing most is raised until it does not. ``ToleranceResult.orders_source``
        and the first line of ``history`` say which certificate's orders were used. Refuses
        with ``ValueError`` (naming the layer and ``rho`` vs ``R``) when the chosen
        certificate(s) cannot certify the layer (Assumption 4 not proven, or no order
        certifies the budget). With
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
      orders_from: certified mode: ``"paper"`` (the paper's ``k_cert``, Eq. 72), ``"ours"``
        (``k_ours``), or ``"best"`` (default: whichever of the two certifies the smaller
        network, by parameter count; the paper's on ties).
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
    if orders_from not in ("best", "paper", "ours"):
        raise ValueError(f"compress_to_tolerance: orders_from must be 'best', 'paper' or "
                         f"'ours', got {orders_from!r}")
    params = validate_params(params, where="compress_to_tolerance")
    act = get_activation(activation)
    d = int(params[0]["kernel"].shape[0])
    radius, center = domain_geometry(domain, d, where="compress_to_tolerance")
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
        prep = Prepared(params, act, domain)
        report = certify_prepared(prep, eps=eps, delta=delta)
        orders, source = _certified_orders(report, orders_from, radius, params)
        comp = _Compressor(params, act.name, radius, center, "maxvol", delta)
        if source == "paper":
            history.append(f"a priori orders: the paper's k_cert (Eq. 72) = {orders} (budget "
                           f"eps_l = {report.eps_uniform:.3g} (Eq. 62), Lambda_bar = "
                           f"{report.Lambda_bar:.3g} (Lemma 19))")
        else:
            history.append(f"a priori orders: ours k_ours = {orders} (budget eps_l = "
                           f"{report.eps_uniform_ours:.3g}, Lambda_bar_ours = "
                           f"{report.Lambda_bar_ours:.3g})")

        def post(ords):
            small, info = comp.assemble(ords)
            rep = certify_prepared(prep, eps=eps, delta=delta, compressed=small, info=info)
            return small, info, rep

        small, info, rep = post(orders)
        while _proof(rep)[0] > eps:
            bound, which = _proof(rep)
            contrib = _contributions(rep)
            cands = [l for l in range(n_hidden) if orders[l] < max_order
                     and num_monomials(d, orders[l]) < int(params[l]["kernel"].shape[1])]
            if not cands:
                raise ValueError(
                    f"compress_to_tolerance: the a posteriori certificate {bound:.3g} ({which}) "
                    f"exceeds eps = {eps:g} at orders {orders} and no order can be raised")
            l = max(cands, key=lambda i: contrib[i])
            orders[l] += 1
            history.append(f"a posteriori bound {bound:.3g} ({which}) > eps: raise layer "
                           f"{l + 1} to k = {orders[l]}")
            small, info, rep = post(orders)
        history.append(f"a posteriori bound {_proof(rep)[0]:.3g} ({_proof(rep)[1]}) <= eps at "
                       f"{orders}")
        if refine:
            # bisection per layer, deepest first; only verified orders are ever accepted
            for l in range(n_hidden - 1, -1, -1):
                lo, hi = -1, orders[l]
                while hi - lo > 1:
                    trial = list(orders)
                    trial[l] = (lo + hi) // 2
                    t_small, t_info, t_rep = post(trial)
                    if _proof(t_rep)[0] <= eps:
                        hi = trial[l]
                        orders, small, info, rep = trial, t_small, t_info, t_rep
                        history.append(f"refine: layer {l + 1} -> k = {orders[l]}, a posteriori "
                                       f"bound {_proof(rep)[0]:.3g} ({_proof(rep)[1]})")
                    else:
                        lo = trial[l]
        err = measure(small)
        return ToleranceResult(params=small, orders=tuple(orders), report=rep,
                               measured_error=err, info=info, mode=mode,
                               history=tuple(history), orders_source=source)

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
                     compressed=small, info=info) if has_bound_rule(act) else None
    return ToleranceResult(params=small, orders=tuple(orders), report=report,
                           measured_error=err, info=info, mode=mode, history=tuple(history))


def _certified_orders(report: Certificate, orders_from: str, radius: float,
                      params: Params) -> tuple[list[int], str]:
    """The a priori orders of the paper's or our certificate (see ``orders_from``)."""
    paper_ok = report.orders is not None and all(k is not None for k in report.orders)
    ours_ok = report.orders_ours is not None
    if orders_from == "best":
        if paper_ok and ours_ok:
            sizes = [int(params[0]["kernel"].shape[0])]
            out = int(params[-1]["kernel"].shape[1])

            def count(widths):
                arch = [*sizes, *widths, out]
                return sum(a * b + b for a, b in zip(arch[:-1], arch[1:], strict=True))

            paper_n, ours_n = count(report.widths), count(report.widths_ours)
            source = "paper" if paper_n <= ours_n else "ours"
        else:
            source = "paper" if paper_ok else "ours"
    else:
        source = orders_from
    ok = paper_ok if source == "paper" else ours_ok
    if not ok:
        which = "the paper's" if source == "paper" else "our"
        for li in report.layers:
            rho = li.rho if source == "paper" else li.rho_ours
            if not radius < rho:
                raise ValueError(
                    f"compress_to_tolerance: {which} certificate fails in hidden layer "
                    f"{li.layer}: its holomorphy radius rho = {rho:.4g} is not larger than the "
                    f"domain radius R = {radius:g} (Assumption 4; q_hat = {li.q_hat:.3g}); no "
                    "certificate exists. Use mode='measured', a smaller domain, or smaller "
                    "weights.")
        raise ValueError(f"compress_to_tolerance: {which} certificate gives no orders: "
                         + "; ".join(report.notes) + "; use mode='measured' or a larger eps")
    orders = report.orders if source == "paper" else report.orders_ours
    return [int(k) for k in orders], source


def _proof(rep: Certificate) -> tuple[float, str]:
    """The smaller of the two a posteriori certificates (both rigorous) and whose it is."""
    cands = [(rep.a_posteriori_bound, "ours"), (rep.a_posteriori_paper, "paper Thm 16 + Eq. 16")]
    cands = [(b, w) for b, w in cands if b is not None]
    return min(cands) if cands else (float("inf"), "none")


def _contributions(rep: Certificate) -> list[float]:
    """Each layer's share of the a posteriori bound used by :func:`_proof`."""
    if _proof(rep)[1] == "ours":
        return [li.contribution for li in rep.layers]
    return [(li.Lambda_post_paper or 0.0) * (li.bound_thm5 or 0.0) for li in rep.layers]
