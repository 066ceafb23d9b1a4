"""Compression to an error budget: the smallest network whose error is at most ``eps``.

:func:`compress_to_tolerance` runs one search, and the search is a value, a *strategy*, named
for what it searches and how it knows the error:

* :class:`Certified`: derivative matching's per-layer orders with a proof (the a priori orders
  of the paper's or our certificate, checked by our a posteriori certificate; chains of dense
  layers with an analytic activation);
* :class:`MeasuredOrders`: derivative matching's per-layer orders by the measured sup error
  (:func:`jaxcompress.sup_error`; every network);
* :class:`Measured`: any method's order, then narrower sets, polished if asked, by any metric
  (:mod:`jaxcompress.shrink`; every network);
* :class:`Verified`: the same search, each candidate's sup error proven by
  :func:`jaxcompress.verify` (every network, trained teachers included).

Every candidate of the order searches is a run of the one driver (:func:`jaxcompress.driver.run`)
on the teacher's derivative features, computed once at the largest order needed and truncated
per layer (:class:`_Candidates`).

Every search takes a time budget (``max_seconds``) and stops early when its error stopped
improving with the order (:mod:`jaxcompress.stopping`: one clock, one stall rule, one progress
format for every strategy, :func:`jaxcompress.frontier` and the command line). Whatever
stopped it, it has the best network it found: the result's ``status`` says why it stopped
(``"met"``, ``"budget"``, ``"stalled"``, ``"out_of_orders"``) and ``met`` whether that network
meets ``eps``; one that does not is raised as :class:`ToleranceNotMet` (with the result as its
``result``) unless ``throw=False``.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import numpy as np

from jaxcompress._checks import (
    check_compute_dtype,
    check_key,
    check_positive_int,
    finite_number,
    seed_key,
)
from jaxcompress.activations import Activation
from jaxcompress.certificates.bounds import has_bound_rule
from jaxcompress.certificates.certificate import certify, certify_prepared
from jaxcompress.certificates.chain import domain_geometry
from jaxcompress.certificates.prepared import Prepared
from jaxcompress.certificates.report import Certificate
from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.domains import Ball
from jaxcompress.driver import features, run, truncate
from jaxcompress.features import DerivativeFeatures
from jaxcompress.graph import Compressed, Network, compressed
from jaxcompress.layer import CompressInfo
from jaxcompress.measure import network_sup_error
from jaxcompress.methods import collocation, derivative_matching
from jaxcompress.mlp import Params, layer_sizes, param_count
from jaxcompress.networks import as_network
from jaxcompress.pareto import Frontier
from jaxcompress.planning import masked_rows
from jaxcompress.protocol import NetworkLike
from jaxcompress.select import MaxVol, Selector, as_selector
from jaxcompress.shrink import (
    Bench,
    Candidate,
    as_family,
    as_polish,
    check_metric,
    default_family,
    reporter,
)
from jaxcompress.shrink import search as shrink_search
from jaxcompress.stopping import (
    Clock,
    Stop,
    Stopped,
    best_index,
    check_max_seconds,
    check_stall,
)
from jaxcompress.taylor import num_monomials
from jaxcompress.verification import Verification, verify

__all__ = ["Certified", "Measured", "MeasuredOrders", "ToleranceNotMet", "ToleranceResult",
           "ToleranceStrategy", "Verified",
           "compress_to_tolerance", "order_advice", "smallest_uniform_order"]


@dataclasses.dataclass(frozen=True)
class ToleranceResult:
    """What :func:`compress_to_tolerance` returns.

    Attributes:
      params: the compressed network (untrimmed: static widths ``min(D_k, d_l)``; pass it to
        :func:`jaxcompress.trim` to drop rank-deficient neurons).
      orders: the Taylor order chosen per hidden layer.
      report: the :class:`Certificate` (with the a posteriori bound of ``params``); ``None``
        for a measured search on an activation without a bound rule.
      measured_error: :func:`jaxcompress.sup_error` (samples + local search) of ``params``.
      info: the :class:`jaxcompress.CompressInfo` of the compression.
      mode: the strategy's name, ``"certified"`` or ``"measured"``.
      history: one line per step of the search (what was tried and why).
      orders_source: certified: ``"paper"`` (the paper's ``k_cert``, Eq. 72) or ``"ours"``
        (``k_ours``), the certificate whose a priori orders started the search; measured:
        ``"measured"``.
      compressed: for a traced network, the :class:`~jaxcompress.Compressed` (``params`` is
        then its parameter pytree); ``None`` for a params list (except after a search by
        another metric or with polishing, which always gives it).
      metric, metric_value: the metric the search met ``eps`` by and its value (``"sup"`` and
        ``measured_error`` unless :class:`Measured` was given another metric).
      frontier: every candidate the search measured (a :class:`~jaxcompress.Frontier`; for a
        search by another metric or with polishing), e.g. ``result.frontier.plot(path)``.
      verification: for :class:`Verified`, the proven bracket of the network returned (a
        :class:`~jaxcompress.Verification`).
      stop: why the search stopped (a :class:`~jaxcompress.stopping.Stop`; also as
        :attr:`status`, :attr:`met` and :attr:`reason`).
    """

    params: Params
    orders: tuple[int, ...]
    report: Certificate | None
    measured_error: float
    info: CompressInfo
    mode: str
    history: tuple[str, ...] = ()
    orders_source: str = "measured"
    compressed: Compressed | None = None
    metric: str = "sup"
    metric_value: float | None = None
    frontier: Frontier | None = None
    verification: Verification | None = None
    stop: Stop = Stop()

    @property
    def status(self) -> str:
        """Why the search stopped: ``"met"`` (it met ``eps`` and ran to its end), ``"budget"``
        (``max_seconds`` spent), ``"stalled"`` (the error stopped improving with the order) or
        ``"out_of_orders"`` (``max_order`` reached, or nothing left to compress)."""
        return self.stop.status

    @property
    def met(self) -> bool:
        """Whether the network returned meets ``eps`` (a search cut short by its budget after
        it met ``eps`` returns the smallest network that met it so far)."""
        return bool(self.stop.met)

    @property
    def reason(self) -> str:
        """Why the search stopped, in a sentence."""
        return self.stop.reason

    @property
    def widths(self) -> tuple[int, ...]:
        """The width of every compressible set (a chain's hidden widths)."""
        return tuple(int(li.width_out) for li in self.info.layers)

    def __iter__(self):  # ``params, orders, report = compress_to_tolerance(...)[:3]`` style
        return iter((self.params, self.orders, self.report))


class ToleranceNotMet(ValueError):
    """A search stopped before its network met ``eps`` (with ``throw=True``): the message says
    why, ``result`` holds the best network found (a :class:`ToleranceResult`, ``met`` false)."""

    def __init__(self, message: str, result: ToleranceResult):
        super().__init__(message)
        self.result = result


@dataclasses.dataclass(frozen=True)
class _Problem:
    """One search: the teacher, the budget, and how steps are reported and measured."""

    net: Network
    obj: Any
    domain: Any
    eps: float
    radius: float
    emit: Callable[[str], None]
    history: list[str]
    measure: Callable[[list], float]
    clock: Clock = dataclasses.field(default_factory=Clock)

    @property
    def n_hidden(self) -> int:
        return len(self.net.plan().sets)

    @property
    def params(self) -> Params:
        """The teacher as a params list (a chain of dense layers)."""
        return self.net.lower()

    @property
    def act(self) -> Activation | None:
        return self.net.activation

    def fail(self, message: str) -> ValueError:
        """A ``ValueError`` saying what failed and, from the history, where the search got to."""
        tail = "\n  ".join(self.history[-6:])
        return ValueError(f"compress_to_tolerance: {message}" + (
            f"\nthe search so far (last {min(len(self.history), 6)} steps):\n  {tail}"
            if self.history else ""))


class _Candidates:
    """Compressions of one network at per-set orders of derivative matching, each a run of the
    one driver: the teacher's features are computed once (at the largest order needed so far,
    jitted) and truncated per set (in backward order a set's features are the teacher's, so they
    do not depend on the other sets' orders). :meth:`padded` gives a candidate at the teacher's
    shapes (one compilation of a measurement for every candidate)."""

    def __init__(self, net: Network, selector: Selector, domain):
        self.net, self.plan, self.leaves = net, net.plan(), net.leaves
        self.selector, self.domain = selector, domain
        self.k_feat, self.feats = -1, None
        self.seen: dict = {}

    def _features(self, k: int):
        """The teacher's features at order ``>= k`` and each row's tensor (static)."""
        if k > self.k_feat:
            self.k_feat = max(k, self.k_feat + 4, 4)  # few recompilations as the order grows
            got = _features_jit(self.leaves, self.domain,
                                DerivativeFeatures(order=self.k_feat), plan=self.plan)
            split = {i: _split(v) for i, v in got.items()}
            self.feats = ({i: f for i, (f, _) in split.items()},
                          tuple(ids for _, (_, ids) in sorted(split.items())))
        return self.feats

    def _run(self, orders: dict[int, int], padded: bool):
        key = (tuple(sorted(orders.items())), padded)
        if key not in self.seen:   # the searches revisit candidates
            self.seen[key] = self._compute(orders, padded)
        return self.seen[key]

    def _compute(self, orders: dict[int, int], padded: bool):
        feats, ids = self._features(max(orders.values()))
        full = tuple(orders.get(i, 0) for i in range(len(self.plan.sets)))
        method = derivative_matching(full, selector=self.selector)
        return _candidate_jit(self.leaves, method, self.domain, feats, plan=self.plan,
                              ids=ids, only=tuple(sorted(orders)), padded=padded)

    def compress(self, orders: dict[int, int]) -> tuple[list, CompressInfo]:
        """The network with the sets ``orders`` (0-based position -> order) compressed, the
        others whole."""
        return self._run(orders, False)

    def padded(self, orders: dict[int, int]) -> list:
        """The same at the teacher's shapes (:func:`jaxcompress.driver.expand`). With a
        prefix-stable selector (:attr:`jaxcompress.select.Selector.prefix_stable`) every candidate
        is one
        compiled program with the orders as data: the features of order ``k`` are those of the
        cached order ``K`` with the rows of degree ``> k`` zeroed, the width ``min(D_K, d)``, and
        the pivots past ``D_k`` get no weight (the same network, to rounding)."""
        if not self.selector.prefix_stable:
            return self._run(orders, True)[0]
        feats, ids = self._features(max(orders.values()))
        # from the host: jnp.asarray would compile a program of its own
        ks = np.asarray([orders.get(i, self.k_feat) for i in range(len(self.plan.sets))],
                        np.int32)
        return _masked_jit(self.leaves, ks, self.domain, feats, plan=self.plan, ids=ids,
                           only=tuple(sorted(orders)), order=self.k_feat,
                           selector=self.selector)

    def assemble(self, orders: Sequence[int]) -> tuple[list, CompressInfo]:
        """The whole network compressed at per-set ``orders``."""
        return self.compress(dict(enumerate(orders)))


@functools.partial(FastOnSmallCPU, static_argnames=("plan",))
def _features_jit(leaves, domain, fmap, *, plan):
    return features(plan, fmap, leaves, domain)


def _static_ids(ids):
    return None if ids is None else tuple(np.asarray(ids).tolist())


def _split(value):
    """A set's ``(features, ids)`` (a stack's: one per part, as tuples) with hashable ids."""
    if isinstance(value, list):     # a stack under scan: each part its own features
        return tuple(f for f, _ in value), tuple(_static_ids(ids) for _, ids in value)
    return value[0], _static_ids(value[1])


def _per_part(f, ids, fn):
    """``fn(features, ids)`` of a set, or ``[fn(...) per part]`` of a stack."""
    if isinstance(f, tuple):
        return [fn(fp, ip) for fp, ip in zip(f, ids, strict=True)]
    return fn(f, ids)


def _first(f):
    return f[0] if isinstance(f, tuple) else f


@functools.partial(FastOnSmallCPU,
                   static_argnames=("plan", "ids", "only", "order", "selector"))
def _masked_jit(leaves, ks, domain, feats, *, plan, ids, only, order, selector):
    """A candidate at traced per-set orders ``ks`` (see :meth:`_Candidates.padded`)."""
    sizes = plan.sizes
    cached = {}
    for i in only:
        def masked(f, ids_i, k=ks[i]):
            ids_i = None if ids_i is None else np.asarray(ids_i)
            return masked_rows(DerivativeFeatures(order), f, ids_i, k), ids_i
        cached[i] = _per_part(feats[i], ids[i], masked)
    widths = tuple(min(num_monomials(_first(f).coord_dim, order), d) for f, d in
                   zip((feats[i] for i in range(len(plan.sets))), sizes[1:-1], strict=True))
    method = derivative_matching(order, selector=selector, widths=widths)
    small, info = run(plan, method, leaves, domain, teacher_features=cached, only=only,
                      skip=False)
    return plan.expand(small, info.layers)


@functools.partial(FastOnSmallCPU, static_argnames=("plan", "ids", "only", "padded"))
def _candidate_jit(leaves, method, domain, feats, *, plan, ids, only, padded):
    """One candidate: the driver on the cached features truncated to the method's orders (at
    the teacher's shapes if ``padded``): one compilation per candidate."""
    orders = method.features.orders(len(plan.sets))
    cached = {i: _per_part(feats[i], ids[i], lambda f, ids_i, k=orders[i]: truncate(
        f, None if ids_i is None else np.asarray(ids_i), k)) for i in only}
    small, info = run(plan, method, leaves, domain, teacher_features=cached, only=only)
    return (plan.expand(small, info.layers) if padded else small), info


@dataclasses.dataclass(frozen=True)
class ToleranceStrategy(abc.ABC):
    """How :func:`compress_to_tolerance` chooses the orders (a value that validates itself).

    The fields shared by every strategy set the search's range and the sup-error measurement
    (:func:`jaxcompress.sup_error`) of the result.

    Args:
      max_order: the largest order tried.
      key: the measurement's PRNG key (default ``PRNGKey(0)``).
      n_samples, local_search_steps: the measurement's uniform samples and projected-ascent
        steps.
    """

    max_order: int = 20
    key: jax.Array | None = None
    n_samples: int = 4096
    local_search_steps: int = 100
    name: ClassVar[str] = "strategy"

    def __post_init__(self):
        where = type(self).__name__
        check_positive_int(self.max_order, where, "max_order", minimum=0)
        check_positive_int(self.n_samples, where, "n_samples")
        check_positive_int(self.local_search_steps, where, "local_search_steps", minimum=0)
        if self.key is not None:
            check_key(self.key, where)

    @property
    def measurement_key(self) -> jax.Array:
        return seed_key(0) if self.key is None else self.key

    @abc.abstractmethod
    def search(self, problem: _Problem) -> ToleranceResult:
        """Run the search on ``problem``."""


@dataclasses.dataclass(frozen=True)
class Certified(ToleranceStrategy):
    """Orders with a proof: the a priori orders of :func:`jaxcompress.certify`, checked a
    posteriori.

    The a priori orders (``orders_from``: the paper's ``k_cert`` of Eq. 72 at the uniform budget
    of Eq. 62 and Lemma 19, or ours ``k_ours``) are compressed with the maxvol selector (Lemma
    10's coefficient bound, up to ``1 + delta``); the a posteriori certificates of the result
    (ours and the paper's Theorem 5 on the actual weights; the smaller is used) are then
    computed and, should it exceed ``eps`` (floating-point residuals, maxvol swap cap), the
    order of the layer contributing most is raised until it does not. Refuses with
    ``ValueError`` (naming the layer and ``rho`` vs ``R``) when the chosen certificate(s) cannot
    certify the layer (Assumption 4 not proven, or no order certifies the budget).

    Args:
      orders_from: ``"paper"`` (the paper's ``k_cert``, Eq. 72), ``"ours"`` (``k_ours``), or
        ``"best"`` (default: whichever of the two certifies the smaller network, by parameter
        count; the paper's on ties).
      refine: lower the orders afterwards, deepest layer first (bisection on each layer's
        order), to the smallest found whose a posteriori certificate is ``<= eps`` (still
        rigorous, usually much smaller networks).
      delta: the maxvol tolerance.
      selector: ``None`` (``MaxVol(delta=delta)``) or a :class:`~jaxcompress.MaxVol` (its
        ``delta`` is then the strategy's).
      max_order, key, n_samples, local_search_steps: see :class:`ToleranceStrategy`.
    """

    orders_from: str = "best"
    refine: bool = False
    delta: float = 1e-2
    selector: MaxVol | None = None
    name: ClassVar[str] = "certified"

    def __post_init__(self):
        super().__post_init__()
        if self.orders_from not in ("best", "paper", "ours"):
            raise ValueError(f"Certified: orders_from must be 'best', 'paper' or 'ours', got "
                             f"{self.orders_from!r}")
        if not isinstance(self.refine, bool):
            raise TypeError(f"Certified: refine must be a bool, got {self.refine!r}")
        sel = self.selector
        if sel is None or sel == "maxvol":
            sel = MaxVol(delta=self.delta)
        if not isinstance(sel, MaxVol):
            raise ValueError("Certified: the certified search uses the maxvol selector (Lemma "
                             f"10's coefficient bound), got {sel!r}")
        object.__setattr__(self, "selector", sel)
        object.__setattr__(self, "delta", sel.delta)

    def search(self, problem: _Problem) -> ToleranceResult:
        net = problem.net
        if not net.chain:
            raise problem.fail("the certificate is the paper's, for a chain of dense layers with "
                               "one analytic activation; this network is not one:\n  "
                               + "\n  ".join(net.why_not)
                               + "\nuse jc.MeasuredOrders() or jc.Measured()")
        prep = Prepared(problem.params, problem.act, problem.domain)
        report = certify_prepared(prep, eps=problem.eps, delta=self.delta)
        orders, source = _certified_orders(report, self.orders_from, problem.radius,
                                           problem.params)
        if source == "paper":
            problem.emit(f"a priori orders: the paper's k_cert (Eq. 72) = {orders} (budget "
                         f"eps_l = {report.eps_uniform:.3g} (Eq. 62), Lambda_bar = "
                         f"{report.Lambda_bar:.3g} (Lemma 19))")
        else:
            problem.emit(f"a priori orders: ours k_ours = {orders} (budget eps_l = "
                         f"{report.eps_uniform_ours:.3g}, Lambda_bar_ours = "
                         f"{report.Lambda_bar_ours:.3g})")
        steps = _Candidates(net, self.selector, problem.domain)
        clock = problem.clock

        def post(ords):   # one candidate: compressed and certified a posteriori
            clock.check()
            small, info = steps.assemble(ords)
            rep = certify_prepared(prep, eps=problem.eps, delta=self.delta,
                                   compressed=net.plan().chain.lower(small), info=info)
            clock.tick()
            return small, info, rep

        tried: list = []
        try:
            result = self._raise_until_proven(problem, orders, post, tried)
        except Stopped as why:   # the best proven bound found, which is not eps
            orders, small, info, rep = tried[best_index([_proof(t[3])[0] for t in tried])]
            problem.emit(f"stopped ({why.status}): {why.reason}; target not met: the best a "
                         f"posteriori bound is {_proof(rep)[0]:.3g} at orders {orders}")
            return dataclasses.replace(
                _result(problem, small, info, tuple(orders), rep, self.name, source),
                stop=clock.stop(why.status, why.reason, met=False))
        stop = clock.stop("met", "the target was met", met=True)
        if self.refine:
            result, stop = self._refine(problem, result, post)
        orders, small, info, rep = result
        return dataclasses.replace(
            _result(problem, small, info, tuple(orders), rep, self.name, source), stop=stop)

    def _raise_until_proven(self, problem: _Problem, orders: list[int], post, tried: list):
        """The orders raised, the largest contribution first, until the a posteriori bound is
        ``<= eps``; every candidate ``(orders, small, info, report)`` appended to ``tried``;
        :class:`~jaxcompress.stopping.Stopped` when the clock says (budget, the bound stalled)
        or no order can be raised."""
        small, info, rep = post(orders)
        tried.append((list(orders), small, info, rep))
        sizes = problem.net.plan().sizes
        widths, d = sizes[1:-1], sizes[0]
        while _proof(rep)[0] > problem.eps:
            bound, which = _proof(rep)
            contrib = _contributions(rep)
            cands = [l for l in range(problem.n_hidden) if orders[l] < self.max_order
                     and num_monomials(d, orders[l]) < widths[l]]
            if not cands:
                raise Stopped("out_of_orders", f"the a posteriori certificate {bound:.3g} "
                              f"({which}) exceeds eps = {problem.eps:g} at orders {orders} and "
                              "no order can be raised")
            problem.clock.check_stall([_proof(t[3])[0] for t in tried],
                                      "a posteriori bound")
            l = max(cands, key=lambda i: contrib[i])
            orders[l] += 1
            problem.emit(f"a posteriori bound {bound:.3g} ({which}) > eps: raise layer {l + 1} "
                         f"to k = {orders[l]}" + problem.clock.eta(
                             sum(self.max_order - k for k in orders) + 1, "raises"))
            small, info, rep = post(orders)
            tried.append((list(orders), small, info, rep))
        problem.emit(f"a posteriori bound {_proof(rep)[0]:.3g} ({_proof(rep)[1]}) <= eps at "
                     f"{orders}")
        return orders, small, info, rep

    def _refine(self, problem: _Problem, result, post):
        # bisection per layer, deepest first; only verified orders are ever accepted
        orders, small, info, rep = result
        try:
            for l in range(problem.n_hidden - 1, -1, -1):
                lo, hi = -1, orders[l]
                while hi - lo > 1:
                    trial = list(orders)
                    trial[l] = (lo + hi) // 2
                    t_small, t_info, t_rep = post(trial)
                    if _proof(t_rep)[0] <= problem.eps:
                        hi = trial[l]
                        orders, small, info, rep = trial, t_small, t_info, t_rep
                        problem.emit(f"refine: layer {l + 1} -> k = {orders[l]}, a posteriori "
                                     f"bound {_proof(rep)[0]:.3g} ({_proof(rep)[1]})")
                    else:
                        lo = trial[l]
        except Stopped as why:
            problem.emit(f"stopped ({why.status}): {why.reason}; refinement cut short at "
                         f"orders {orders} (certified)")
            return (orders, small, info, rep), problem.clock.stop(
                why.status, why.reason + "; the refinement was cut short (the target was met)",
                met=True)
        return (orders, small, info, rep), problem.clock.stop("met", "the target was met",
                                                              met=True)


@dataclasses.dataclass(frozen=True)
class MeasuredOrders(ToleranceStrategy):
    """Derivative matching's per-layer orders by the measured sup error; nothing is guaranteed
    beyond the measurement.

    The smallest uniform order ``k_u`` whose measured sup error (:func:`jaxcompress.sup_error`:
    samples plus projected local search) is ``<= eps`` bounds the search; then, deepest layer
    first, each layer alone gets the smallest order ``<= k_u`` meeting ``eps / L``; orders are
    raised (largest single-layer error first) until the whole network meets ``eps`` and finally
    lowered, deepest first, while it still does. Every order is ``<= k_u``, so no width exceeds
    the uniform one. The result equals ``jc.compress(net, jc.derivative_matching(orders,
    selector=...))``.

    Args:
      selector: a deterministic selector object or name (default
        :class:`~jaxcompress.PivotedQR`; a random one is refused: the search compares many
        compressions).
      max_order, key, n_samples, local_search_steps: see :class:`ToleranceStrategy`.
    """

    selector: Selector | str = "pivoted_qr"
    name: ClassVar[str] = "measured"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "selector", _deterministic(self.selector, type(self).__name__))

    def search(self, problem: _Problem) -> ToleranceResult:
        steps = _Candidates(problem.net, self.selector, problem.domain)
        n_hidden, eps, clock = problem.n_hidden, problem.eps, problem.clock

        def err_of(ords: dict[int, int]) -> float:   # hidden layer (1-based) -> order
            clock.check()
            err = problem.measure(steps.padded({l - 1: k for l, k in ords.items()}))
            clock.tick()
            return err

        k_u, _, errs = smallest_uniform_order(
            lambda k: steps.padded({l: k for l in range(n_hidden)}), problem.measure,
            eps, self.max_order, problem.emit, clock=clock)
        if k_u is None:      # stopped before an order met eps: the best uniform order
            k_best = best_index(errs)
            small, info = steps.assemble([k_best] * n_hidden)
            why = clock.halted
            reason = why.reason if why.status != "out_of_orders" else (
                why.reason + "; or search with polishing, which keeps far smaller networks: "
                "jc.Measured(method=jc.collocation, polish=True)")
            return dataclasses.replace(
                _result(problem, small, info, (k_best,) * n_hidden, None, self.name,
                        "measured"), stop=clock.stop(why.status, reason, met=False))
        # every later candidate is measured against eps from a network that meets it: cut
        # short by the budget, the search returns the last one that did
        met = [k_u] * n_hidden
        stop = None
        try:
            orders, single = _per_layer_orders(problem, err_of, k_u)
            total = err_of({l: orders[l - 1] for l in range(1, n_hidden + 1)})
            while total > eps:
                cands = [l for l in range(n_hidden) if orders[l] < k_u]
                l = max(cands, key=lambda i: single[i])
                orders[l] += 1
                single[l] = err_of({l + 1: orders[l]})
                total = err_of({m: orders[m - 1] for m in range(1, n_hidden + 1)})
                problem.emit(f"whole network above eps: layer {l + 1} -> k = {orders[l]}, "
                             f"measured {total:.3e}")
            met = list(orders)
            _lower_while_within(problem, err_of, met)
        except Stopped as why:
            problem.emit(f"stopped ({why.status}): {why.reason}; the per-layer search was cut "
                         f"short at orders {met} (they meet eps)")
            stop = clock.stop(why.status, why.reason + "; the per-layer search was cut short "
                              "(the target was met)", met=True)
        orders = met
        small, info = steps.assemble(orders)
        net = problem.net
        report = None
        if net.chain and has_bound_rule(net.activation):
            report = certify(problem.params, activation=net.activation, domain=problem.domain,
                             eps=eps, compressed=net.plan().chain.lower(small), info=info)
        result = _result(problem, small, info, tuple(orders), report, self.name, "measured")
        problem.emit(f"final orders {list(orders)} (uniform would be {k_u}): measured "
                     f"{result.measured_error:.3e}")
        stop = stop or clock.stop("met", "the target was met", met=True)
        return dataclasses.replace(result, history=tuple(problem.history), stop=stop)


@dataclasses.dataclass(frozen=True)
class Measured(ToleranceStrategy):
    """The smallest network that meets ``metric <= eps`` by measurement, any method, polished
    if asked (ours); nothing is guaranteed beyond the measurement.

    The method at orders ``k = 0, 1, ...`` (each compression polished if asked) until one meets
    ``metric <= eps``; then, with ``shrink``, narrower sets (widths between the ``D_k`` steps;
    steps of neurons that double after a success and halve after a failure), re-compressed,
    re-polished and re-measured, while the metric stays within ``eps``
    (:mod:`jaxcompress.shrink`). The result carries every candidate measured
    (``result.frontier``).

    Args:
      method: a method factory called with an order (``jc.collocation``,
        ``jc.derivative_matching``, ``lambda k: jc.data_matching(x, order=k)``) or a method
        value (one start, then the width search). Default: derivative matching with
        ``selector``; with ``polish``, ``jc.collocation`` (the better start measured on the
        Table 1 teachers, benchmarks/README.md "How small can it get?").
      metric: ``"sup"`` (default), ``"rel_l2"`` (relative L2 distance to the teacher on fixed
        Sobol points of the domain) or a callable ``metric(f) -> float`` of the candidate as a
        batched function ``f(x)`` (your task's error on held-out data; lower is better).
      polish: ``False`` (default), ``True`` (:class:`~jaxcompress.PolishSettings` defaults) or
        settings: every candidate is distilled towards the teacher on the domain
        (:func:`jaxcompress.polish`) before it is measured.
      shrink: after the orders, search the widths of every set (default ``True``; ``False``:
        the smallest order alone).
      selector: the selector of the default derivative matching (deterministic).
      max_order, key, n_samples, local_search_steps: see :class:`ToleranceStrategy`.
    """

    method: Any = None
    metric: Any = "sup"
    polish: Any = False
    shrink: bool = True
    selector: Selector | str = "pivoted_qr"
    name: ClassVar[str] = "measured"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "selector", _deterministic(self.selector, "Measured"))
        check_metric(self.metric, "Measured")
        object.__setattr__(self, "polish", as_polish(self.polish, "Measured"))
        if self.method is not None:
            as_family(self.method, "Measured")
        if not isinstance(self.shrink, bool):
            raise TypeError(f"Measured: shrink must be a bool, got {self.shrink!r}")

    def search(self, problem: _Problem) -> ToleranceResult:
        return _search_widths(self, problem, self.metric)[0]


