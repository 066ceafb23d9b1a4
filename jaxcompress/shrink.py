r"""How small can it get: candidates compressed, polished and measured by any metric.

Ours, not the paper's. The paper compresses to the widths :math:`D_k = \binom{m + k}{m}` of an
order :math:`k` and measures the sup distance to the teacher; a user wants the smallest network
that still does *their* job. This module measures candidates the way the user asks:

* a **metric**: ``"sup"`` (:func:`jaxcompress.sup_error` against the teacher: samples plus
  projected gradient ascent), ``"rel_l2"`` (:math:`\|F - \tilde F\|_2 / \|F\|_2` over
  :data:`REL_L2_POINTS` fixed Sobol points of the domain, none of them a polishing point),
  ``"psnr"`` (:func:`jaxcompress.measure.psnr` of the candidate against the teacher on the same
  points, in dB, the peak the teacher's range there: *higher* is better, and ``eps`` is the
  least PSNR a candidate must reach), or a callable ``metric(f) -> float`` that receives the
  candidate as a batched function ``f(x)`` (MSE against the user's held-out data, a PDE
  residual, the dB lost against the teacher on an image,
  :func:`jaxcompress.measure.psnr_drop`): lower is better;
* **polishing** (:func:`jaxcompress.polish`: distillation towards the teacher on Sobol points,
  the widths unchanged), with :class:`PolishSettings`.

:func:`frontier` measures a grid of candidates (methods times orders or widths) and returns a
:class:`~jaxcompress.Frontier`. The search of :func:`jaxcompress.compress_to_tolerance` with
:class:`jaxcompress.Measured` ``(metric=..., polish=...)`` (:func:`search`) goes further:

1. **orders**: the method at :math:`k = 0, 1, \ldots` (polished if asked) until one meets
   ``metric <= eps``;
2. **widths between the** :math:`D_k` **steps, per set**: from that network, the set whose
   neuron saves the most parameters first: the current network is compressed by the same
   method with that set ``by`` neurons narrower (the others kept, re-fitted in forward order),
   polished from there (:attr:`PolishSettings.shrink_steps`) and measured; the first that
   meets ``eps`` is kept and the next step starts from it. A set's step ``by`` starts at one
   neuron, doubles after a success and halves after a failure (the same set is tried again),
   so a width falls from 28 to 3 in a handful of steps; a set that failed by one neuron is
   tried after the others; the search stops when no set can lose one neuron.

Programs by what they do, not one per candidate (issue 42): every candidate is measured and
polished padded to its widths rounded up to powers of two, at least :data:`MIN_BUCKET` (those
the width search starts from, for the whole width search;
:meth:`jaxcompress.graph.plan.Plan.place`: its missing neurons zero in their producers and in
the rows that read them), polished with a mask that keeps the padding at zero; the orders run
masked, one program per bucket of orders
(:class:`~jaxcompress.compression.UniformOrders`); a step of the width search narrows one set
of the padded candidate in one masked program per set (the driver's ``run(..., narrow=)``).
So the low orders and the whole width search compile one polishing loop (with
``shrink_steps == steps``, the defaults), one measurement and one narrowing program per set.
The masked candidates equal the exact ones to rounding; a polished search, whose decisions
compare measurements with ``eps``, can take another path from such differences.
:func:`frontier` compiles the same way: a factory's orders run masked, one program per bucket
of orders, and each candidate is measured (and polished) padded to its bucket of widths; only
its throughput is timed at its own widths. Its default ``orders=1..6`` of two factories on a
``[2, 32, 32, 1]`` teacher compiled 24 programs in 10.3 s, now 8 in 4.2 s (2-core Xeon).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxcompress._checks import check_key, check_positive_int, describe, seed_key
from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.compression import UniformOrders, compress_network, compressed_like
from jaxcompress.domains import Domain, check_domain
from jaxcompress.driver import run
from jaxcompress.graph import Network
from jaxcompress.graph.plan import Plan
from jaxcompress.layer import CompressInfo
from jaxcompress.measure import error_points, network_sup_error, plan_estimate, psnr_db
from jaxcompress.methods import BestOf, Method, collocation, derivative_matching
from jaxcompress.mlp import leaf_count
from jaxcompress.networks import as_network, network_placement
from jaxcompress.pareto import Frontier, FrontierRow
from jaxcompress.polishing import DEFAULT_POINTS, DEFAULT_STEPS, polish_leaves
from jaxcompress.stopping import (
    Clock,
    Stop,
    Stopped,
    best_index,
    check_max_seconds,
    check_stall,
)

__all__ = ["REL_L2_POINTS", "SHRINK_STEPS", "PolishSettings", "frontier", "search"]

#: Polishing steps after each step of the width search (it starts from a polished network one
#: neuron wider, so it needs fewer than a fresh compression).
SHRINK_STEPS = 1000
#: Fixed Sobol points of the domain for ``metric="rel_l2"`` (from the error estimate's stretch
#: of the sequence, so none of them is a polishing point).
REL_L2_POINTS = 4096
#: Default orders of :func:`frontier`.
FRONTIER_ORDERS = (1, 2, 3, 4, 5, 6)


@dataclasses.dataclass(frozen=True)
class PolishSettings:
    """How the search for the smallest network and :func:`frontier` polish their candidates
    (:func:`jaxcompress.polish`; ``polish=True`` means these defaults).

    Args:
      steps: optimizer steps for a compression of the teacher (default
        :data:`~jaxcompress.polishing.DEFAULT_STEPS`).
      shrink_steps: optimizer steps after each step of the width search, which starts from the
        polished network a few neurons wider (default :data:`SHRINK_STEPS`).
      points: the fixed Sobol points of the domain the objective averages over.
      optimizer: an optax ``GradientTransformation`` (default: :func:`jaxcompress.polish`'s,
        L-BFGS).
      dtype: the dtype the loop computes in (e.g. ``jnp.float64`` for a float32 network; see
        :func:`jaxcompress.polish`).
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


