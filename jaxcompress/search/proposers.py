"""Proposers: which candidates a search judges next, given what was judged so far (ours).

Each function returns a proposer for :meth:`jaxcompress.search.loop.Search.run`; a proposer is
a generator that yields proposals, reads each one's trial and returns an
:class:`~jaxcompress.search.loop.Outcome`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from jaxcompress.search.candidates import Candidate
from jaxcompress.search.judges import proof
from jaxcompress.search.loop import Outcome, Search, Trial
from jaxcompress.stopping import Stopped

__all__ = ["figure", "grid", "line", "narrowing", "per_set_orders", "raise_until_proven",
           "uniform_orders"]


def figure(search: Search, t: Trial) -> str:
    """A trial's figure as the progress lines say it (before and after polishing)."""
    before = t.figure if t.before is None else t.before
    polished = "" if t.before is None else f" -> polished {t.figure:.4g}"
    return f"{search.judge.name} {before:.4g}{polished}"


def line(search: Search, t: Trial) -> str:
    """A trial's widths, size, figure and seconds, as the progress lines say them."""
    return (f"widths {list(t.candidate.widths)}, {t.num_params:,} params, {figure(search, t)} "
            f"({t.seconds:.1f} s)")


def uniform_orders(build: Callable[[int], Candidate], orders: Sequence[int], *,
                   describe: Callable[[Trial], str], advice: Callable[[list], str],
                   label: str = "order", last: int | None = None,
                   full: Callable[[Trial], bool] | None = None,
                   note: Callable[[Trial], str] | None = None):
    """``build(k)`` for ``k`` in ``orders`` until one meets ``eps`` (the error stalling or the
    orders running out stop it). Each trial reported as ``"{label} k = {k}: {describe(trial)}"``
    with the orders left (at most ``last - k``; none once ``full(trial)``: its candidate keeps
    every neuron, and larger orders are equal). Stopped, it chooses the best figure and reports
    ``note(best)`` after the reason (``None``: no line when the orders ran out)."""
    def propose(search: Search):
        trials: list[Trial] = []
        clock = search.clock
        try:
            for k in orders:
                trial = yield functools.partial(build, k)
                trials.append(trial)
                done = full is not None and full(trial)
                left = 0 if trial.ok or done else (len(orders) - len(trials) if last is None
                                                   else max(last - k, 1))
                search.emit(f"{label} k = {k}: {describe(trial)}" + clock.eta(left, "orders"))
                if trial.ok:
                    return search.met(trial)
                if done:
                    break
                if len(trials) < len(orders):   # after the last, the advice says more
                    search.stall(trials)
            raise Stopped("out_of_orders", advice(trials))
        except Stopped as why:   # out of orders, the advice is the reason: no line but a note
            return search.stopped(why, note, trials,
                                  quiet=note is None and why.status == "out_of_orders")
    return propose


