r"""The candidates of a search: built, padded, masked and compiled in one place (ours).

A candidate's arithmetic takes milliseconds and compiling its program seconds, so a search must
not compile a program per candidate. :class:`Candidates` is the one object that knows how; the
proposers and judges only ask it for candidates (``docs/methods.md`` measures what it saves):

* **uniform orders** (:meth:`Candidates.uniform`): order :math:`k` of a family that runs masked
  (:func:`jaxcompress.planning.masked_runs`) runs in the program of its bucket :math:`K`, the
  next multiple of :data:`ORDER_BUCKET`: the features of order :math:`K` with the rows of
  degree :math:`> k` zeroed, the first :math:`\min(D_k, d)` pivots re-weighted, the other
  neurons dead (zero reading rows, which the trim drops);
* **per-set orders** of derivative matching (:meth:`Candidates.orders`): the teacher's features
  once, at the largest order needed, truncated per set (backward order: a set's features do not
  depend on the others' orders);
* **narrower sets** (:meth:`Candidates.narrow`): one set of the padded candidate narrowed by the
  driver's masked step (``run(..., narrow=)``), one program per set;
* **buckets of widths** (:meth:`Candidates.space`): a candidate is measured and polished padded
  to its widths rounded up to powers of two, at least :data:`MIN_BUCKET` (the padding zero in
  its producers and readers: the same function), polished with a mask that keeps it zero.

The masked candidates equal the exact ones to rounding; a search whose decisions compare
measurements with ``eps`` can take another path from such differences.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.compression import _checked, compress_network, compressed_like
from jaxcompress.driver import features, masked_jit, masked_runs, run, truncate
from jaxcompress.features import DerivativeFeatures
from jaxcompress.graph import Network
from jaxcompress.graph.plan import Plan
from jaxcompress.layer import CompressInfo
from jaxcompress.measure import error_points, plan_estimate, psnr_db
from jaxcompress.methods import BestOf, Method, derivative_matching
from jaxcompress.mlp import leaf_count
from jaxcompress.networks import network_placement
from jaxcompress.planning import masked_rows, resolve_widths
from jaxcompress.polishing import polish_leaves
from jaxcompress.select import Selector
from jaxcompress.taylor import num_monomials

__all__ = ["MIN_BUCKET", "ORDER_BUCKET", "Candidate", "Candidates"]

#: The narrowest padded width of a candidate: the low orders' candidates (``D_k <= 15`` with two
#: inputs: ``k <= 4``) share one program for each measurement and polishing loop.
MIN_BUCKET = 16
#: Orders per compiled program of :meth:`Candidates.uniform`.
ORDER_BUCKET = 4


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A candidate network: its leaves at its own widths (``None`` until built, for a
    candidate of per-set orders measured at the teacher's shapes), its record (``kept``: indices
    into the teacher's neurons), how it was made, ``measured``: the same function padded (to
    its bucket ``space``, or to the teacher's shapes) as the judges measure it, and the
    ``stage`` of the search that proposed it."""

    leaves: list | None
    widths: tuple[int, ...]
    info: CompressInfo | None
    method: Method | None
    order: int | None = None
    orders: tuple[int, ...] | None = None
    measured: list | None = None
    space: Space | None = None
    stage: str = "candidate"

    @property
    def figure_leaves(self) -> list:
        """The leaves a judge measures (``measured``, else ``leaves``)."""
        return self.leaves if self.measured is None else self.measured


class Space:
    """Candidates padded to ``widths`` (their neurons first, zeros after) with masks: many
    widths, one shape."""

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


def bucket(widths: Sequence[int], full: Sequence[int]) -> tuple[int, ...]:
    """Each width rounded up to a power of two, at least :data:`MIN_BUCKET`, at most the
    teacher's: candidates of nearby widths share one compilation."""
    return tuple(min(f, max(MIN_BUCKET, 1 << max(0, w - 1).bit_length()))
                 for w, f in zip(widths, full, strict=True))