def _search_widths(strategy: Measured | Verified, problem: _Problem, metric,
                   teacher_value: float | None = None
                   ) -> tuple[ToleranceResult, Bench, Candidate]:
    """The search of :class:`Measured` and :class:`Verified` (:func:`jaxcompress.shrink.search`:
    the method's orders, then narrower sets, polished if asked), candidates judged by
    ``metric``; the result, the bench and the smallest candidate."""
    where = "compress_to_tolerance"
    if problem.domain.parameter_map is not None:
        raise problem.fail("the search by a metric or with polishing needs a jc.Ball or "
                           "jc.Box domain")
    family = (default_family(strategy.polish, strategy.selector) if strategy.method is None
              else as_family(strategy.method, where))
    bench = Bench(problem.obj, problem.net, problem.domain, metric,
                  key=strategy.measurement_key, emit=problem.emit,
                  n_samples=strategy.n_samples, local_search_steps=strategy.local_search_steps,
                  teacher_value=teacher_value)
    found = shrink_search(bench, family, problem.eps, max_order=strategy.max_order,
                          polish=strategy.polish, widths=strategy.shrink, fail=problem.fail,
                          clock=problem.clock)
    cand = found.best
    # measured padded to its bucket (the same function: the padding's neurons are read by zero
    # rows): the programs of the search's own measurements, and of another eps's result nearby
    padded = bench.padded(cand)
    sup = bench.sup(padded)
    what = cand.method.describe() + (", polished" if strategy.polish is not None else "") + (
        ", widths searched" if strategy.shrink else "")
    info = dataclasses.replace(cand.info, method=what, error_estimate=bench.estimate(padded))
    cand = dataclasses.replace(cand, info=info)
    result = bench.result(cand)   # what compress returns for the user's network
    if isinstance(result, NetworkLike):
        small, params = result, result.params
    else:                          # a params list: its Compressed beside it
        small, params = compressed(problem.net, list(cand.leaves), info), result
    return ToleranceResult(
        params=params, orders=(cand.order,) * len(cand.widths), report=None,
        measured_error=sup, info=info, mode=strategy.name, history=tuple(problem.history),
        orders_source="measured", compressed=small, metric=bench.name,
        metric_value=found.error, frontier=found.frontier, stop=found.stop), bench, cand


