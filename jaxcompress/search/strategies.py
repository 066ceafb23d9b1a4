"""The entry points: :func:`compress_to_tolerance` with its four strategies, and :func:`frontier`.

A *strategy* is a value that validates itself: a judge (:meth:`ToleranceStrategy.judge`) and
the proposers its :meth:`~ToleranceStrategy.search` runs in the loop of
:mod:`jaxcompress.search`; every search returns one :class:`ToleranceResult`
(``docs/shrink.md`` has the searches, their budget and when they stop).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import jax
import numpy as np
import optax

from jaxcompress._checks import (
    check_compute_dtype,
    check_key,
    check_positive_int,
    describe,
    finite_number,
    seed_key,
)
from jaxcompress.certificates.chain import domain_geometry
from jaxcompress.certificates.report import Certificate as Report
from jaxcompress.domains import Ball, Domain, check_domain
from jaxcompress.graph import Compressed, compressed
from jaxcompress.layer import CompressInfo
from jaxcompress.methods import BestOf, Method, collocation, derivative_matching
from jaxcompress.mlp import Params, leaf_count
from jaxcompress.networks import as_network
from jaxcompress.polishing import DEFAULT_POINTS, DEFAULT_STEPS
from jaxcompress.protocol import NetworkLike
from jaxcompress.search import judges, proposers
from jaxcompress.search.candidates import Candidate, Candidates
from jaxcompress.search.frontier import Frontier, FrontierRow
from jaxcompress.search.loop import Outcome, Search, Trial
from jaxcompress.select import MaxVol, Selector, as_selector
from jaxcompress.stopping import Clock, Stop, check_max_seconds, check_stall
from jaxcompress.taylor import num_monomials
from jaxcompress.verification import Verification

__all__ = ["Certified", "Measured", "MeasuredOrders", "PolishSettings", "ToleranceNotMet",
           "ToleranceResult", "ToleranceStrategy", "Verified", "compress_to_tolerance",
           "frontier", "order_advice"]

#: Polishing steps after each step of the width search (it starts from a polished network a
#: few neurons wider, so it needs fewer than a fresh compression).
SHRINK_STEPS = 1000
#: Default orders of :func:`frontier`.
FRONTIER_ORDERS = (1, 2, 3, 4, 5, 6)


@dataclasses.dataclass(frozen=True)
class PolishSettings:
    """How a search polishes its candidates (:func:`jaxcompress.polish`; ``polish=True`` means
    these defaults).

    Args:
      steps: optimizer steps for a compression of the teacher.
      shrink_steps: optimizer steps after each step of the width search.
      points: the fixed Sobol points of the domain the objective averages over.
      optimizer: an optax ``GradientTransformation`` (default: :func:`jaxcompress.polish`'s,
        L-BFGS).
      dtype: the dtype the loop computes in (e.g. ``jnp.float64`` for a float32 network).
    """

    steps: int = DEFAULT_STEPS
    shrink_steps: int = SHRINK_STEPS
    points: int = DEFAULT_POINTS
    optimizer: optax.GradientTransformation | None = None
    dtype: Any = None

    def __post_init__(self):
        where = "PolishSettings"
        check_positive_int(self.steps, where, "steps")
        check_positive_int(self.shrink_steps, where, "shrink_steps")
        check_positive_int(self.points, where, "points")
        if self.optimizer is not None and not isinstance(self.optimizer,
                                                         optax.GradientTransformation):
            raise TypeError(f"{where}: optimizer must be an optax GradientTransformation, got "
                            f"{describe(self.optimizer)}")


def as_polish(polish, where: str) -> PolishSettings | None:
    """``polish=`` as settings: ``False``/``None`` none, ``True`` the defaults."""
    if polish is None or polish is False:
        return None
    if polish is True:
        return PolishSettings()
    if isinstance(polish, PolishSettings):
        return polish
    raise TypeError(f"{where}: polish must be a bool or jc.PolishSettings(...), got "
                    f"{describe(polish)}")


@dataclasses.dataclass(frozen=True)
class ToleranceResult:
    """What :func:`compress_to_tolerance` returns, whatever the strategy.

    Attributes:
      params: the compressed network as the teacher's kind (for the order searches untrimmed:
        static widths ``min(D_k, d_l)``; :func:`jaxcompress.trim` drops rank-deficient neurons).
      orders: the Taylor order per compressible set.
      report: the :class:`~jaxcompress.Certificate` of ``params`` (the order searches, on a
        chain with a bound rule; else ``None``).
      measured_error: :func:`jaxcompress.sup_error` (samples + local search) of ``params``.
      info: the :class:`jaxcompress.CompressInfo` of the compression.
      mode: the strategy's name: ``"certified"``, ``"measured"`` or ``"verified"``.
      history: one line per step of the search (what was tried and why).
      orders_source: ``"paper"`` (``k_cert``, Eq. 72) or ``"ours"`` (``k_ours``), the
        certificate whose a priori orders started a certified search; else ``"measured"``.
      compressed: the :class:`~jaxcompress.Compressed` (a module's: its
        :class:`~jaxcompress.modules.CompressedModule`).
      metric, metric_value: how the network was judged (the judge's name) and its figure.
      frontier: every candidate the search judged (a :class:`~jaxcompress.Frontier`).
      verification: for :class:`Verified`, the proven bracket of the network returned.
      stop: why the search stopped (also as :attr:`status`, :attr:`met` and :attr:`reason`).
    """

    params: Params
    orders: tuple[int, ...]
    report: Report | None
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
        """Why the search stopped: ``"met"``, ``"budget"``, ``"stalled"`` or
        ``"out_of_orders"``."""
        return self.stop.status

    @property
    def met(self) -> bool:
        """Whether the network returned meets ``eps``."""
        return bool(self.stop.met)

    @property
    def reason(self) -> str:
        """Why the search stopped, in a sentence."""
        return self.stop.reason

    @property
    def widths(self) -> tuple[int, ...]:
        """The width of every compressible set."""
        return tuple(int(li.width_out) for li in self.info.layers)

    def __iter__(self):  # ``params, orders, report = compress_to_tolerance(...)[:3]`` style
        return iter((self.params, self.orders, self.report))


class ToleranceNotMet(ValueError):
    """A search stopped before its network met ``eps`` (with ``throw=True``): the message says
    why, ``result`` holds the best network found (a :class:`ToleranceResult`, ``met`` false)."""

    def __init__(self, message: str, result: ToleranceResult):
        super().__init__(message)
        self.result = result


def _fail(history: Sequence[str], message: str) -> ValueError:
    """A ``ValueError`` saying what failed and, from the history, where the search got to."""
    tail = "\n  ".join(history[-6:])
    return ValueError(f"compress_to_tolerance: {message}" + (
        f"\nthe search so far (last {min(len(history), 6)} steps):\n  {tail}" if history
        else ""))


@dataclasses.dataclass(frozen=True)
class ToleranceStrategy(abc.ABC):
    """A search of :func:`compress_to_tolerance`: its :meth:`judge` and the proposers its
    :meth:`search` runs. The shared fields: the largest order tried, and the sup measurement of
    the result (``key``, default ``PRNGKey(0)``; ``n_samples`` uniform samples,
    ``local_search_steps`` of projected ascent)."""

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

    def sup(self, name: str = "sup", teacher=None) -> judges.Metric:
        """The sampled sup error with this strategy's settings."""
        m = judges.Metric("sup", key=seed_key(0) if self.key is None else self.key,
                          n_samples=self.n_samples, local_search_steps=self.local_search_steps,
                          teacher=teacher)
        m.name = name
        return m

    @abc.abstractmethod
    def judge(self, cands: Candidates, eps: float) -> judges.Judge:
        """The judge of this search's candidates."""

    @abc.abstractmethod
    def search(self, search: Search) -> ToleranceResult:
        """Run the search."""

    def result(self, search: Search, cand: Candidate, stop: Stop, *, error: float,
               value: float, report=None, source: str = "measured") -> ToleranceResult:
        """The result of every search: ``cand`` as the teacher's kind of network, its sup
        ``error``, its figure ``value`` by the judge, and the frontier of every trial."""
        cands = search.candidates
        small = cands.result(cand)    # what compress returns for the user's network
        if isinstance(small, NetworkLike):
            params = small.params
        else:                         # a params list: its Compressed beside it
            params, small = small, compressed(cands.net, list(cand.leaves), cand.info)
        orders = cand.orders if cand.orders is not None else (cand.order,) * len(cand.widths)
        return ToleranceResult(
            params=params, orders=tuple(orders), report=report, measured_error=error,
            info=cand.info, mode=self.name, history=tuple(search.history),
            orders_source=source, compressed=small, metric=search.judge.name,
            metric_value=value, frontier=_frontier(search, stop), stop=stop)

    def orders_result(self, search: Search, cand: Candidate, stop: Stop, report=None,
                      source: str = "measured") -> ToleranceResult:
        """The result of an order search: ``cand`` at its own widths, its sup error measured
        at the teacher's shapes; its figure the certificate's bound, else that error."""
        cands = search.candidates
        full = dataclasses.replace(cand, measured=cands.plan.expand(cand.leaves,
                                                                    cand.info.layers))
        err = self.sup(teacher=cands.net.leaves).judge(full, cands).figure
        value = (judges.proof(report)[0] if isinstance(search.judge, judges.Certificate)
                 else err)
        return self.result(search, cand, stop, error=err, value=value, report=report,
                           source=source)


@dataclasses.dataclass(frozen=True)
class Certified(ToleranceStrategy):
    """Orders with a proof (``docs/certificates.md``): the a priori orders of
    :func:`jaxcompress.certify` (the paper's ``k_cert``, Eq. 72, at the uniform budget of Eq. 62
    and Lemma 19, or ours ``k_ours``) compressed with the maxvol selector (Lemma 10's coefficient
    bound, up to ``1 + delta``), the order of the layer contributing most to the a posteriori
    certificate (the smaller of ours and the paper's Theorem 5 on the actual weights) raised
    while it exceeds ``eps``. A ``ValueError`` names the layer and ``rho`` against ``R`` where
    no certificate exists (Assumption 4 not proven, or no order certifies the budget).

    Args:
      orders_from: ``"paper"`` (the paper's ``k_cert``, Eq. 72), ``"ours"`` (``k_ours``), or
        ``"best"`` (default: whichever of the two certifies the smaller network, by parameter
        count; the paper's on ties).
      refine: lower the orders afterwards, deepest layer first (bisection on each layer's
        order), to the smallest whose a posteriori certificate is ``<= eps``.
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

    def judge(self, cands: Candidates, eps: float) -> judges.Judge:
        return judges.Certificate(cands, eps, self.delta)

    def search(self, search: Search) -> ToleranceResult:
        cands, judge = search.candidates, search.judge
        radius = domain_geometry(cands.domain, int(cands.net.x.shape[-1]))[0]
        orders, source, line = judge.a_priori(self.orders_from, radius)
        search.emit(line)
        sizes = cands.plan.sizes
        out = search.run(proposers.raise_until_proven(
            functools.partial(cands.orders, self.selector, exact=True), orders,
            can_raise=lambda s, k: (k < self.max_order
                                    and num_monomials(sizes[0], k) < sizes[1 + s]),
            shares=lambda t: judge.shares(t.evidence), refine=self.refine,
            max_order=self.max_order))
        return self.orders_result(search, out.chosen.candidate, out.stop,
                                  out.chosen.evidence, source)


@dataclasses.dataclass(frozen=True)
class MeasuredOrders(ToleranceStrategy):
    """Derivative matching's per-layer orders by the measured sup error (nothing is guaranteed
    beyond the measurement): the smallest uniform order ``k_u`` whose sup error
    (:func:`jaxcompress.sup_error`) is ``<= eps``, then per-layer orders below it
    (:func:`~jaxcompress.search.proposers.per_set_orders`). The result equals
    ``jc.compress(net, jc.derivative_matching(orders, selector=...))``.

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

    def judge(self, cands: Candidates, eps: float) -> judges.Judge:
        return self.sup("measured sup error", teacher=cands.net.leaves)

    def search(self, search: Search) -> ToleranceResult:
        cands, eps = search.candidates, search.eps
        n = len(cands.plan.sets)
        build = functools.partial(cands.orders, self.selector)
        out = search.run(proposers.uniform_orders(
            lambda k: build([k] * n), range(self.max_order + 1), label="uniform",
            describe=lambda t: f"measured {t.figure:.3e}",
            advice=lambda ts: order_advice([t.figure for t in ts], eps)))
        k_u = out.chosen.candidate.orders[0]
        if not out.stop.met:      # the best uniform order
            reason = out.stop.reason if out.stop.status != "out_of_orders" else (
                out.stop.reason + "; or search with polishing, which keeps far smaller "
                "networks: jc.Measured(method=jc.collocation, polish=True)")
            return self.orders_result(search, build([k_u] * n, exact=True),
                                      dataclasses.replace(out.stop, reason=reason))
        out = search.run(proposers.per_set_orders(build, n, k_u, out.chosen))
        cand = build(out.chosen.candidate.orders, exact=True)
        result = self.orders_result(search, cand, out.stop, judges.certificate(cands, cand, eps))
        search.emit(f"final orders {list(cand.orders)} (uniform would be {k_u}): measured "
                    f"{result.measured_error:.3e}")
        return dataclasses.replace(result, history=tuple(search.history))


