"""Compression to an error budget: choose the Taylor orders, certified or measured.

:func:`compress_to_tolerance` picks per-layer orders for a backward-order derivative-matching
compression so that the sup error on the domain is at most ``eps``, either with a proof
(``mode="certified"``: the a priori orders of the paper's or our certificate, checked by our a
posteriori certificate) or by measurement (``mode="measured"``: :func:`jaxcompress.sup_error`).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._checks import check_compute_dtype, check_key, check_positive_int, finite_number
from jaxcompress.activations import Activation, get_activation
from jaxcompress.certificates.bounds import has_bound_rule
from jaxcompress.certificates.certificate import certify, certify_prepared
from jaxcompress.certificates.chain import domain_geometry
from jaxcompress.certificates.prepared import Prepared, _features_jit
from jaxcompress.certificates.report import Certificate
from jaxcompress.compression import CompressInfo, compress_layer, rewire
from jaxcompress.domains import Ball, domain_center
from jaxcompress.evaluate import error_estimate, sup_error
from jaxcompress.features import LayerFeatures
from jaxcompress.mlp import Params, validate_params
from jaxcompress.select import MaxVol, as_selector
from jaxcompress.taylor import monomials, num_monomials

__all__ = ["ToleranceResult", "compress_to_tolerance", "order_advice",
           "smallest_uniform_order"]


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


class _BackwardSteps:
    """Backward-order derivative matching, one cached per-layer step per (layer, order).

    In backward order each hidden layer's features are those of the original network, so the
    step of layer ``l`` at order ``k`` (:func:`~jaxcompress.compression.compress_layer`, computed
    against the original next-layer kernel) does not depend on the other layers' orders, and any
    choice of per-layer orders is an assembly of cached steps: :meth:`assemble` gives the
    compressed network (for selectors that ignore the next layer's kernel, such as
    :class:`~jaxcompress.PivotedQR` and :class:`~jaxcompress.MaxVol`, the same network as
    ``jc.compress(params, jc.derivative_matching(orders, selector=...), domain=...)``),
    :meth:`padded` the same function with the original shapes (dropped neurons get zero outgoing
    weight: one ``sup_error`` compilation for every candidate).
    """

    def __init__(self, params: Params, act: str, domain, selector):
        self.params, self.act, self.selector = params, act, selector
        self.dtype = jnp.result_type(params[0]["kernel"])
        self.d = int(params[0]["kernel"].shape[0])
        self.widths = [int(layer["kernel"].shape[1]) for layer in params[:-1]]
        self.domain = domain
        self.center = domain_center(domain, self.dtype)
        self.radius = jnp.asarray(domain.radius, self.dtype)
        self.k_feat, self.feats = -1, None
        self.step = functools.cache(self._step)

    def _features(self, k: int):
        if k > self.k_feat:
            self.k_feat = max(k, self.k_feat + 4, 4)  # few recompilations as the order grows
            self.feats = _features_jit(self.params, self.center, activation=self.act,
                                       order=self.k_feat)
        return self.feats

    def _step(self, l: int, k: int):
        d_k = num_monomials(self.d, k)
        z = self._features(k)[l - 1][:d_k]
        scale = self.radius ** jnp.asarray(monomials(self.d, k).sum(axis=1), self.dtype)
        feats = LayerFeatures(z=z, scale=scale, layer=l, order=k, num_features=d_k,
                              coord_dim=self.d)
        return _step_jit(feats, self.params[l]["kernel"], width=min(d_k, self.widths[l - 1]),
                         selector=self.selector)

    def padded(self, orders: dict[int, int]) -> Params:
        out = list(self.params)
        for l, k in orders.items():
            kept, kernel, _ = self.step(l, k)
            out[l] = {"kernel": jnp.zeros_like(self.params[l]["kernel"]).at[kept].set(kernel),
                      "bias": self.params[l]["bias"]}
        return out

    def assemble(self, orders: Sequence[int]) -> tuple[Params, CompressInfo]:
        steps = [self.step(l, k) for l, k in enumerate(orders, start=1)]
        new = list(self.params)
        for l in range(len(orders), 0, -1):
            kept, kernel, _ = steps[l - 1]
            cols = steps[l][0] if l < len(orders) else slice(None)
            new = rewire(new, l, kept, kernel[:, cols])
        sel = getattr(self.selector, "name", type(self.selector).__name__)
        info = CompressInfo(
            layers=tuple(step[2] for step in steps), activation=self.act, layer_order="backward",
            features="taylor", selector=sel, coordinates="input",
            method=f"derivative_matching(order={tuple(orders)}, features=taylor, selector={sel}, "
                   "backward)",
            error_estimate=_estimate(self.params, new, activation=self.act, domain=self.domain))
        return new, info


@functools.partial(jax.jit, static_argnames=("width", "selector"))
def _step_jit(features, out_kernel, *, width, selector):
    return compress_layer(features, out_kernel, width, selector)


_estimate = jax.jit(error_estimate, static_argnames=("activation",))


def _emitter(progress, history: list[str]):
    """``emit(line)``: record a step of the search and report it as ``progress`` asks."""
    if progress is True:
        def report(line):
            print(f"[compress_to_tolerance] {line}", file=sys.stderr, flush=True)
    elif callable(progress):
        report = progress
    elif progress in (None, False):
        report = None
    else:
        raise TypeError(f"compress_to_tolerance: progress must be None, True or a callable, got "
                        f"{type(progress).__name__}")

    def emit(line: str) -> None:
        history.append(line)
        if report is not None:
            report(line)

    return emit


def _failure(message: str, history: list[str]) -> ValueError:
    """A ``ValueError`` saying what failed and, from the history, where the search got to."""
    tail = "\n  ".join(history[-6:])
    return ValueError(f"compress_to_tolerance: {message}" + (
        f"\nthe search so far (last {min(len(history), 6)} steps):\n  {tail}" if history else ""))


def smallest_uniform_order(compress_at, measure, eps: float, max_order: int, emit,
                           describe=None) -> tuple[int | None, Any, list[float]]:
    """The smallest ``k <= max_order`` whose compression ``compress_at(k)`` measures ``<= eps``.

    ``measure(result) -> float``. Reports each order through ``emit`` (with
    ``describe(result)`` appended when given). Returns ``(k, result, errors)`` with
    ``k = None`` (and the last result) when no order reaches ``eps``; :func:`order_advice` then
    says why. Shared by ``compress_to_tolerance(mode="measured")`` and
    ``jaxcompress compress --eps``.
    """
    errs: list[float] = []
    result = None
    for k in range(max_order + 1):
        result = compress_at(k)
        errs.append(measure(result))
        extra = "" if describe is None else f", {describe(result)}"
        emit(f"uniform k = {k}: measured {errs[-1]:.3e}{extra}")
        if errs[-1] <= eps:
            return k, result, errs
    return None, result, errs


def order_advice(errs: Sequence[float], eps: float, max_order_name: str = "max_order") -> str:
    """Why no order reached ``eps``: the best one, and whether raising the order can help."""
    best = min(range(len(errs)), key=errs.__getitem__)
    msg = (f"no order <= {len(errs) - 1} reaches sup error {eps:g}; the best is "
           f"{errs[best]:.3e} at k = {best}")
    if best < len(errs) - 2 and errs[-1] > 2 * errs[best]:
        return (msg + " and the error grows with k beyond it, so a higher " + max_order_name
                + " will not help: the network is not analytic enough on this domain for "
                "matching at one point (see jaxcompress.certify)")
    return msg + f"; raise {max_order_name} or eps"


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
    progress=None,
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
      selector: certified mode: :class:`~jaxcompress.MaxVol` (the default, with ``delta``);
        measured mode: a deterministic selector object or name (default
        :class:`~jaxcompress.PivotedQR`).
      delta: maxvol tolerance.
      refine: certified mode only, see above.
      max_order: the largest order tried.
      key, n_samples, local_search_steps: the sup-error measurement (default key
        ``PRNGKey(0)``).
      progress: ``None`` (quiet), ``True`` (each step of the search printed to stderr as it
        happens) or a callable receiving each line. Every line is also in ``history``, and an
        error names the last steps reached.

    Returns:
      A :class:`ToleranceResult` (``params``, ``orders``, ``report``, ``measured_error``, ...).
      The compressed network equals ``jaxcompress.compress(params,
      jaxcompress.derivative_matching(orders, selector=...), activation=..., domain=domain)``
      (for selectors that ignore the next layer's kernel; the per-layer records' residuals are
      measured against each original next layer).
    """
    if mode not in ("certified", "measured"):
        raise ValueError(f"compress_to_tolerance: mode must be 'certified' or 'measured', got "
                         f"{mode!r}")
    if orders_from not in ("best", "paper", "ours"):
        raise ValueError(f"compress_to_tolerance: orders_from must be 'best', 'paper' or "
                         f"'ours', got {orders_from!r}")
    where = "compress_to_tolerance"
    params = validate_params(params, where=where)
    act = get_activation(activation)
    check_compute_dtype(jnp.result_type(params[0]["kernel"]), where)
    check_positive_int(max_order, where, "max_order", minimum=0)
    check_positive_int(n_samples, where, "n_samples")
    check_positive_int(local_search_steps, where, "local_search_steps", minimum=0)
    if key is not None:
        check_key(key, where)
    if not finite_number(eps) or float(eps) <= 0:
        raise ValueError(f"{where}: eps must be one finite number > 0, got {eps!r}")
    d = int(params[0]["kernel"].shape[0])
    radius, _ = domain_geometry(domain, d, where="compress_to_tolerance")
    eps = float(eps)
    n_hidden = len(params) - 1
    key = jax.random.PRNGKey(0) if key is None else key
    if isinstance(domain, (int, float, np.floating, np.integer)):
        domain = Ball(d, radius)
    history: list[str] = []
    emit = _emitter(progress, history)

    def measure(p) -> float:
        return float(sup_error(params, p, activation=act.name, domain=domain, key=key,
                               n_samples=n_samples, local_search_steps=local_search_steps))

    if mode == "certified":
        if selector is None or selector == "maxvol":
            selector = MaxVol(delta=delta)
        if not isinstance(selector, MaxVol):
            raise ValueError("compress_to_tolerance: mode='certified' uses the maxvol selector "
                             f"(Lemma 10's coefficient bound), got {selector!r}")
        prep = Prepared(params, act, domain)
        report = certify_prepared(prep, eps=eps, delta=delta)
        orders, source = _certified_orders(report, orders_from, radius, params)
        comp = _BackwardSteps(params, act.name, domain, selector)
        if source == "paper":
            emit(f"a priori orders: the paper's k_cert (Eq. 72) = {orders} (budget "
                           f"eps_l = {report.eps_uniform:.3g} (Eq. 62), Lambda_bar = "
                           f"{report.Lambda_bar:.3g} (Lemma 19))")
        else:
            emit(f"a priori orders: ours k_ours = {orders} (budget eps_l = "
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
                raise _failure(
                    f"the a posteriori certificate {bound:.3g} ({which}) exceeds eps = {eps:g} "
                    f"at orders {orders} and no order can be raised", history)
            l = max(cands, key=lambda i: contrib[i])
            orders[l] += 1
            emit(f"a posteriori bound {bound:.3g} ({which}) > eps: raise layer "
                           f"{l + 1} to k = {orders[l]}")
            small, info, rep = post(orders)
        emit(f"a posteriori bound {_proof(rep)[0]:.3g} ({_proof(rep)[1]}) <= eps at "
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
                        emit(f"refine: layer {l + 1} -> k = {orders[l]}, a posteriori "
                                       f"bound {_proof(rep)[0]:.3g} ({_proof(rep)[1]})")
                    else:
                        lo = trial[l]
        err = measure(small)
        return ToleranceResult(params=small, orders=tuple(orders), report=rep,
                               measured_error=err, info=info, mode=mode,
                               history=tuple(history), orders_source=source)

    # --- measured ---------------------------------------------------------------------------
    selector = "pivoted_qr" if selector is None else selector
    if selector == "random" or getattr(selector, "name", None) == "random":
        raise ValueError("compress_to_tolerance: the random selector is not supported (the "
                         "search compares many compressions; use a deterministic selector)")
    comp = _BackwardSteps(params, act.name, domain, as_selector(selector, "compress_to_tolerance"))

    def err_of(ords: dict[int, int]) -> float:
        return measure(comp.padded(ords))

    k_u, _, errs = smallest_uniform_order(
        lambda k: comp.padded({l: k for l in range(1, n_hidden + 1)}), measure, eps, max_order,
        emit)
    if k_u is None:
        raise _failure(order_advice(errs, eps), history)
    orders = [k_u] * n_hidden
    single = [0.0] * n_hidden
    budget = eps / n_hidden
    for l in range(n_hidden, 0, -1):
        for k in range(k_u + 1):
            e = err_of({l: k})
            if e <= budget or k == k_u:
                orders[l - 1], single[l - 1] = k, e
                break
        emit(f"layer {l} alone: k = {orders[l - 1]} (measured {single[l - 1]:.3e}, "
                       f"budget {budget:.3e})")
    total = err_of({l: orders[l - 1] for l in range(1, n_hidden + 1)})
    while total > eps:
        cands = [l for l in range(n_hidden) if orders[l] < k_u]
        l = max(cands, key=lambda i: single[i])
        orders[l] += 1
        single[l] = err_of({l + 1: orders[l]})
        total = err_of({m: orders[m - 1] for m in range(1, n_hidden + 1)})
        emit(f"whole network above eps: layer {l + 1} -> k = {orders[l]}, measured "
                       f"{total:.3e}")
    for l in range(n_hidden - 1, -1, -1):
        while orders[l] > 0:
            trial = list(orders)
            trial[l] -= 1
            e = err_of({m: trial[m - 1] for m in range(1, n_hidden + 1)})
            if e > eps:
                break
            orders, total = trial, e
            emit(f"lower layer {l + 1} -> k = {orders[l]}, measured {e:.3e}")
    small, info = comp.assemble(orders)
    err = measure(small)
    emit(f"final orders {orders} (uniform would be {k_u}): measured {err:.3e}")
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