@dataclasses.dataclass(frozen=True)
class Verified(ToleranceStrategy):
    """The smallest network whose error on the domain is **proven** at most ``eps``: the search
    of :class:`Measured`, each candidate judged by :func:`jaxcompress.verify` (a candidate
    counts when its proven ``upper <= eps``), every network, trained teachers included (ours).

    The result carries the final :class:`~jaxcompress.Verification` (``result.verification``:
    the proven bracket of the network returned) beside the sampled ``measured_error``.

    Args:
      method, polish, shrink, selector: as for :class:`Measured` (default: collocation, the
        better start on trained networks; derivative matching is ``method=jc.derivative_matching``).
      max_seconds: the time budget of each candidate's verification (a candidate whose proof
        times out with ``upper > eps`` counts as over the budget); the whole search's is
        :func:`compress_to_tolerance`'s ``max_seconds``.
      max_order, key, n_samples, local_search_steps: see :class:`ToleranceStrategy` (the
        sampled sup error reported beside the proof).
    """

    method: Any = None
    polish: Any = False
    shrink: bool = True
    selector: Selector | str = "pivoted_qr"
    max_seconds: float = 60.0
    name: ClassVar[str] = "verified"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "selector", _deterministic(self.selector, "Verified"))
        object.__setattr__(self, "polish", as_polish(self.polish, "Verified"))
        if self.method is not None:
            as_family(self.method, "Verified")
        if not isinstance(self.shrink, bool):
            raise TypeError(f"Verified: shrink must be a bool, got {self.shrink!r}")
        if not finite_number(self.max_seconds) or float(self.max_seconds) <= 0:
            raise ValueError(f"Verified: max_seconds must be a positive number, got "
                             f"{self.max_seconds!r}")

    def search(self, problem: _Problem) -> ToleranceResult:
        teacher_fn, teacher_params = problem.net.function()
        teacher = functools.partial(teacher_fn, teacher_params)
        strategy = self if self.method is not None else dataclasses.replace(
            self, method=collocation)

        def proven_sup(f) -> float:
            return verify(teacher, f, domain=problem.domain, eps=problem.eps,
                          max_seconds=float(self.max_seconds)).upper

        # the teacher is 0 from itself: no proof of it against itself to compile
        result, bench, cand = _search_widths(strategy, problem, proven_sup, teacher_value=0.0)
        if result.status == "budget":   # no further proof past the budget: the search's stands
            return dataclasses.replace(result, metric="proven sup")
        # the proof of the candidate as the search proved it: padded to its bucket (the same
        # function, the padding's neurons read by zero rows), so by the programs the search
        # compiled (at its own widths it compiled the proof's three again: 1.2 s of a 4.7 s
        # search of a [2, 24, 24, 1] teacher)
        proof = verify(teacher, bench.function(bench.padded(cand)), domain=problem.domain,
                       eps=problem.eps, max_seconds=float(self.max_seconds))
        problem.emit(f"proven: sup error in [{proof.lower:.4g}, {proof.upper:.4g}] "
                     f"({proof.status}, {proof.seconds:.1f} s)")
        return dataclasses.replace(result, verification=proof, metric="proven sup",
                                   metric_value=proof.upper, history=tuple(problem.history))