# ------------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("plan",))
def _apply(leaves, x, *, plan: Plan):
    return plan.apply(leaves, x)


@functools.partial(FastOnSmallCPU, static_argnames=("plan",))
def _estimate(teacher, leaves, domain, *, plan: Plan):
    return plan_estimate(plan, teacher, leaves, domain, None)


@functools.partial(jax.jit, static_argnames=("plan", "n"))
def _rel_l2(teacher, leaves, domain, *, plan: Plan, n: int):
    x = error_points(domain, n, plan.x.dtype)
    f = plan.apply(teacher, x)
    gap = f - plan.apply(leaves, x)
    return jnp.sqrt(jnp.sum(gap * gap) / jnp.sum(f * f))


@functools.partial(jax.jit, static_argnames=("plan", "n"))
def _psnr(teacher, leaves, domain, *, plan: Plan, n: int):
    x = error_points(domain, n, plan.x.dtype)
    return psnr_db(plan.apply(teacher, x), plan.apply(leaves, x))


#: The metrics named by a string.
METRICS = ("sup", "rel_l2", "psnr")


def higher_is_better(metric) -> bool:
    """Whether larger values of ``metric`` are better (``"psnr"``; every other metric is an
    error: lower is better)."""
    return isinstance(metric, str) and metric == "psnr"


def within(value: float, eps: float, metric) -> bool:
    """Whether ``value`` of ``metric`` meets the target ``eps`` (``<= eps``; for PSNR
    ``>= eps`` dB)."""
    return value >= eps if higher_is_better(metric) else value <= eps


def loss(value: float, metric) -> float:
    r"""``value`` of ``metric`` as a loss, lower is better and relative changes meaningful (what
    the stall rule compares and the best candidate minimises): the value itself, and for PSNR
    the normalised MSE :math:`10^{-\mathrm{PSNR}/10}`."""
    return 10.0 ** (-value / 10.0) if higher_is_better(metric) else value


def metric_name(metric) -> str:
    """How tables and messages name a metric (or a method factory)."""
    if isinstance(metric, str):
        return metric
    return getattr(metric, "__name__", type(metric).__name__)


def check_metric(metric, where: str):
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"{where}: metric must be 'sup', 'rel_l2', 'psnr' or a callable "
                             f"metric(f) -> float, got {metric!r}")
        return metric
    if not callable(metric):
        raise TypeError(f"{where}: metric must be 'sup', 'rel_l2', 'psnr' or a callable "
                        f"metric(f) -> float (f the candidate as a batched function f(x)), got "
                        f"{describe(metric)}")
    return metric