def narrowing(start: Trial):
    """From ``start`` (which meets ``eps``), the set whose neuron saves the most parameters
    first, ``by`` neurons narrower while the figure stays within ``eps`` (``by`` starts at one,
    doubles after a success, halves after a failure; a set that failed by one neuron is tried
    after the others); it ends when no set can lose one. Cut short by the budget it chooses the
    smallest candidate that met ``eps`` so far."""
    def propose(search: Search):
        cands = search.candidates
        best = start
        space = cands.space(start.candidate)
        failed: set[int] = set()
        done: set[int] = set()     # failed by one neuron since the last success
        step = [1] * len(start.candidate.widths)
        try:
            while True:
                cand = best.candidate
                sets = [s for s, w in enumerate(cand.widths) if w > 1]
                sets.sort(key=lambda s: (s in failed, cands.num_params(  # the largest saving first
                    [w - (i == s) for i, w in enumerate(cand.widths)]), -s))
                accepted = False
                for s in sets:
                    while not accepted:
                        by = min(step[s], cand.widths[s] - 1)
                        trial = yield functools.partial(cands.narrow, cand, s, by, space)
                        if trial.ok:
                            best, accepted = trial, True
                            failed.discard(s)
                            done.clear()
                            step[s] = 2 * by
                        elif by > 1:
                            step[s] = by // 2      # too far: half the step, same set
                        else:
                            failed.add(s)          # not even one neuron: the next set
                            done.add(s)
                        verdict = ("kept" if trial.ok else "below eps"
                                   if search.judge.higher_is_better else "over eps")
                        left = _steps_left((trial if trial.ok else best).candidate.widths,
                                           failed, done)
                        search.emit(f"set {s + 1} -{by} -> widths {list(trial.candidate.widths)}"
                                    f", {trial.num_params:,} params: {figure(search, trial)} "
                                    f"{verdict} ({trial.seconds:.1f} s)"
                                    + search.clock.eta(left, "steps", about=True))
                        if not trial.ok and by == 1:
                            break
                    if accepted:
                        break
                if not accepted:
                    return search.met(best, "; no layer can lose a neuron")
        except Stopped as why:
            return search.cut_short(why, best, "width search", ": the smallest network that "
                                    f"met the target so far has widths "
                                    f"{list(best.candidate.widths)}")
    return propose


def _steps_left(widths: Sequence[int], failed: set[int], done: set[int]) -> int:
    """A guess of the width search's steps left: none for a set that failed by one neuron
    since the last success (all of them: the search is over), one for a set that failed
    before, about ``log2`` of its width for another."""
    live = [s for s, w in enumerate(widths) if w > 1]
    if all(s in done for s in live):
        return 0
    return sum(0 if s in done else 1 if s in failed else (widths[s] - 1).bit_length() + 1
               for s in live)


def per_set_orders(build: Callable[[dict[int, int]], Candidate], n_sets: int, k_u: int,
                   start: Trial):
    """Per-set orders ``<= k_u`` (``build({set: order})``: that set alone at that order, the
    others whole; ``start``: every set at ``k_u``, which meets ``eps``): each set alone within
    ``eps / L`` (deepest first), raised (the largest single-set figure first) until the whole
    network meets ``eps``, then lowered (deepest first) while it still does. Chooses the orders'
    trial that met ``eps`` last."""
    def propose(search: Search):
        eps, met = search.eps, start
        orders = [k_u] * n_sets
        try:
            single = [0.0] * n_sets
            for s in range(n_sets - 1, -1, -1):     # each set alone within eps / L
                for k in range(k_u + 1):
                    single[s] = (yield functools.partial(build, {s: k})).figure
                    orders[s] = k
                    if single[s] <= eps / n_sets or k == k_u:
                        break
                search.emit(f"layer {s + 1} alone: k = {orders[s]} (measured {single[s]:.3e}, "
                            f"budget {eps / n_sets:.3e})")
            total = yield functools.partial(build, dict(enumerate(orders)))
            while not total.ok:
                s = max((i for i in range(n_sets) if orders[i] < k_u), key=single.__getitem__)
                orders[s] += 1
                single[s] = (yield functools.partial(build, {s: orders[s]})).figure
                total = yield functools.partial(build, dict(enumerate(orders)))
                search.emit(f"whole network above eps: layer {s + 1} -> k = {orders[s]}, "
                            f"measured {total.figure:.3e}")
            met = total
            for s in range(n_sets - 1, -1, -1):     # lowered while the network meets eps
                while orders[s] > 0:
                    trial = yield functools.partial(build, {**dict(enumerate(orders)),
                                                            s: orders[s] - 1})
                    if not trial.ok:
                        break
                    orders[s] -= 1
                    met = trial
                    search.emit(f"lower layer {s + 1} -> k = {orders[s]}, measured "
                                f"{trial.figure:.3e}")
        except Stopped as why:
            return search.cut_short(why, met, "per-layer search", " at orders "
                                    f"{list(met.candidate.orders)} (they meet eps)")
        return search.met(met)
    return propose