def _deterministic(selector, where: str) -> Selector:
    """The selector of a search: a name or object, never a random choice (a search compares
    many compressions)."""
    if selector == "random" or (isinstance(selector, Selector) and not selector.distributable):
        raise ValueError(f"{where}: the random selector is not supported (the search compares "
                         "many compressions; use a deterministic selector)")
    return as_selector(selector, where)


def _result(problem: _Problem, small: list, info: CompressInfo, orders, report, mode: str,
            source: str) -> ToleranceResult:
    """The result of a search: a params list back for a params list, else the user's pytree
    with the :class:`~jaxcompress.Compressed` beside it."""
    net = problem.net
    err = problem.measure(net.plan().expand(small, info.layers))
    if net.kind == "params":
        params, small_net = net.plan().chain.lower(small), None
    else:
        small_net = compressed(net, small, info)
        params = small_net.params
    return ToleranceResult(params=params, orders=orders, report=report, measured_error=err,
                           info=info, mode=mode, history=tuple(problem.history),
                           orders_source=source, compressed=small_net)


def _per_layer_orders(problem: _Problem, err_of, k_u: int) -> tuple[list[int], list[float]]:
    """Deepest layer first, each layer alone: the smallest order meeting ``eps / L``."""
    n_hidden = problem.n_hidden
    orders, single = [k_u] * n_hidden, [0.0] * n_hidden
    budget = problem.eps / n_hidden
    for l in range(n_hidden, 0, -1):
        for k in range(k_u + 1):
            e = err_of({l: k})
            if e <= budget or k == k_u:
                orders[l - 1], single[l - 1] = k, e
                break
        problem.emit(f"layer {l} alone: k = {orders[l - 1]} (measured {single[l - 1]:.3e}, "
                     f"budget {budget:.3e})")
    return orders, single