# ------------------------------------------------------------------------------------------------
# Candidates
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A candidate network: its leaves at its own widths, its record (``kept``: indices into the
    teacher's neurons) and the method that made it."""

    leaves: list
    widths: tuple[int, ...]
    info: CompressInfo
    method: Method
    order: int | None


@functools.partial(FastOnSmallCPU, static_argnames=("plan", "only"))
def _shrink_step(leaves, method, domain, *, plan: Plan, only: tuple[int, ...]):
    """The one driver on a candidate (``plan`` at its widths), only the sets ``only``
    compressed."""
    return run(plan, method, leaves, domain, only=only)


@functools.partial(FastOnSmallCPU, static_argnames=("plan", "only"))
def _narrow_step(leaves, method, domain, narrow, *, plan: Plan, only: tuple[int, ...]):
    """:func:`_shrink_step` masked (``run``'s ``narrow``): a candidate padded to the
    search's widths, the set ``only`` narrowed from ``narrow[0]`` to ``narrow[1]`` neurons
    (traced), so every step of the width search on one set runs one program."""
    return run(plan, method, leaves, domain, only=only, skip=False, narrow=narrow)


def _narrows(method, plan: Plan, placed: bool) -> bool:
    """Whether the width search's steps of ``method`` can run masked (:func:`_narrow_step`):
    one method at its default widths with a greedy-prefix selector, derivative or
    collocation features (their rows do not depend on the widths below ``D_k``), on one
    device, no stack."""
    return (isinstance(method, Method) and method.widths is None and not placed
            and method.selector.greedy_prefix
            and method.features.name in ("taylor", "collocation")
            and not any(s.parts for s in plan.sets))


class Bench:
    """One teacher, its domain and a metric: compress, polish and measure candidates.

    ``emit(line)`` reports each step. Candidates at any widths are measured through the
    teacher's plan (its program traced at their shapes), so one compilation serves every
    candidate of one shape.
    """

    def __init__(self, obj, net: Network, domain, metric, *, key, emit, n_samples: int = 4096,
                 local_search_steps: int = 100, teacher_value: float | None = None):
        self.obj, self.net, self.domain = obj, net, domain
        self.teacher_value = teacher_value
        # strongly typed, as the candidates are: one program of the metric serves both
        self.plan = net.plan()
        self.teacher = [jax.device_put(np.asarray(v)) if getattr(v, "weak_type", False) else v
                        for v in net.leaves]
        self.metric, self.name = metric, metric_name(metric)
        self.higher = higher_is_better(metric)
        self.key, self.emit = key, emit
        self.n_samples, self.local_search_steps = n_samples, local_search_steps
        self.widths = tuple(s.width for s in self.plan.sets)

    def padded(self, cand: Candidate) -> list:
        """``cand``'s leaves padded to its bucket (:meth:`space`): the same function, measured
        and proven by the programs of its bucket's candidates."""
        return self.space(cand).pad(cand.leaves)[0]

    def space(self, cand: Candidate) -> _Space:
        """The padded widths ``cand`` is polished and measured at (:func:`_bucket`: its widths
        rounded up to powers of two), where it shares its programs with the candidates of its
        bucket."""
        return _Space(self.plan, _bucket(cand.widths, self.widths))

    # -- measuring ----------------------------------------------------------------------------

    def function(self, leaves) -> Callable[[jax.Array], jax.Array]:
        """The network at ``leaves`` as a batched function ``f(x)`` (jitted)."""
        return functools.partial(_apply, list(leaves), plan=self.plan)

    def measure(self, leaves) -> float:
        """The metric of the network at ``leaves`` (NaN counts as ``inf``: never within a
        budget)."""
        if self.metric == "sup":
            value = self.sup(leaves)
        elif self.metric == "rel_l2":
            value = self.rel_l2(leaves)
        elif self.metric == "psnr":
            value = self.psnr(leaves)
            return value if not math.isnan(value) else -math.inf
        else:
            value = self.metric(self.function(leaves))
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"metric {self.name} must return one number, got "
                                f"{describe(value)}") from None
        return value if not math.isnan(value) else math.inf

    @functools.cached_property
    def teacher_error(self) -> float:
        """The teacher's own value of the metric (measured once; known for a distance to the
        teacher: 0, or ``teacher_value`` when given)."""
        if self.teacher_value is not None:
            return self.teacher_value
        if self.metric in ("sup", "rel_l2"):
            return 0.0
        if self.metric == "psnr":
            return math.inf
        return self.measure(self.teacher)

    def within(self, value: float, eps: float) -> bool:
        """Whether ``value`` of the metric meets ``eps`` (:func:`within`)."""
        return within(value, eps, self.metric)

    def loss(self, value: float) -> float:
        """``value`` of the metric as a loss, lower is better (:func:`loss`)."""
        return loss(value, self.metric)

    def sup(self, leaves) -> float:
        return float(network_sup_error(self.plan, self.teacher, list(leaves), self.domain,
                                       self.key, n_samples=self.n_samples,
                                       local_search_steps=self.local_search_steps))

    def estimate(self, leaves) -> jax.Array:
        """``max |F - F~|`` on the error estimate's fixed Sobol points
        (:func:`jaxcompress.measure.error_points`), as the driver records it (one program:
        eagerly, a traced network's program would compile each of its operations)."""
        return _estimate(self.teacher, list(leaves), self.domain, plan=self.plan)

    def rel_l2(self, leaves) -> float:
        return float(_rel_l2(self.teacher, list(leaves), self.domain, plan=self.plan,
                             n=REL_L2_POINTS))

    def psnr(self, leaves) -> float:
        return float(_psnr(self.teacher, list(leaves), self.domain, plan=self.plan,
                           n=REL_L2_POINTS))

    def throughput(self, leaves, batch: int, repeats: int = 5) -> float:
        """Points per second of the jitted network on ``batch`` points (median of
        ``repeats`` after a warm-up call)."""
        x = self.domain.sobol(batch, dtype=self.plan.x.dtype)
        f = self.function(leaves)
        jax.block_until_ready(f(x))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(f(x))
            times.append(time.perf_counter() - t0)
        return batch / statistics.median(times)

    # -- compressing --------------------------------------------------------------------------

    def compress(self, method: Method, order: int | None, where: str,
                 orders: UniformOrders | None = None) -> Candidate:
        """The teacher compressed by ``method``, its rank-deficient neurons dropped; with
        ``orders`` (``method`` its family's at ``order``), by their program of the order's
        bucket when they run masked (:class:`~jaxcompress.compression.UniformOrders`)."""
        if orders is not None and orders.masked:
            small, info = orders(order)
        else:
            small, info = compress_network(self.net, method, self.domain, where=where)
        return self._trimmed(small, info, method, order)

    def _trimmed(self, leaves, info: CompressInfo, method: Method, order) -> Candidate:
        widths = self.plan.set_widths(leaves)
        leaves, masks = self.plan.at_widths(widths).trim(leaves)
        layers = tuple(dataclasses.replace(
            li, kept=np.asarray(li.kept)[m], width_out=int(m.sum()),
            rank=np.minimum(np.asarray(li.rank), int(m.sum())).astype(np.int32))
            for li, m in zip(info.layers, masks, strict=True))
        return Candidate(leaves, tuple(int(m.sum()) for m in masks),
                         dataclasses.replace(info, layers=layers), method, order)

    def shrink(self, cand: Candidate, s: int, by: int = 1, space: _Space | None = None
               ) -> Candidate:
        """``cand`` with set ``s`` ``by`` neurons narrower: ``cand`` compressed by its own
        method, only that set (kept neurons and record composed with ``cand``'s). With
        ``space`` (widths at least ``cand``'s) and a method that allows it
        (:func:`_narrows`), padded to its widths and masked: one program for every step."""
        widths = list(cand.widths)
        widths[s] -= by
        layers = list(cand.info.layers)
        if space is None or not _narrows(cand.method, self.plan,
                                         network_placement(self.net) is not None):
            small, step = _shrink_step(cand.leaves, cand.method.with_widths(widths), self.domain,
                                       plan=self.plan.at_widths(cand.widths), only=(s,))
            kept = np.asarray(layers[s].kept)[np.asarray(step.layers[s].kept)]
        else:
            padded, _ = space.pad(cand.leaves)
            small, step = _narrow_step(padded, cand.method, self.domain,
                                       np.asarray([cand.widths[s], widths[s]], np.int32),
                                       plan=space.plan, only=(s,))
            # the other sets' padding is trimmed below: their records padded alike
            layers = [dataclasses.replace(li, kept=np.concatenate(
                [np.asarray(li.kept), np.full(w - len(li.kept), -1, np.asarray(li.kept).dtype)]))
                for li, w in zip(layers, space.widths, strict=True)]
            # pivots past the live neurons pick padding (-1), which the trim drops
            kept = np.asarray(layers[s].kept)[np.asarray(step.layers[s].kept)]
        layers[s] = dataclasses.replace(step.layers[s], kept=kept)
        info = dataclasses.replace(cand.info, layers=tuple(layers))
        return self._trimmed(small, info, cand.method, cand.order)

    # -- polishing ----------------------------------------------------------------------------

    def polish(self, leaves, settings: PolishSettings, steps: int, *, space=None) -> list:
        """``leaves`` polished towards the teacher for ``steps`` steps; with ``space`` (a
        :class:`_Space`) padded to its widths and masked (one compilation for the search)."""
        padded, mask = (list(leaves), None) if space is None else space.pad(leaves)
        out, _ = polish_leaves(self.plan, padded, self.plan, self.teacher, domain=self.domain,
                               mask=mask, steps=steps, points=settings.points,
                               optimizer=settings.optimizer, dtype=settings.dtype)
        return out

    # -- results ------------------------------------------------------------------------------

    def row(self, cand: Candidate, *, error: float, error_before: float | None, seconds: float,
            stage: str, extra: bool = False, batch: int | None = None,
            measured=None) -> FrontierRow:
        """The frontier row of ``cand`` (with ``extra``: its sup and relative L2 distance to
        the teacher, measured on ``measured``, its leaves padded (the same function; default
        its own), and its throughput on ``batch`` points at its own widths too)."""
        sup = rel = speed = None
        if extra:
            leaves = cand.leaves if measured is None else measured
            sup = error if self.metric == "sup" else self.sup(leaves)
            rel = error if self.metric == "rel_l2" else self.rel_l2(leaves)
            speed = None if batch is None else self.throughput(cand.leaves, batch)
        return FrontierRow(
            method=cand.method.describe(), order=cand.order, widths=cand.widths,
            num_params=leaf_count(cand.leaves), error=error, error_before=error_before,
            sup=sup, rel_l2=rel, points_per_s=speed, seconds=seconds, stage=stage,
            build=functools.partial(self.result, cand))

    def result(self, cand: Candidate) -> Any:
        """``cand`` as the kind of network the teacher is."""
        return compressed_like(self.obj, self.net, list(cand.leaves), cand.info, self.domain)

    def frontier(self, rows, history, batch: int | None, stop: Stop | None = None
                 ) -> Frontier:
        speed = None if batch is None else self.throughput(self.teacher, batch)
        return Frontier(rows=tuple(rows), metric=self.name,
                        teacher_params=leaf_count(self.teacher),
                        teacher_error=self.teacher_error, teacher_points_per_s=speed,
                        domain=repr(self.domain), history=tuple(history),
                        higher_is_better=self.higher, stop=stop)