@dataclasses.dataclass(frozen=True)
class Measured(ToleranceStrategy):
    """The smallest network that meets ``metric <= eps`` by measurement, any method, polished
    if asked (ours; ``docs/shrink.md``): the method's orders ``k = 0, 1, ...`` until one meets
    ``eps``, then, with ``shrink``, narrower sets while it still does
    (:mod:`~jaxcompress.search.proposers`); nothing is guaranteed beyond the measurement.

    Args:
      method: a method factory called with an order (``jc.collocation``,
        ``jc.derivative_matching``, ``lambda k: jc.data_matching(x, order=k)``) or a method
        value (its own order alone, then the width search). Default: derivative matching with
        ``selector``; with ``polish``, ``jc.collocation`` (the better start measured on the
        Table 1 teachers, benchmarks/README.md "How small can it get?").
      metric: ``"sup"`` (default), ``"rel_l2"``, ``"psnr"`` (higher is better: ``eps`` the least
        dB), a callable ``metric(f) -> float`` of the candidate as a batched function ``f(x)``
        (lower is better), or a :class:`jaxcompress.search.Judge` of your own.
      polish: ``False`` (default), ``True`` (:class:`~jaxcompress.PolishSettings` defaults) or
        settings: every candidate is distilled towards the teacher on the domain
        (:func:`jaxcompress.polish`) before it is measured.
      shrink: after the orders, search the widths of every set (default ``True``).
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
        where = type(self).__name__
        object.__setattr__(self, "selector", _deterministic(self.selector, where))
        object.__setattr__(self, "polish", as_polish(self.polish, where))
        if self.method is not None:
            as_family(self.method, where)
        if not isinstance(self.shrink, bool):
            raise TypeError(f"{where}: shrink must be a bool, got {self.shrink!r}")
        self._judge()

    def _judge(self) -> judges.Judge:
        """The judge before polishing."""
        return self.sup() if self.metric == "sup" else judges.as_judge(self.metric, "Measured")

    def judge(self, cands: Candidates, eps: float) -> judges.Judge:
        judge = self._judge()
        return judge if self.polish is None else judges.Polished(judge, self.polish)

    def search(self, search: Search) -> ToleranceResult:
        return self._widths(search)[0]

    def _widths(self, search: Search) -> tuple[ToleranceResult, Trial]:
        """The family's orders, then narrower sets; the result and the trial chosen."""
        cands, judge, eps = search.candidates, search.judge, search.eps
        if cands.domain.parameter_map is not None:
            raise _fail(search.history, "the search by a metric or with polishing needs a "
                        "jc.Ball or jc.Box domain")
        family = (as_family(self.method, "compress_to_tolerance") if self.method is not None
                  else collocation if self.polish is not None
                  else functools.partial(derivative_matching, selector=self.selector))
        teacher = search.teacher_figure
        if not judge.within(teacher, eps):
            raise _fail(search.history, f"the teacher itself has {judge.name} {teacher:.4g} "
                        f"{'<' if judge.higher_is_better else '>'} eps = {eps:g}; no compression "
                        "of it can do better by measurement")
        if isinstance(self.method, Method):   # one method: its own order alone
            orders, last = [self.method.features.describe_order()], None
            build = functools.partial(_at_order, cands, self.method)
        else:
            orders, last = range(self.max_order + 1), _full_order(family, cands, self.max_order)
            build = functools.partial(cands.uniform, family, max_order=self.max_order)
        out = search.run(proposers.uniform_orders(
            build, orders, describe=lambda t: proposers.line(search, t), advice=functools.partial(
                _advice, judge, eps, self.polish, family(self.max_order)), last=last,
            full=lambda t: t.candidate.widths == cands.widths,
            note=lambda t: (f"; target not met: the best candidate has widths "
                            f"{list(t.candidate.widths)}, {t.num_params:,} parameters, "
                            f"{judge.name} {t.figure:.4g} (eps {eps:g})")))
        if out.stop.met and self.shrink:
            out = search.run(proposers.narrowing(out.chosen))
        trial = out.chosen
        if out.stop.met:
            search.emit(f"smallest: widths {list(trial.candidate.widths)}, {trial.num_params:,} "
                        f"parameters, {judge.name} {trial.figure:.4g} (eps {eps:g}; the teacher "
                        f"has {leaf_count(cands.teacher):,})")
        cand = cands.padded(trial.candidate)   # measured in its own bucket's programs
        what = cand.method.describe() + (", polished" if self.polish is not None else "") + (
            ", widths searched" if self.shrink else "")
        cand = dataclasses.replace(cand, info=dataclasses.replace(
            cand.info, method=what, error_estimate=cands.estimate(cand.measured)))
        return (self.result(search, cand, out.stop, error=self.sup().judge(cand, cands).figure,
                            value=trial.figure), dataclasses.replace(trial, candidate=cand))