def _lower_while_within(problem: _Problem, err_of, orders: list[int]) -> None:
    """Deepest layer first, lower each order while the whole network still meets ``eps``
    (``orders`` changed in place: it meets ``eps`` after every step)."""
    n_hidden = problem.n_hidden
    for l in range(n_hidden - 1, -1, -1):
        while orders[l] > 0:
            trial = list(orders)
            trial[l] -= 1
            e = err_of({m: trial[m - 1] for m in range(1, n_hidden + 1)})
            if e > problem.eps:
                break
            orders[:] = trial
            problem.emit(f"lower layer {l + 1} -> k = {orders[l]}, measured {e:.3e}")


def compress_to_tolerance(
    params: Any,
    strategy: ToleranceStrategy | None = None,
    *,
    activation: str | Activation | None = None,
    domain,
    eps: float,
    progress=None,
    max_seconds: float | None = None,
    stall=True,
    throw: bool = True,
) -> ToleranceResult:
    """The smallest network whose error on ``domain`` is at most ``eps``, by one search.

    >>> teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
    >>> res = jc.compress_to_tolerance(teacher, jc.MeasuredOrders(n_samples=256),
    ...                                activation="tanh", domain=jc.Ball(2, 0.5), eps=1e-4)
    >>> bool(res.measured_error <= 1e-4), res.mode
    (True, 'measured')

    Args:
      params: a params list (with ``activation=``) or any network (from :func:`~jaxcompress.trace`,
        :func:`~jaxcompress.trace_module`, a compressed result, a loaded file).
      activation, domain, eps: as in :func:`certify` (``domain`` a Ball or Box).
      strategy: the search (see the module docstring), each holding its own settings:
        :class:`Certified` (default; chains of dense layers with one analytic activation, the
        paper's certificate), :class:`MeasuredOrders` (derivative matching's per-layer orders
        by the measured sup error), :class:`Measured` (any method's order, then narrower
        sets, polished if asked, by any metric) or :class:`Verified` (the same search, each
        candidate's error proven by :func:`jaxcompress.verify`).
      progress: ``None`` (quiet), ``True`` (each step of the search printed to stderr as it
        happens, with the time so far, the steps left and an estimate of their time) or a
        callable receiving each line. Every line is also in ``history``, and an error names
        the last steps reached.
      max_seconds: the search's time budget (default ``None``: no limit), checked between
        candidates (one that has started is finished; ``0``: stop after the first). Spent, the
        search returns the best network it has (:mod:`jaxcompress.stopping`).
      stall: when the search stops because its error stopped improving with the order: a
        :class:`~jaxcompress.stopping.StallRule` (``True``, the default: no relative
        improvement of at least 0.1 over the last 3 orders), or ``None`` (never).
      throw: what happens when the search stops before a network meets ``eps`` (its budget
        spent, the error stalled, no order left): ``True`` (default) raises
        :class:`ToleranceNotMet`, a ``ValueError`` saying why, with the best network found as
        its ``result``; ``False`` returns that result (``result.met`` false, ``result.status``
        and ``result.reason`` saying why).

    Returns:
      A :class:`ToleranceResult` (``params``, ``orders``, ``report``, ``measured_error``,
      ``status``, ``met``, ``reason``, ...).
      For the order searches the compressed network equals ``jaxcompress.compress(params,
      jaxcompress.derivative_matching(orders, selector=...), activation=..., domain=domain)``:
      every candidate is a run of the one driver.
    """
    where = "compress_to_tolerance"
    strategy = Certified() if strategy is None else strategy
    if not isinstance(strategy, ToleranceStrategy):
        raise TypeError(f"{where}: strategy must be jc.Certified(...), jc.MeasuredOrders(...), "
                        f"jc.Measured(...) or jc.Verified(...), got {type(strategy).__name__}")
    net = as_network(params, activation=activation, where=where)
    check_compute_dtype(net.x.dtype, where)
    if not finite_number(eps) or float(eps) <= 0:
        raise ValueError(f"{where}: eps must be one finite number > 0, got {eps!r}")
    clock = Clock(check_max_seconds(max_seconds, where), check_stall(stall, where))
    if not isinstance(throw, bool):
        raise TypeError(f"{where}: throw must be a bool, got {throw!r}")
    d = int(net.x.shape[-1])
    radius, _ = domain_geometry(domain, d, where=where)
    if isinstance(domain, (int, float, np.floating, np.integer)):
        domain = Ball(d, radius)
    history: list[str] = []
    key = strategy.measurement_key
    plan = net.plan()

    def measure(leaves) -> float:   # a candidate at the teacher's shapes (expand)
        return float(network_sup_error(plan, net.leaves, leaves, domain, key,
                                       n_samples=strategy.n_samples,
                                       local_search_steps=strategy.local_search_steps))

    problem = _Problem(net=net, obj=params, domain=domain, eps=float(eps), radius=radius,
                       emit=reporter(progress, history, "compress_to_tolerance"),
                       history=history, measure=measure, clock=clock)
    result = strategy.search(problem)
    if not result.met and throw:
        advice = "" if result.status == "out_of_orders" else (
            f"; the best network found (widths {list(result.widths)}, {result.metric} "
            f"{_value(result):.4g}) is this error's .result, or pass throw=False to have it "
            "returned")
        raise ToleranceNotMet(str(problem.fail(result.reason + advice)), result)
    return result