class _Space:
    """Candidates padded to the widths ``widths`` (their neurons first, zeros after) with
    masks: many widths, one shape."""

    def __init__(self, plan: Plan, widths: Sequence[int]):
        self.plan = plan.at_widths(widths)
        self.widths = tuple(widths)

    def pad(self, leaves) -> tuple[list, list]:
        leaves = [np.asarray(v) for v in leaves]      # on the host: no dispatch per leaf
        kept = [np.arange(w) for w in self.plan.set_widths(leaves)]
        ones = [np.ones_like(v) for v in leaves]
        return self.plan.place(leaves, kept), self.plan.place(ones, kept)

    def unpad(self, leaves, widths: Sequence[int]) -> list:
        return self.plan.restrict(leaves, [np.arange(W) < w for W, w in
                                            zip(self.widths, widths, strict=True)])


#: The narrowest padded width of a candidate (:func:`_bucket`): the low orders' candidates
#: (``D_k <= 15`` with two inputs: ``k <= 4``) share one program for each measurement and
#: polishing loop; padding to 16 neurons costs a coordinate network microseconds per call.
MIN_BUCKET = 16


def _bucket(widths: Sequence[int], full: Sequence[int]) -> tuple[int, ...]:
    """The padded widths a candidate is polished and measured at: each width rounded up to a
    power of two, at least :data:`MIN_BUCKET` (at most the teacher's), so that candidates of
    nearby widths, and the width search with the order it starts from, share one
    compilation."""
    return tuple(min(f, max(MIN_BUCKET, 1 << max(0, w - 1).bit_length()))
                 for w, f in zip(widths, full, strict=True))