@dataclasses.dataclass(frozen=True)
class Verified(Measured):
    """The smallest network whose error on the domain is **proven** at most ``eps`` (ours): the
    search of :class:`Measured`, each candidate judged by :func:`jaxcompress.verify` (it counts
    when its proven ``upper <= eps``); ``result.verification`` is the network's proof.

    Args:
      method, polish, shrink, selector: as for :class:`Measured` (default: collocation;
        derivative matching is ``method=jc.derivative_matching``); the figure is the proof's,
        not a ``metric``.
      max_seconds: the time budget of each candidate's verification (a candidate whose proof
        times out with ``upper > eps`` counts as over the budget); the whole search's is
        :func:`compress_to_tolerance`'s ``max_seconds``.
      max_order, key, n_samples, local_search_steps: see :class:`ToleranceStrategy`.
    """

    method: Any = collocation
    max_seconds: float = 60.0
    name: ClassVar[str] = "verified"

    def __post_init__(self):
        if self.method is None:
            object.__setattr__(self, "method", collocation)
        super().__post_init__()
        if self.metric != "sup":
            raise ValueError(f"Verified: the figure is jc.verify's proven sup error; metric "
                             f"must be 'sup', got {self.metric!r}")
        if not finite_number(self.max_seconds) or float(self.max_seconds) <= 0:
            raise ValueError(f"Verified: max_seconds must be a positive number, got "
                             f"{self.max_seconds!r}")

    def judge(self, cands: Candidates, eps: float) -> judges.Judge:
        fn, params = cands.net.function()
        judge = judges.Proof(functools.partial(fn, params), eps, float(self.max_seconds))
        return judge if self.polish is None else judges.Polished(judge, self.polish)

    def search(self, search: Search) -> ToleranceResult:
        result, trial = self._widths(search)
        if result.status == "budget":   # no further proof past the budget: the search's stands
            return dataclasses.replace(result, verification=trial.evidence)
        # proven padded to its own bucket, by the programs the search compiled
        judge = search.judge.inner if isinstance(search.judge, judges.Polished) else search.judge
        res = judges.Proof.judge(judge, trial.candidate, search.candidates).evidence
        search.emit(f"proven: sup error in [{res.lower:.4g}, {res.upper:.4g}] ({res.status}, "
                    f"{res.seconds:.1f} s)")
        return dataclasses.replace(result, verification=res, metric_value=res.upper,
                                   history=tuple(search.history))