def _value(result: ToleranceResult) -> float:
    return result.measured_error if result.metric_value is None else result.metric_value


def smallest_uniform_order(compress_at, measure, eps: float, max_order: int, emit,
                           describe=None, clock: Clock | None = None
                           ) -> tuple[int | None, Any, list[float]]:
    """The smallest ``k <= max_order`` whose compression ``compress_at(k)`` measures ``<= eps``.

    ``measure(result) -> float``. Reports each order through ``emit`` (with
    ``describe(result)`` and the clock's estimate of what is left appended). Returns ``(k,
    result, errors)``, or ``(None, best, errors)`` (the result of the smallest error) when the
    search stopped before an order reached ``eps``: ``clock.halted`` then says why
    (``"out_of_orders"``: :func:`order_advice`'s words; ``"budget"``, ``"stalled"``: the
    clock's, :mod:`jaxcompress.stopping`). Shared by :class:`MeasuredOrders` and
    ``jaxcompress compress --eps``.
    """
    clock = Clock() if clock is None else clock
    errs: list[float] = []
    results: list = []
    try:
        for k in range(max_order + 1):
            clock.check()
            results.append(compress_at(k))
            errs.append(measure(results[-1]))
            clock.tick()
            met = errs[-1] <= eps
            extra = "" if describe is None else f", {describe(results[-1])}"
            emit(f"uniform k = {k}: measured {errs[-1]:.3e}{extra}"
                 + clock.eta(0 if met else max_order - k, "orders"))
            if met:
                return k, results[-1], errs
            if k < max_order:   # after the last order the advice says more than a stall
                clock.check_stall(errs, "measured sup error")
        raise Stopped("out_of_orders", order_advice(errs, eps))
    except Stopped as why:
        clock.halt(why)
        if why.status != "out_of_orders":
            emit(f"stopped ({why.status}): {why.reason}")
        return None, results[best_index(errs)], errs


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


def _certified_orders(report: Certificate, orders_from: str, radius: float,
                      params: Params) -> tuple[list[int], str]:
    """The a priori orders of the paper's or our certificate (see ``orders_from``)."""
    paper_ok = report.orders is not None and all(k is not None for k in report.orders)
    ours_ok = report.orders_ours is not None
    if orders_from == "best":
        if paper_ok and ours_ok:
            sizes = layer_sizes(params)

            def count(widths):
                return param_count([sizes[0], *widths, sizes[-1]])

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
                    "certificate exists. Use jc.MeasuredOrders(), a smaller domain, or smaller "
                    "weights.")
        raise ValueError(f"compress_to_tolerance: {which} certificate gives no orders: "
                         + "; ".join(report.notes) + "; use jc.MeasuredOrders() or a larger eps")
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