def _saving(plan: Plan, cand: Candidate, s: int) -> int:
    """Parameters dropped with one neuron of set ``s``."""
    masks = [np.ones(w, bool) for w in cand.widths]
    masks[s][-1] = False
    return leaf_count(cand.leaves) - leaf_count(plan.at_widths(cand.widths).restrict(
                                                        cand.leaves, masks))


# ------------------------------------------------------------------------------------------------
# The search for the smallest network
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """What :func:`search` found: the smallest candidate meeting the budget (or, when the
    search stopped before one did, the best candidate measured), its error, every candidate
    measured on the way (a :class:`~jaxcompress.Frontier`) and why it stopped."""

    best: Candidate
    error: float
    frontier: Frontier
    stop: Stop = Stop()


def search(bench: Bench, family, eps: float, *, max_order: int, polish: PolishSettings | None,
           widths: bool, fail: Callable[[str], Exception], clock: Clock | None = None
           ) -> SearchResult:
    """The smallest network with ``metric <= eps`` (``>= eps`` for PSNR; see the module
    docstring): orders, then widths per set. ``family(k)`` is the method at order ``k``;
    ``fail(message)`` the error raised when the teacher itself misses ``eps``.

    The search stops early as ``clock`` says (:mod:`jaxcompress.stopping`: its time budget,
    checked between candidates; the stall rule on the orders' errors); it then returns the best
    candidate it has: the smallest that met ``eps`` (when the budget ran out in the width
    search), else the one of the smallest error, with the :class:`~jaxcompress.stopping.Stop`
    saying why (``met`` whether it meets ``eps``). Running out of orders is such a stop too
    (``"out_of_orders"``)."""
    clock = Clock() if clock is None else clock
    rows: list[FrontierRow] = []
    history: list[str] = []

    def emit(line: str) -> None:
        history.append(line)
        bench.emit(line)

    teacher = bench.teacher_error
    if not bench.within(teacher, eps):
        raise fail(f"the teacher itself has {bench.name} {teacher:.4g} "
                   f"{'<' if bench.higher else '>'} eps = {eps:g}; no compression of it can do "
                   "better by measurement")
    tried: list[tuple[Candidate, float]] = []
    try:
        start, error = _orders(bench, family, eps, max_order, polish, rows, emit, clock, tried)
    except Stopped as why:
        best, error = tried[best_index([bench.loss(e) for _, e in tried])]
        stop = clock.stop(why.status, why.reason, met=False)
        emit(f"stopped ({why.status}): {why.reason}; target not met: the best candidate has "
             f"widths {list(best.widths)}, {leaf_count(best.leaves):,} parameters, "
             f"{bench.name} {error:.4g} (eps {eps:g})")
        return SearchResult(best, error, bench.frontier(rows, history, None, stop), stop)
    stop = clock.stop("met", "the target was met", met=True)
    if widths:
        start, error, stop = _widths(bench, start, error, eps, polish, rows, emit, clock)
    emit(f"smallest: widths {list(start.widths)}, {leaf_count(start.leaves):,} parameters, "
         f"{bench.name} {error:.4g} (eps {eps:g}; the teacher has "
         f"{leaf_count(bench.teacher):,})")
    return SearchResult(start, error, bench.frontier(rows, history, None, stop), stop)