class Candidates:
    """The candidates of one teacher ``net`` (the user's object ``obj``) on ``domain``."""

    def __init__(self, net: Network, domain, obj: Any = None, *, where: str = "search"):
        self.net, self.domain, self.obj, self.where = net, domain, obj, where
        self.plan = net.plan()
        # strongly typed, as the candidates are: one program of a metric serves both
        self.teacher = [jax.device_put(np.asarray(v)) if getattr(v, "weak_type", False) else v
                        for v in net.leaves]
        self.widths = tuple(s.width for s in self.plan.sets)
        self.placed = network_placement(net) is not None
        self.stack = any(s.parts for s in self.plan.sets)
        self._methods: dict = {}
        self.k_feat, self._feats = -1, None
        self._runs: dict = {}

    # -- buckets ----------------------------------------------------------------------------

    def space(self, cand: Candidate) -> Space:
        """The padded widths ``cand`` is polished and measured at."""
        return Space(self.plan, bucket(cand.widths, self.widths))

    def padded(self, cand: Candidate) -> Candidate:
        """``cand`` with ``measured`` its leaves padded to its bucket."""
        space = self.space(cand)
        return dataclasses.replace(cand, measured=space.pad(cand.leaves)[0], space=space)

    def function(self, leaves) -> Callable[[jax.Array], jax.Array]:
        """The network at ``leaves`` as a batched function ``f(x)`` (jitted)."""
        return functools.partial(_apply, list(leaves), plan=self.plan)

    def on_points(self, teacher, leaves, metric: str, n: int) -> jax.Array:
        r"""``"rel_l2"`` (:math:`\|F - \tilde F\|_2 / \|F\|_2`) or ``"psnr"`` of ``leaves``
        against ``teacher`` on ``n`` fixed Sobol points of the domain (one program)."""
        return _on_points(teacher, list(leaves), self.domain, plan=self.plan, n=n, metric=metric)

    def result(self, cand: Candidate) -> Any:
        """``cand`` as the kind of network the teacher is."""
        return compressed_like(self.obj, self.net, list(cand.leaves), cand.info, self.domain)

    # -- uniform orders of a family ---------------------------------------------------------

    def _checked(self, family, k: int):
        key = (id(family), k)
        if key not in self._methods:
            self._methods[key] = (family, _checked(self.net, family(k), self.domain,
                                                   self.where, None))
        return self._methods[key][1]

    def masks_orders(self, family, max_order: int) -> bool:
        """Whether ``family``'s orders run masked (one program per bucket of orders)."""
        method, _ = self._checked(family, _order_bucket(0, max_order))
        return masked_runs(method) and not self.placed and not self.stack

    def uniform_leaves(self, family, k: int, max_order: int) -> tuple[list, CompressInfo]:
        """The teacher compressed by ``family(k)`` (untrimmed), in the program of ``k``'s
        bucket when the family runs masked."""
        if not self.masks_orders(family, max_order):
            return self.exact(family, k)
        method, domain = self._checked(family, _order_bucket(k, max_order))
        own, _ = self._checked(family, k)
        # the orders from the host (jnp.full would compile a program of its own)
        small, info = masked_jit(self.net.leaves, method, domain,
                                 np.full(len(self.plan.sets), k, np.int32), plan=self.plan)
        sizes = list(self.plan.sizes)
        first = own.methods[0] if isinstance(own, BestOf) else own
        d_ks = first.features.num_features(sizes, domain)
        layers = tuple(dataclasses.replace(li, width_out=w, order=k, num_features=dk)
                       for li, w, dk in zip(info.layers, resolve_widths(first, sizes, domain),
                                            d_ks, strict=True))
        return small, dataclasses.replace(info, layers=layers, method=own.describe())

    def exact(self, family, k: int) -> tuple[list, CompressInfo]:
        """The teacher compressed by ``family(k)`` at its own widths (its own program)."""
        return compress_network(self.net, family(k), self.domain, where=self.where)

    def uniform(self, family, k: int | None, max_order: int = 0) -> Candidate:
        """``family(k)``'s candidate trimmed, measured padded to its bucket (``k`` ``None``:
        ``family`` is a method value)."""
        if k is None:
            small, info = compress_network(self.net, family, self.domain, where=self.where)
            return self.padded(self.trimmed(small, info, family, None))
        small, info = self.uniform_leaves(family, k, max_order)
        return self.padded(self.trimmed(small, info, family(k), k))

    def trimmed(self, leaves, info: CompressInfo, method, order) -> Candidate:
        """The candidate of ``leaves`` with its rank-deficient neurons dropped."""
        widths = self.plan.set_widths(leaves)
        leaves, masks = self.plan.at_widths(widths).trim(leaves)
        layers = tuple(dataclasses.replace(
            li, kept=np.asarray(li.kept)[m], width_out=int(m.sum()),
            rank=np.minimum(np.asarray(li.rank), int(m.sum())).astype(np.int32))
            for li, m in zip(info.layers, masks, strict=True))
        return Candidate(leaves, tuple(int(m.sum()) for m in masks),
                         dataclasses.replace(info, layers=layers), method, order)

    # -- per-set orders of derivative matching ----------------------------------------------

    def _features(self, k: int):
        """The teacher's derivative features at order ``>= k`` and each row's tensor."""
        if k > self.k_feat:
            self.k_feat = max(k, self.k_feat + 4, 4)  # few recompilations as the order grows
            got = _features_jit(self.net.leaves, self.domain,
                                DerivativeFeatures(order=self.k_feat), plan=self.plan)
            split = {i: _split(v) for i, v in got.items()}
            self._feats = ({i: f for i, (f, _) in split.items()},
                           tuple(ids for _, (_, ids) in sorted(split.items())))
        return self._feats

    def _run(self, selector: Selector, orders: dict[int, int], padded: bool):
        key = (selector, tuple(sorted(orders.items())), padded)
        if key not in self._runs:   # the searches revisit candidates
            feats, ids = self._features(max(orders.values()))
            full = tuple(orders.get(i, 0) for i in range(len(self.plan.sets)))
            method = derivative_matching(full, selector=selector)
            self._runs[key] = _candidate_jit(self.net.leaves, method, self.domain, feats,
                                             plan=self.plan, ids=ids,
                                             only=tuple(sorted(orders)), padded=padded)
        return self._runs[key]

    def orders(self, selector: Selector, orders: dict[int, int] | Sequence[int], *,
               exact: bool = False) -> Candidate:
        """Derivative matching at per-set ``orders`` (0-based position -> order; a sequence:
        every set), the other sets whole. ``exact``: the candidate at its own widths (static
        widths ``min(D_k, d_l)``, untrimmed); else ``measured`` alone, at the teacher's shapes,
        with a prefix-stable selector in one program for every candidate (the features of order
        ``k`` are those of the cached order ``K`` with the rows of degree ``> k`` zeroed, the
        pivots past ``D_k`` without weight: the same network, to rounding)."""
        if not isinstance(orders, dict):
            orders = dict(enumerate(orders))
        full = tuple(orders.get(i) for i in range(len(self.plan.sets)))
        if exact:
            small, info = self._run(selector, orders, False)
            return Candidate(small, self.plan.set_widths(small), info, None, orders=full)
        if not selector.prefix_stable:
            measured = self._run(selector, orders, True)[0]
        else:
            feats, ids = self._features(max(orders.values()))
            ks = np.asarray([orders.get(i, self.k_feat) for i in range(len(self.plan.sets))],
                            np.int32)   # from the host: jnp.asarray compiles a program
            measured = _masked_orders_jit(self.net.leaves, ks, self.domain, feats,
                                          plan=self.plan, ids=ids, only=tuple(sorted(orders)),
                                          order=self.k_feat, selector=selector)
        return Candidate(None, self.widths, None, None, orders=full, measured=measured)

    def order_widths(self, orders: Sequence[int | None]) -> tuple[int, ...]:
        """The widths of derivative matching at per-set ``orders`` (``None``: kept whole)."""
        method = derivative_matching(tuple(0 if k is None else k for k in orders))
        return tuple(d if k is None else w for k, w, d in zip(
            orders, resolve_widths(method, self.plan.sizes, self.domain), self.widths,
            strict=True))

    def num_params(self, widths: Sequence[int]) -> int:
        """The parameter count of a network of ``widths`` (the teacher narrowed to them)."""
        masks = [np.arange(W) < w for W, w in zip(self.widths, widths, strict=True)]
        return leaf_count(self.plan.restrict([np.asarray(v) for v in self.teacher], masks))

    def estimate(self, leaves) -> jax.Array:
        """``max |F - F~|`` on the error estimate's fixed Sobol points, as the driver records it
        (one program)."""
        return _estimate(self.teacher, list(leaves), self.domain, plan=self.plan)

    # -- narrower sets and polishing --------------------------------------------------------

    def narrow(self, cand: Candidate, s: int, by: int, space: Space | None = None
               ) -> Candidate:
        """``cand`` with set ``s`` ``by`` neurons narrower: compressed by its own method, only
        that set (kept neurons and record composed with ``cand``'s). With ``space`` and a
        method that allows it (one method at its default widths, a greedy-prefix selector,
        derivative or collocation features, one device, no stack), padded and masked: one
        program for every step on a set."""
        widths = list(cand.widths)
        widths[s] -= by
        layers = list(cand.info.layers)
        m = cand.method
        if space is None or not (isinstance(m, Method) and m.widths is None and not self.placed
                                 and m.selector.greedy_prefix and not self.stack
                                 and m.features.name in ("taylor", "collocation")):
            small, step = _shrink_step(cand.leaves, m.with_widths(widths), self.domain,
                                       plan=self.plan.at_widths(cand.widths), only=(s,))
        else:
            padded, _ = space.pad(cand.leaves)
            small, step = _narrow_step(padded, m, self.domain,
                                       np.asarray([cand.widths[s], widths[s]], np.int32),
                                       plan=space.plan, only=(s,))
            # the other sets' padding is trimmed below: their records padded alike (pivots
            # past the live neurons pick padding, -1, which the trim drops)
            layers = [dataclasses.replace(li, kept=np.concatenate(
                [np.asarray(li.kept), np.full(w - len(li.kept), -1, np.asarray(li.kept).dtype)]))
                for li, w in zip(layers, space.widths, strict=True)]
        kept = np.asarray(layers[s].kept)[np.asarray(step.layers[s].kept)]
        layers[s] = dataclasses.replace(step.layers[s], kept=kept)
        info = dataclasses.replace(cand.info, layers=tuple(layers))
        trimmed = self.trimmed(small, info, m, cand.order)
        return trimmed if space is None else dataclasses.replace(
            trimmed, measured=space.pad(trimmed.leaves)[0], space=space, stage="shrink")

    def polish(self, cand: Candidate, settings, steps: int) -> Candidate:
        """``cand`` polished towards the teacher for ``steps`` steps, padded to its ``space``
        and masked (one compilation for every candidate of the space)."""
        space = cand.space
        padded, mask = space.pad(cand.leaves)
        out, _ = polish_leaves(self.plan, padded, self.plan, self.teacher, domain=self.domain,
                               mask=mask, steps=steps, points=settings.points,
                               optimizer=settings.optimizer, dtype=settings.dtype)
        return dataclasses.replace(cand, leaves=space.unpad(out, cand.widths), measured=out)