def _advice(judge, eps, polish, method, trials) -> str:
    errors = [t.figure for t in trials]
    best = min(range(len(errors)), key=lambda i: judge.loss(errors[i]))
    advice = []
    if polish is None:
        advice.append("polish=True (distil each candidate towards the teacher)")
    if method.features.name == "taylor":
        advice.append("method=jc.collocation (matching values on the domain, not derivatives "
                      "at its centre)")
    return (f"no order <= {trials[-1].candidate.order} reaches {judge.name} "
            f"{'>=' if judge.higher_is_better else '<='} {eps:g}; the best is {errors[best]:.4g} "
            f"at k = {trials[best].candidate.order}" + (
                f"; try {' or '.join(advice)}" if advice else "; raise max_order or eps"))


def _full_order(family, cands: Candidates, max_order: int) -> int:
    """The first order whose method has as many features as every set has neurons (its
    candidate keeps them all), at most ``max_order``."""
    for k in range(max_order + 1):
        counts = family(k).features.num_features(cands.plan.sizes, cands.domain)
        if (all(c >= w for c, w in zip(counts, cands.widths, strict=True))
                if len(counts) == len(cands.widths) else min(counts) >= max(cands.widths)):
            return k
    return max_order


def _deterministic(selector, where: str) -> Selector:
    """The selector of a search, never a random choice (a search compares compressions)."""
    if selector == "random" or (isinstance(selector, Selector) and not selector.distributable):
        raise ValueError(f"{where}: the random selector is not supported (the search compares "
                         "many compressions; use a deterministic selector)")
    return as_selector(selector, where)