def _orders(bench: Bench, family, eps, max_order, polish, rows, emit, clock: Clock, tried):
    """Phase 1: the smallest order whose candidate (polished if asked) meets ``eps``; every
    candidate appended to ``tried``. :class:`~jaxcompress.stopping.Stopped` when the budget is
    spent, the errors stalled, or no order is left."""
    errors = []
    where = "compress_to_tolerance"
    orders = UniformOrders(bench.net, family, bench.domain, max_order=max_order, where=where)
    last = _full_order(family, bench, max_order)
    for k in range(max_order + 1):
        clock.check()
        t0 = time.perf_counter()
        method = family(k)
        cand = bench.compress(method, k, where, orders)
        # measured padded: the orders of one bucket share the metric's program
        space = bench.space(cand)
        before = bench.measure(space.pad(cand.leaves)[0])
        error = before
        if polish is not None:
            polished = bench.polish(cand.leaves, polish, polish.steps, space=space)
            error = bench.measure(polished)
            cand = dataclasses.replace(cand, leaves=space.unpad(polished, cand.widths))
        errors.append(error)
        tried.append((cand, error))
        clock.tick()
        rows.append(bench.row(cand, error=error, error_before=before if polish else None,
                              seconds=time.perf_counter() - t0, stage="order"))
        polished = f" -> polished {error:.4g}" if polish is not None else ""
        met = bench.within(error, eps)
        full = cand.widths == bench.widths   # nothing left to compress: larger orders are equal
        left = 0 if met or full else max(last - k, 1)
        emit(f"order k = {k}: widths {list(cand.widths)}, {leaf_count(cand.leaves):,} params, "
             f"{bench.name} {before:.4g}{polished} ({time.perf_counter() - t0:.1f} s)"
             + clock.eta(left, "orders"))
        if met:
            return cand, error
        if full:
            break
        if k < max_order:   # after the last order the advice says more than a stall
            clock.check_stall([bench.loss(e) for e in errors], bench.name, errors)
    best = int(best_index([bench.loss(e) for e in errors]))
    advice = []
    if polish is None:
        advice.append("polish=True (distil each candidate towards the teacher)")
    if method.features.name == "taylor":
        advice.append("method=jc.collocation (matching values on the domain, not derivatives "
                      "at its centre)")
    raise Stopped("out_of_orders",
                  f"no order <= {len(errors) - 1} reaches {bench.name} "
                  f"{'>=' if bench.higher else '<='} {eps:g}; the best is {errors[best]:.4g} at "
                  f"k = {best}" + (f"; try {' or '.join(advice)}" if advice
                                   else "; raise max_order or eps"))


def _full_order(family, bench: Bench, max_order: int) -> int:
    """The last order the search can reach: the first whose method has as many features as
    every set has neurons (its candidate keeps them all; for a stack, as
    :func:`_order_for`), at most ``max_order``."""
    for k in range(max_order + 1):
        counts = family(k).features.num_features(bench.plan.sizes, bench.domain)
        if (all(c >= w for c, w in zip(counts, bench.widths, strict=True))
                if len(counts) == len(bench.widths) else min(counts) >= max(bench.widths)):
            return k
    return max_order


def _widths(bench: Bench, cand: Candidate, error: float, eps, polish, rows, emit, clock: Clock):
    """Phase 2: neurons removed per set while the metric stays within ``eps``, in steps that
    double after a success and halve after a failure (down to one neuron: the search ends when
    no set can lose one). Cut short by the clock's budget, it returns the smallest candidate
    that met ``eps`` so far. Returns ``(candidate, error, stop)``."""
    space = bench.space(cand)
    failed: set[int] = set()
    done: set[int] = set()        # failed by one neuron since the last success: not tried again
    step = [1] * len(cand.widths)
    try:
        while True:
            sets = [s for s, w in enumerate(cand.widths) if w > 1]
            sets.sort(key=lambda s: (s in failed, -_saving(bench.plan, cand, s), -s))
            accepted = False
            for s in sets:
                while not accepted:
                    clock.check()
                    by = min(step[s], cand.widths[s] - 1)
                    trial, ok, after = _try(bench, cand, s, by, eps, polish, space, rows, emit,
                                            clock, (failed, done))
                    if ok:
                        cand, error, accepted = trial, after, True
                        failed.discard(s)
                        done.clear()
                        step[s] = 2 * by
                    elif by > 1:
                        step[s] = by // 2      # too far: half the step, same set
                    else:
                        failed.add(s)          # not even one neuron: the next set
                        done.add(s)
                        break
                if accepted:
                    break
            if not accepted:
                return cand, error, clock.stop("met", "the target was met; no layer can lose "
                                               "a neuron", met=True)
    except Stopped as why:
        emit(f"stopped ({why.status}): {why.reason}; the width search was cut short: the "
             f"smallest network that met the target so far has widths {list(cand.widths)}")
        return cand, error, clock.stop(why.status, why.reason + "; the width search was cut "
                                       "short (the target was met)", met=True)