def raise_until_proven(build: Callable[[list[int]], Candidate], orders: list[int], *,
                       can_raise: Callable[[int, int], bool],
                       shares: Callable[[Trial], list[float]], refine: bool, max_order: int):
    """Per-set ``orders`` raised, the set of the largest of ``shares(trial)`` first, while the
    judge's bound exceeds ``eps`` (``can_raise(set, order)``); with ``refine`` each set's order
    then bisected, deepest first, to the smallest whose bound meets ``eps``."""
    def propose(search: Search):
        eps = search.eps
        trials: list[Trial] = []

        def bound(t: Trial) -> str:
            return f"a posteriori bound {t.figure:.3g} ({proof(t.evidence)[1]})"
        try:
            trial = yield functools.partial(build, list(orders))
            trials.append(trial)
            while not trial.ok:
                raisable = [s for s in range(len(orders)) if can_raise(s, orders[s])]
                if not raisable:
                    raise Stopped("out_of_orders", f"the {bound(trial)} exceeds eps = {eps:g} at "
                                  f"orders {orders} and no order can be raised")
                search.stall(trials)
                s = max(raisable, key=lambda i: shares(trial)[i])
                orders[s] += 1
                search.emit(f"{bound(trial)} > eps: raise layer {s + 1} to k = {orders[s]}"
                            + search.clock.eta(sum(max_order - k for k in orders) + 1,
                                               "raises"))
                trial = yield functools.partial(build, list(orders))
                trials.append(trial)
            search.emit(f"{bound(trial)} <= eps at {orders}")
        except Stopped as why:
            return search.stopped(why, lambda best: (
                f"; target not met: the best a posteriori bound is {best.figure:.3g} at orders "
                f"{list(best.candidate.orders)}"), trials)
        best = trial
        try:    # bisection per set, deepest first; only proven orders are accepted
            for s in range(len(orders) - 1, -1, -1) if refine else ():
                lo, hi = -1, orders[s]
                while hi - lo > 1:
                    k = (lo + hi) // 2
                    trial = yield functools.partial(build, [*orders[:s], k, *orders[s + 1:]])
                    if trial.ok:
                        hi = orders[s] = k
                        best = trial
                        search.emit(f"refine: layer {s + 1} -> k = {k}, {bound(trial)}")
                    else:
                        lo = k
        except Stopped as why:
            return search.cut_short(why, best, "refinement", f" at orders {orders} (certified)")
        return search.met(best)
    return propose


def grid(proposals: Sequence[tuple[Callable[[], Candidate], str, object]]):
    """Every ``(proposal, description, family)`` in turn (``family``: the factory of a
    candidate by order, whose larger orders are skipped once its figures stalled, else
    ``None``). Chooses nothing: the frontier is the result."""
    def propose(search: Search):
        clock, n = search.clock, len(proposals)
        by_family: dict[int, list[Trial]] = {}
        stalled: set[int] = set()
        status, reason = "complete", "every candidate was measured"
        for i, (proposal, what, family) in enumerate(proposals, start=1):
            if id(family) in stalled:
                continue
            try:
                trial = yield proposal
            except Stopped as why:
                status, reason = why.status, why.reason
                search.emit(f"stopped ({why.status}): {why.reason}; {n - i + 1} candidates not "
                            "measured")
                break
            search.emit(f"[{i}/{n}] {what}: {line(search, trial)}"
                        + clock.eta(n - i, "candidates"))
            if family is None:
                continue
            by_family.setdefault(id(family), []).append(trial)
            try:
                search.stall(by_family[id(family)])
            except Stopped as why:
                stalled.add(id(family))
                skipped = sum(1 for _, _, f in proposals[i:] if f is family)
                if skipped:
                    status, reason = "stalled", why.reason
                    name = getattr(family, "__name__", type(family).__name__)
                    search.emit(f"stalled: {why.reason}; {name}'s {skipped} larger "
                                f"order{'s' if skipped > 1 else ''} skipped")
        return Outcome(None, clock.stop(status, reason, met=None))
    return propose