def _order_bucket(k: int, max_order: int) -> int:
    """The order of the program that computes order ``k``."""
    return max(k, min(max_order, ORDER_BUCKET * max(1, -(-k // ORDER_BUCKET))))


@functools.partial(jax.jit, static_argnames=("plan",))
def _apply(leaves, x, *, plan: Plan):
    return plan.apply(leaves, x)


@functools.partial(jax.jit, static_argnames=("plan", "n", "metric"))
def _on_points(teacher, leaves, domain, *, plan: Plan, n: int, metric: str):
    x = error_points(domain, n, plan.x.dtype)
    f, g = plan.apply(teacher, x), plan.apply(leaves, x)
    if metric == "psnr":
        return psnr_db(f, g)
    return jnp.sqrt(jnp.sum((f - g) * (f - g)) / jnp.sum(f * f))


@functools.partial(FastOnSmallCPU, static_argnames=("plan",))
def _estimate(teacher, leaves, domain, *, plan: Plan):
    return plan_estimate(plan, teacher, leaves, domain, None)


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
def _masked_orders_jit(leaves, ks, domain, feats, *, plan, ids, only, order, selector):
    """A candidate at traced per-set orders ``ks``, at the teacher's shapes."""
    cached = {}
    for i in only:
        def masked(f, ids_i, k=ks[i]):
            ids_i = None if ids_i is None else np.asarray(ids_i)
            return masked_rows(DerivativeFeatures(order), f, ids_i, k), ids_i
        cached[i] = _per_part(feats[i], ids[i], masked)
    widths = tuple(min(num_monomials(_first(f).coord_dim, order), d) for f, d in
                   zip((feats[i] for i in range(len(plan.sets))), plan.sizes[1:-1],
                       strict=True))
    method = derivative_matching(order, selector=selector, widths=widths)
    small, info = run(plan, method, leaves, domain, teacher_features=cached, only=only,
                      skip=False)
    return plan.expand(small, info.layers)


@functools.partial(FastOnSmallCPU, static_argnames=("plan", "ids", "only", "padded"))
def _candidate_jit(leaves, method, domain, feats, *, plan, ids, only, padded):
    """The driver on the cached features truncated to the method's orders (at the teacher's
    shapes if ``padded``)."""
    orders = method.features.orders(len(plan.sets))
    cached = {i: _per_part(feats[i], ids[i], lambda f, ids_i, k=orders[i]: truncate(
        f, None if ids_i is None else np.asarray(ids_i), k)) for i in only}
    small, info = run(plan, method, leaves, domain, teacher_features=cached, only=only)
    return (plan.expand(small, info.layers) if padded else small), info


@functools.partial(FastOnSmallCPU, static_argnames=("plan", "only"))
def _shrink_step(leaves, method, domain, *, plan: Plan, only: tuple[int, ...]):
    """The driver on a candidate (``plan`` at its widths), only the sets ``only``."""
    return run(plan, method, leaves, domain, only=only)


@functools.partial(FastOnSmallCPU, static_argnames=("plan", "only"))
def _narrow_step(leaves, method, domain, narrow, *, plan: Plan, only: tuple[int, ...]):
    """:func:`_shrink_step` masked: the set ``only`` of a padded candidate narrowed from
    ``narrow[0]`` to ``narrow[1]`` neurons (traced)."""
    return run(plan, method, leaves, domain, only=only, skip=False, narrow=narrow)