def _steps_left(widths: Sequence[int], failed: set[int], done: set[int]) -> int:
    """A guess of the width search's steps left: none for a set that failed by one neuron
    since the last success (``done``; all of them: the search is over), one for a set that
    failed before it, about ``log2`` of its width (steps of doubling and halving, and one
    failure) for another."""
    live = [s for s, w in enumerate(widths) if w > 1]
    if all(s in done for s in live):
        return 0
    return sum(0 if s in done else 1 if s in failed else (widths[s] - 1).bit_length() + 1
               for s in live)


def _left_after(cand: Candidate, s: int, by: int, ok: bool, failed: set[int], done: set[int]
                ) -> int:
    """:func:`_steps_left` once the step on set ``s`` is recorded as :func:`_widths` does."""
    if ok:
        return _steps_left(cand.widths, failed - {s}, set())
    if by == 1:
        return _steps_left(cand.widths, failed | {s}, done | {s})
    return _steps_left(cand.widths, failed, done)


def _try(bench: Bench, cand: Candidate, s: int, by: int, eps, polish, space, rows, emit,
         clock: Clock, sets: tuple[set[int], set[int]]):
    """``cand`` with ``by`` neurons fewer in set ``s``, polished if asked and measured:
    ``(trial, within eps, error)``; its row recorded and reported (with a guess of the steps
    left from the sets that ``failed`` and are ``done``, ``sets``, after this step)."""
    t0 = time.perf_counter()
    trial = bench.shrink(cand, s, by, space)
    padded, _ = space.pad(trial.leaves)
    before = bench.measure(padded)
    after = before
    if polish is not None:
        polished = bench.polish(trial.leaves, polish, polish.shrink_steps, space=space)
        after = bench.measure(polished)
        trial = dataclasses.replace(trial, leaves=space.unpad(polished, trial.widths))
    ok = bench.within(after, eps)
    clock.tick()
    rows.append(bench.row(trial, error=after, error_before=before if polish else None,
                          seconds=time.perf_counter() - t0, stage="shrink"))
    polished_note = f" -> polished {after:.4g}" if polish is not None else ""
    emit(f"set {s + 1} -{by} -> widths {list(trial.widths)}, {leaf_count(trial.leaves):,} "
         f"params: {bench.name} {before:.4g}{polished_note} "
         f"{'kept' if ok else 'below eps' if bench.higher else 'over eps'} "
         f"({time.perf_counter() - t0:.1f} s)"
         + clock.eta(_left_after(trial if ok else cand, s, by, ok, *sets), "steps",
                     about=True))
    return trial, ok, after


def _factories(methods) -> list:
    """``methods`` as a list of method factories or method values."""
    if methods is None:
        return [derivative_matching, collocation]
    if isinstance(methods, (Method, BestOf)) or callable(methods):
        return [methods]
    return list(methods)


def _order_for(factory, sizes, domain, width: int, max_order: int = 60) -> int:
    """The smallest order whose method has at least ``width`` features in every set."""
    for k in range(max_order + 1):
        if min(factory(k).features.num_features(sizes, domain)) >= width:
            return k
    return max_order