def compress_to_tolerance(
    params: Any,
    strategy: ToleranceStrategy | None = None,
    *,
    activation=None,
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
      strategy: the search: :class:`Certified` (default), :class:`MeasuredOrders`,
        :class:`Measured` or :class:`Verified`.
      progress: ``None`` (quiet), ``True`` (each step printed to stderr, with the time so far,
        the steps left and an estimate of their time) or a callable receiving each line. Every
        line is also in ``history``, and an error names the last steps reached.
      max_seconds: the search's time budget (default ``None``: no limit), checked between
        candidates (``0``: stop after the first); spent, the search returns the best network it
        has.
      stall: a :class:`~jaxcompress.stopping.StallRule` (``True``, the default: no relative
        improvement of at least 0.1 over the last 3 orders), or ``None`` (never).
      throw: ``True`` (default) raises :class:`ToleranceNotMet` when the search stops before a
        network meets ``eps``, with the best network found as its ``result``; ``False`` returns
        that result (``result.met`` false, ``result.status`` and ``result.reason`` saying why).

    Returns:
      A :class:`ToleranceResult`. For the order searches the network equals
      ``jaxcompress.compress(params, jaxcompress.derivative_matching(orders, selector=...),
      activation=..., domain=domain)``.
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
    cands = Candidates(net, domain, params, where=where)
    search = Search(cands, strategy.judge(cands, float(eps)), float(eps), clock,
                    progress=progress, where=where)
    result = strategy.search(search)
    if not result.met and throw:
        advice = "" if result.status == "out_of_orders" else (
            f"; the best network found (widths {list(result.widths)}, {result.metric} "
            f"{result.metric_value:.4g}) is this error's .result, or pass throw=False to have "
            "it returned")
        raise ToleranceNotMet(str(_fail(search.history, result.reason + advice)), result)
    return result


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


# ------------------------------------------------------------------------------------------------
# The frontier
# ------------------------------------------------------------------------------------------------


def _frontier(search: Search, stop: Stop | None, batch: int | None = None,
              extra: tuple[judges.Judge, judges.Judge] | None = None) -> Frontier:
    """The :class:`~jaxcompress.Frontier` of every trial of ``search`` (with ``extra``, the
    sup and relative L2 judges: each candidate's distances to the teacher and, with ``batch``,
    its throughput)."""
    cands, judge = search.candidates, search.judge
    rows = []
    for t in search.trials:
        c = t.candidate
        method = (c.method.describe() if c.method is not None
                  else f"derivative matching, orders {list(c.orders)}")
        widths = c.widths if c.leaves is not None else cands.order_widths(c.orders)
        row = FrontierRow(
            method=method, order=c.order, widths=widths, num_params=cands.num_params(widths),
            error=t.figure, error_before=t.before, seconds=t.seconds,
            stage=c.stage if c.stage != "candidate" or extra else "order",
            build=None if c.leaves is None else functools.partial(cands.result, c))
        if extra:
            sup, rel = extra
            row = dataclasses.replace(
                row, sup=t.figure if judge.name == "sup" else sup.judge(c, cands).figure,
                rel_l2=t.figure if judge.name == "rel_l2" else rel.judge(c, cands).figure,
                points_per_s=None if batch is None else _throughput(cands, c.leaves, batch))
        rows.append(row)
    speed = None if batch is None else _throughput(cands, cands.teacher, batch)
    return Frontier(rows=tuple(rows), metric=judge.name,
                    teacher_params=leaf_count(cands.teacher),
                    teacher_error=search.teacher_figure, teacher_points_per_s=speed,
                    domain=repr(cands.domain), history=tuple(search.history),
                    higher_is_better=judge.higher_is_better, stop=stop)


def _throughput(cands: Candidates, leaves, batch: int, repeats: int = 5) -> float:
    """Points per second of the jitted network on ``batch`` points (median of ``repeats``
    after a warm-up call)."""
    x = cands.domain.sobol(batch, dtype=cands.plan.x.dtype)
    f = cands.function(leaves)
    jax.block_until_ready(f(x))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


def as_family(method, where: str) -> Callable[[int], Method]:
    """``method=`` of a search as a family ``k -> Method`` (a method value: every order)."""
    if isinstance(method, Method):
        return lambda k: method
    if isinstance(method, BestOf) or not callable(method):
        raise TypeError(f"{where}: method must be a method factory (e.g. jc.collocation, called "
                        f"with an order k) or a jc.Method, got {describe(method)}")

    def family(k: int) -> Method:
        m = method(k)
        if not isinstance(m, Method):
            raise TypeError(f"{where}: the method factory must return a jc.Method for an "
                            f"order k, got {describe(m)}")
        return m

    return family


def _grid(factories, orders, widths, cands: Candidates, where: str) -> list:
    """``(proposal, description, factory)`` of every candidate of :func:`frontier`."""
    out = []
    for f in factories:
        if isinstance(f, (Method, BestOf)):
            out.append((functools.partial(cands.uniform, f, None), f.describe(), None))
            continue
        family, top = as_family(f, where), max(orders, default=0)
        out += [(functools.partial(cands.uniform, f, k, top), family(k).describe(), f)
                for k in orders]
        for w in widths or ():
            w = (w,) * len(cands.widths) if isinstance(w, (int, np.integer)) else tuple(w)
            k = next((k for k in range(61) if min(f(k).features.num_features(
                cands.plan.sizes, cands.domain)) >= max(w)), 60)
            m = f(k).with_widths(w)
            out.append((functools.partial(_at_order, cands, m, k), m.describe(), None))
    return out


def _at_order(cands: Candidates, method: Method, k: int) -> Candidate:
    return dataclasses.replace(cands.uniform(method, None), order=k)


def frontier(
    net: Any,
    methods=None,
    *,
    domain,
    orders: Sequence[int] | None = None,
    widths: Sequence[int | Sequence[int]] | None = None,
    polish: bool | PolishSettings = False,
    metric: str | Callable = "sup",
    activation=None,
    key: jax.Array | None = None,
    batch: int | None = 16384,
    n_samples: int = 4096,
    progress=None,
    max_seconds: float | None = None,
    stall=True,
) -> Frontier:
    r"""Compress ``net`` by every method at every order (or width), polish if asked, and
    measure each result: the size-accuracy frontier of the network (ours, not the paper's).

    >>> teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
    >>> front = jc.frontier(teacher, jc.collocation, activation="tanh", domain=jc.Ball(2, 1.0),
    ...                     orders=[1, 2], batch=None, n_samples=512)
    >>> [row.widths for row in front.pareto()]
    [(3, 3), (6, 6)]
    >>> jc.layer_sizes(front.smallest(1e-2))
    [2, 6, 6, 1]

    Args:
      net: any network (a params list with ``activation=``, :func:`~jaxcompress.trace`,
        :func:`~jaxcompress.trace_module`, a compressed result, a loaded file).
      methods: a method factory called at each order (``jc.collocation``,
        ``jc.derivative_matching``, ``lambda k: jc.data_matching(x, order=k)``), a method
        value, or a list of them (default: ``[jc.derivative_matching, jc.collocation]``).
      domain: a :class:`~jaxcompress.Ball` or :class:`~jaxcompress.Box` (where polishing
        draws its points and the errors are measured).
      orders: the orders ``k`` each factory is called at (default ``1..6``).
      widths: further candidates by width: an int (every set) or one width per set; each
        factory is called at the smallest order with that many features
        (``Method.with_widths``).
      polish: ``False``, ``True`` (:class:`PolishSettings` defaults) or settings: each
        candidate is polished (:func:`jaxcompress.polish`), its error before polishing kept.
      metric: ``"sup"``, ``"rel_l2"``, ``"psnr"``, ``metric(f) -> float`` of the candidate as a
        batched function (lower is better) or a :class:`jaxcompress.search.Judge`.
      activation: for a params list.
      key: the sup measurement's PRNG key (default ``PRNGKey(0)``).
      batch: the batch of the throughput measurement (``None``: not measured).
      n_samples: the sup measurement's uniform samples.
      progress: ``None``, ``True`` (a line per candidate to stderr, with the time so far and
        an estimate of the time left) or a callable receiving each line.
      max_seconds: the time budget (``None``: no limit): checked between candidates, the
        candidates measured by then are returned (``0``: the first alone).
      stall: the :class:`~jaxcompress.stopping.StallRule` (``True``: its defaults; ``None``:
        never): a factory whose errors stopped improving with the order has its larger orders
        skipped (larger and no better: off the Pareto front).

    Returns:
      A :class:`~jaxcompress.Frontier`: ``print`` it, ``.pareto()``, ``.smallest(eps)``,
      ``.plot(path)``; ``.stop`` says whether it was measured whole (``"complete"``) or cut
      short (``"budget"``, ``"stalled"``: some factory's orders skipped).
    """
    where = "frontier"
    settings = as_polish(polish, where)
    net_obj = net
    net = as_network(net, activation=activation, where=where)
    if not isinstance(domain, Domain) or domain.parameter_map is not None:
        raise TypeError(f"{where}: domain must be a jc.Ball or jc.Box (polishing draws its "
                        f"points there and the errors are measured there), got "
                        f"{describe(domain)}")
    check_domain(domain, int(net.x.shape[-1]), where, net.x.dtype)
    if key is None:
        key = seed_key(0)
    else:
        check_key(key, where)
    if batch is not None:
        check_positive_int(batch, where, "batch")
    judge = judges.as_judge(metric, where, key=key,
                            n_samples=check_positive_int(n_samples, where, "n_samples"))
    clock = Clock(check_max_seconds(max_seconds, where), check_stall(stall, where))
    cands = Candidates(net, domain, net_obj, where=where)
    if methods is None:
        methods = [derivative_matching, collocation]
    elif isinstance(methods, (Method, BestOf)) or callable(methods):
        methods = [methods]
    grid = _grid(list(methods), FRONTIER_ORDERS if orders is None else orders, widths, cands,
                 where)
    if not grid:
        raise ValueError(f"{where}: no candidate to measure (orders={orders!r}, "
                         f"widths={widths!r}); expected at least one order or width, or a "
                         "method value")
    search = Search(cands, judge if settings is None else judges.Polished(judge, settings),
                    0.0, clock, progress=progress, where=where)
    out: Outcome = search.run(proposers.grid(grid))
    extra = (judges.Metric("sup", key=key, n_samples=n_samples), judges.Metric("rel_l2"))
    return _frontier(search, out.stop, batch, extra)