def _candidates(factories, orders, widths, plan: Plan, domain, where: str):
    """``(method, order, factory)`` of every candidate of :func:`frontier` (``factory``: the
    method factory of a candidate by order, else ``None``)."""
    out = []
    for f in factories:
        if isinstance(f, (Method, BestOf)):
            out.append((f, None, None))
            continue
        for k in orders:
            m = f(k)
            if not isinstance(m, Method):
                raise TypeError(f"{where}: a method factory must return a jc.Method for an "
                                f"order k, got {describe(m)} from {describe(f)}")
            out.append((m, k, f))
        for w in widths or ():
            w = (w,) * len(plan.sets) if isinstance(w, (int, np.integer)) else tuple(w)
            k = _order_for(f, plan.sizes, domain, max(w))
            out.append((f(k).with_widths(w), k, None))
    return out


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
        candidate is polished (:func:`jaxcompress.polish`) and its error before polishing
        kept beside the error after.
      metric: ``"sup"``, ``"rel_l2"`` or ``metric(f) -> float`` of the candidate as a batched
        function (lower is better; see :mod:`jaxcompress.shrink`).
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
        skipped (they would be larger and no better: off the Pareto front).

    Returns:
      A :class:`~jaxcompress.Frontier`: ``print`` it, ``.pareto()``, ``.smallest(eps)``,
      ``.plot(path)``; ``.stop`` says whether it was measured whole (``"complete"``) or cut
      short (``"budget"``, ``"stalled"``: some factory's orders skipped).
    """
    where = "frontier"
    settings = as_polish(polish, where)
    metric = check_metric(metric, where)
    net_obj = net
    net = as_network(net, activation=activation, where=where)
    _check_domain(domain, net, where)
    if key is None:
        key = seed_key(0)
    else:
        check_key(key, where)
    if batch is not None:
        check_positive_int(batch, where, "batch")
    clock = Clock(check_max_seconds(max_seconds, where), check_stall(stall, where))
    history: list[str] = []
    emit = reporter(progress, history, where)
    bench = Bench(net_obj, net, domain, metric, key=key, emit=emit,
                  n_samples=check_positive_int(n_samples, where, "n_samples"))
    cands = _candidates(_factories(methods), FRONTIER_ORDERS if orders is None else orders,
                        widths, bench.plan, domain, where)
    if not cands:
        raise ValueError(f"{where}: no candidate to measure (orders={orders!r}, "
                         f"widths={widths!r}); expected at least one order or width, or a "
                         "method value")
    rows = []
    # a factory's orders in one program per bucket of orders (when they can run masked)
    by_order = {id(f): UniformOrders(bench.net, f, domain, where=where,
                                     max_order=max(k for _, k, g in cands if g is f))
                for _, _, f in cands if f is not None}
    errors: dict[int, list[float]] = {}     # a factory's values by order, for the stall rule
    stalled: dict[int, str] = {}
    status, reason = "complete", "every candidate was measured"
    for i, (method, order, factory) in enumerate(cands, start=1):
        if factory is not None and id(factory) in stalled:
            continue
        try:
            clock.check()
        except Stopped as why:
            status, reason = why.status, why.reason
            emit(f"stopped ({why.status}): {why.reason}; {len(cands) - i + 1} candidates not "
                 "measured")
            break
        t0 = time.perf_counter()
        cand = bench.compress(method, order, where,
                              None if factory is None else by_order[id(factory)])
        # measured and polished padded, as the search: one program per bucket of widths
        space = bench.space(cand)
        padded = space.pad(cand.leaves)[0]
        before = bench.measure(padded)
        error = before
        if settings is not None:
            padded = bench.polish(cand.leaves, settings, settings.steps, space=space)
            error = bench.measure(padded)
            cand = dataclasses.replace(cand, leaves=space.unpad(padded, cand.widths))
        row = bench.row(cand, error=error, error_before=before if settings else None,
                        seconds=time.perf_counter() - t0, stage="candidate", extra=True,
                        batch=batch, measured=padded)
        rows.append(row)
        clock.tick()
        polished = f" -> polished {error:.4g}" if settings is not None else ""
        emit(f"[{i}/{len(cands)}] {method.describe()}: widths {list(row.widths)}, "
             f"{row.num_params:,} params, {bench.name} {before:.4g}{polished} "
             f"({row.seconds:.1f} s)" + clock.eta(len(cands) - i, "candidates"))
        if factory is not None:
            errors.setdefault(id(factory), []).append(error)
            try:
                clock.check_stall([bench.loss(e) for e in errors[id(factory)]], bench.name,
                                  errors[id(factory)])
            except Stopped as why:
                stalled[id(factory)] = why.reason
                skipped = sum(1 for _, _, f in cands[i:] if f is factory)
                if skipped:
                    status, reason = "stalled", why.reason
                    emit(f"stalled: {why.reason}; {metric_name(factory)}'s {skipped} larger "
                         f"order{'s' if skipped > 1 else ''} skipped")
    stop = clock.stop(status, reason, met=None)
    return bench.frontier(rows, history, batch, stop)


def _check_domain(domain, net: Network, where: str) -> None:
    if not isinstance(domain, Domain) or domain.parameter_map is not None:
        raise TypeError(f"{where}: domain must be a jc.Ball or jc.Box (polishing draws its "
                        f"points there and the errors are measured there), got "
                        f"{describe(domain)}")
    check_domain(domain, int(net.x.shape[-1]), where, net.x.dtype)


def default_family(polish: PolishSettings | None, selector) -> Callable[[int], Method]:
    """The method family of a search given none: derivative matching (the paper's) when not
    polishing; collocation when polishing (measured: the better start, benchmarks/README.md,
    "How small can it get?")."""
    if polish is not None:
        return collocation
    return functools.partial(_derivative, selector=selector)


def _derivative(k: int, *, selector) -> Method:
    return derivative_matching(k, selector=selector)


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


def reporter(progress, history: list[str], where: str) -> Callable[[str], None]:
    """``emit(line)``: record a step and report it as ``progress`` asks (``None``: quiet,
    ``True``: stderr, a callable: called with each line)."""
    if progress is True:
        def report(line):
            print(f"[{where}] {line}", file=sys.stderr, flush=True)
    elif callable(progress):
        report = progress
    elif progress in (None, False):
        report = None
    else:
        raise TypeError(f"{where}: progress must be None, True or a callable, got "
                        f"{describe(progress)}")

    def emit(line: str) -> None:
        history.append(line)
        if report is not None:
            report(line)

    return emit
