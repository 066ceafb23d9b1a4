r"""Batched branch and bound over input boxes: the anytime bracket of
:func:`~jaxcompress.verification.verify`.

.. math::
   \underbrace{\max_{p \in P} \max_j |D_j(p)|}_{\texttt{lower}}
   \;\le\; \sup_{x \in \Omega} \max_j |D_j(x)| \;\le\;
   \underbrace{\max_{B \in \mathcal{B}} \mathrm{ub}(B)}_{\texttt{upper}},
   \qquad \Omega \subseteq \textstyle\bigcup \mathcal{B},

with ``ub(B)`` the Taylor-model bound of one box (:func:`~jaxcompress.verification.program.
box_bound`) and ``P`` the points evaluated so far: the boxes' centres (projected onto the
domain) and the ends of projected gradient ascents on ``|D|`` started from the best of them.

The boxes live in a host-side queue of arrays (NumPy, grown by doubling). Every step takes the
boxes with the largest bounds (up to half a batch), bisects each along its widest axis (several
times when few boxes are live, so a step always bounds a full batch), bounds the children with
one compiled call, vmapped over a fixed batch of boxes (padding with copies: one compiled
program per program structure and batch size, whatever the step), and keeps a child only if
its bound exceeds the **pruning level**

.. math::
   \tau = \max\Big(\frac{\texttt{lower}}{1 - \texttt{tol}},\ \varepsilon,\ \texttt{atol}\Big)

(a box below it can no longer keep the bracket from converging, or the sup from being at most
``eps``). A child's bound is capped by its parent's (both bound the child). The search stops
when ``upper - lower <= tol * upper``, ``upper <= eps``, ``lower > eps`` or at ``max_seconds``
(alpha-beta-CROWN's branch and bound on input domains, for the difference of two programs as in
ReluDiff / NeuroDiff / VeryDiff; the Taylor-model bounds, the batching and the pruning level are
ours).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxcompress.compiling import FastFirst
from jaxcompress.verification import program as prog
from jaxcompress.verification import rules
from jaxcompress.verification import taylor as tm
from jaxcompress.verification.proof import Proof
from jaxcompress.verification.regions import _SLACK, Region

__all__ = ["BoxQueue", "Compiled", "ProofTree", "SearchResult", "box_mesh", "compiled", "search"]

#: Points sampled uniformly before the first box is bounded (a first lower bound).
INITIAL_SAMPLES = 512
#: Points of one call of the point program (samples and ascent ends are evaluated in chunks).
POINT_BATCH = 128
#: Projected gradient-ascent steps of a local search, and how many start together.
ASCENT_STEPS = 40
ASCENT_STARTS = 16
#: Local searches continued from the best points when the search stops.
FINAL_CLIMBS = 4
#: A child whose bound is above this fraction of its parent's (and more than twice the pruning
#: level) made no progress: when it is split in turn it is bisected ``d`` times (every axis
#: halved once; at most a batch of children) instead of once, so the levels of boxes too large
#: for a useful bound are crossed without bounding every one of them.
STALL = 0.9
#: Seconds between two local searches while the search runs (doubled after each, up to 5 s;
#: one is started only when a batch of boxes has found a better point).
CLIMB_INTERVAL = 0.2


def _grow(owner, names: tuple[str, ...], size: int, used: int) -> None:
    """Double the arrays ``names`` of ``owner`` (at least to ``size`` rows), keeping ``used``."""
    cap = max(2 * len(getattr(owner, names[0])), size)
    for name in names:
        old = getattr(owner, name)
        new = np.empty((cap,) + old.shape[1:], old.dtype)
        new[:used] = old[:used]
        setattr(owner, name, new)


class BoxQueue:
    """Live boxes as arrays: centres ``(n, d)``, half-widths ``(n, d)``, bounds ``(n,)``,
    their nodes in the :class:`ProofTree` ``(n,)`` and how many bisections each gets when it
    is split ``(n,)`` (:data:`STALL`)."""

    _ARRAYS = ("c", "h", "ub", "ids", "splits")

    def __init__(self, dim: int, capacity: int = 4096):
        self.c = np.empty((capacity, dim))
        self.h = np.empty((capacity, dim))
        self.ub = np.empty(capacity)
        self.ids = np.zeros(capacity, np.int64)
        self.splits = np.ones(capacity, np.int64)
        self.n = 0

    def push(self, c: np.ndarray, h: np.ndarray, ub: np.ndarray,
             ids: np.ndarray | None = None, splits: np.ndarray | None = None) -> None:
        k = len(ub)
        if self.n + k > len(self.ub):
            _grow(self, self._ARRAYS, self.n + k, self.n)
        self.c[self.n:self.n + k] = c
        self.h[self.n:self.n + k] = h
        self.ub[self.n:self.n + k] = ub
        self.ids[self.n:self.n + k] = -1 if ids is None else ids
        self.splits[self.n:self.n + k] = 1 if splits is None else splits
        self.n += k

    def pop_top(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Remove and return the ``k`` boxes with the largest bounds: ``(c, h, ub)``."""
        return self.pop_top_ids(k)[:3]

    def pop_top_ids(self, k: int) -> tuple[np.ndarray, ...]:
        """:meth:`pop_top` with the boxes' tree nodes and bisection counts: ``(c, h, ub, ids,
        splits)``, largest bound first."""
        n = self.n
        k = min(k, n)
        if k == n:
            idx = np.arange(n)
        else:
            idx = np.argpartition(-self.ub[:n], k - 1)[:k]
        idx = idx[np.argsort(-self.ub[idx], kind="stable")]
        out = tuple(getattr(self, name)[idx].copy() for name in self._ARRAYS)
        new_n = n - k
        holes = np.sort(idx[idx < new_n])
        taken = np.zeros(k, bool)
        tail = idx[idx >= new_n] - new_n
        taken[tail] = True
        movers = new_n + np.nonzero(~taken)[0]
        for name in self._ARRAYS:
            arr = getattr(self, name)
            arr[holes] = arr[movers]
        self.n = new_n
        return out

    def max(self) -> float:
        return float(np.max(self.ub[: self.n])) if self.n else -np.inf


class ProofTree:
    """Every box the search creates, as a tree: the proof that the boxes cover the domain.

    Node ``i`` is the box ``[c_i - h_i, c_i + h_i]`` (the float64 centre and half-widths as
    the search stored them, read as exact reals), made from node ``parent[i]`` by
    ``kind[i]``: :data:`ROOT` (the first box; contains the domain), :data:`SPLIT` (one half of
    a bisection of its parent, with the slack of :func:`split`: the two halves cover the parent)
    or :data:`CLIP` (the parent shrunk to the bounding box of its intersection with the domain,
    :meth:`Region.clip`). ``bound[i]`` is NaN for a node that was split or clipped further, and
    for a leaf the bound the search claims for ``max_j |D_j|`` on it: its Taylor-model bound
    (capped by its parent's), ``-inf`` for a box that misses the domain. The arrays grow by
    doubling, as :class:`BoxQueue`'s.
    """

    ROOT, SPLIT, CLIP = 0, 1, 2
    _ARRAYS = ("c", "h", "parent", "kind", "bound")

    def __init__(self, dim: int, capacity: int = 4096):
        self.c = np.empty((capacity, dim))
        self.h = np.empty((capacity, dim))
        self.parent = np.empty(capacity, np.int64)
        self.kind = np.empty(capacity, np.int8)
        self.bound = np.empty(capacity)
        self.n = 0

    def add(self, c: np.ndarray, h: np.ndarray, parent: np.ndarray, kind: int) -> np.ndarray:
        """Append nodes (NaN bounds: internal until :meth:`close` says otherwise); their ids."""
        k = len(c)
        if self.n + k > len(self.bound):
            _grow(self, self._ARRAYS, self.n + k, self.n)
        rows = slice(self.n, self.n + k)
        self.c[rows], self.h[rows], self.parent[rows] = c, h, parent
        self.kind[rows], self.bound[rows] = kind, np.nan
        self.n += k
        return np.arange(rows.start, rows.stop)

    def split(self, c: np.ndarray, h: np.ndarray, times: int, ids: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:func:`split` of the boxes of nodes ``ids``, every level recorded: the children,
        the index of each one's box among ``c`` and their nodes."""
        levels: list = []
        out = split(c, h, times, levels)
        for lc, lh, up in levels:
            ids = self.add(lc, lh, ids[up], self.SPLIT)
        return (*out, ids)

    def close(self, ids: np.ndarray, bounds: np.ndarray) -> None:
        """Make nodes leaves with these claimed bounds."""
        self.bound[ids] = bounds

    def arrays(self) -> dict[str, np.ndarray]:
        """The tree as trimmed copies: ``c``, ``h`` ``(n, d)``, ``parent``, ``kind``, ``bound``."""
        return {name: getattr(self, name)[: self.n].copy() for name in self._ARRAYS}


def split(c: np.ndarray, h: np.ndarray, times: int, levels: list | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bisect every box ``times`` times along its widest axis: ``2^times`` children each (and
    the index of each child's parent). Half-widths get a relative slack so that the children
    cover the parent in exact arithmetic although their centres are rounded. With ``levels``,
    appends ``(c, h, parent)`` of every level (``parent`` indexing the level before)."""
    parent = np.arange(len(c))
    for _ in range(times):
        rows = np.arange(len(c))
        axis = np.argmax(h, axis=1)
        half = h[rows, axis] * 0.5
        kids_c, kids_h = [], []
        for sign in (-1.0, 1.0):
            kc, kh = c.copy(), h.copy()
            kc[rows, axis] += sign * half
            kh[rows, axis] = half * (1.0 + _SLACK) + _SLACK * np.abs(kc[rows, axis]) + tm.TINY
            kids_c.append(kc)
            kids_h.append(kh)
        c, h = np.concatenate(kids_c), np.concatenate(kids_h)
        parent = np.concatenate([parent, parent])
        if levels is not None:
            levels.append((c, h, np.concatenate([rows, rows])))
    return c, h, parent


@dataclasses.dataclass(frozen=True, eq=False)
class Compiled:
    """The compiled programs of one ``(program structure, domain kind, order, batch)``:
    ``bound`` (Taylor-model bounds of a batch of boxes, and the difference at their projected
    centres), ``values`` (the difference at points) and ``ascent`` (local searches)."""

    bound: object
    values: object
    ascent: object
    batch: int
    texts: tuple


_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 8


def compiled(program: prog.Program, region: Region, order: int, batch: int, *,
             symbolic: bool = False) -> Compiled:
    """The jitted programs for ``program`` (cached by structure: a second call with networks
    of the same shapes reuses them, whatever the weights); ``symbolic``: the box bounds carry
    remainder symbols (:func:`~jaxcompress.verification.program.box_bound`)."""
    key = (program.key, region.kind, region.dim, int(order), int(batch), bool(symbolic),
           rules.overwrites())
    sizes = (int(batch), POINT_BATCH, ASCENT_STARTS)
    texts = tuple(program.batched(n)[2] for n in sizes)
    if key in _CACHE and _CACHE[key].texts == texts:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    at_batch, at_points, at_starts = (program.batched(n)[0] for n in sizes)
    project = jax.vmap(region.project, in_axes=(None, 0))

    def one_box(consts, params, c, h):
        c2, h2, empty = region.clip(params, c, h)
        ub, lb = prog.box_bound(program, order, consts, c2, h2, symbolic=symbolic)
        return jnp.where(empty, -jnp.inf, ub), lb, c2, h2, region.project(params, c2)

    def bound(consts, consts_batch, params, c, h):
        ub, lb, c2, h2, p = jax.vmap(one_box, in_axes=(None, None, 0, 0))(consts, params, c, h)
        return ub, lb, c2, h2, prog.difference(program, at_batch, consts_batch, p), p

    def values(consts_points, params, x):
        p = project(params, x)
        return prog.difference(program, at_points, consts_points, p), p

    def ascent(consts_starts, params, x0, step0):
        def objective(x):
            return prog.difference(program, at_starts, consts_starts, x)

        # rows are independent inputs: the gradient of the sum is each row's gradient
        grad = jax.grad(lambda x: jnp.sum(objective(x)))

        def body(_, state):
            x, fx, step = state
            g = grad(x)
            nrm = jnp.sqrt(jnp.sum(g * g, axis=1, keepdims=True))
            cand = project(params, x + step[:, None] * g / jnp.maximum(nrm, 1e-300))
            fc = objective(cand)
            better = fc > fx
            return (jnp.where(better[:, None], cand, x), jnp.where(better, fc, fx),
                    jnp.where(better, step * 1.5, step * 0.5))

        x0 = project(params, x0)
        x, fx, _ = jax.lax.fori_loop(0, ASCENT_STEPS, body, (x0, objective(x0), step0))
        return fx, x

    # fast compiles first, XLA's defaults once a long search has run them for a while
    out = Compiled(bound=FastFirst(bound), values=FastFirst(values), ascent=FastFirst(ascent),
                   batch=int(batch), texts=texts)
    _CACHE[key] = out
    _CACHE.move_to_end(key)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return out


@dataclasses.dataclass
class SearchResult:
    lower: float
    upper: float
    status: str
    argmax: np.ndarray
    boxes: int
    history: list
    proof: Proof | None = None


class _Lower:
    """The best point so far (its float64 value: the search's working lower bound), and the
    best points to climb from (value, point, step)."""

    def __init__(self, dim: int):
        self.value = 0.0
        self.point = np.zeros(dim)
        self.pool: list[tuple[float, np.ndarray, float]] = []

    def offer(self, values: np.ndarray, points: np.ndarray, scales: np.ndarray) -> bool:
        values = np.where(np.isfinite(values), values, 0.0)
        i = int(np.argmax(values))
        improved = bool(values[i] > self.value)
        if improved:
            self.value, self.point = float(values[i]), points[i].copy()
        top = np.argsort(-values)[:ASCENT_STARTS]
        self.pool.extend((float(values[j]), points[j].copy(), float(scales[j])) for j in top)
        self.pool.sort(key=lambda e: -e[0])
        del self.pool[4 * ASCENT_STARTS:]
        return improved


def _to_device(x: np.ndarray) -> jax.Array:
    """A NumPy array on the default device as it is (``jnp.asarray`` would compile a program
    for each new shape)."""
    return jax.device_put(x)


def box_mesh(devices) -> Mesh | None:
    """The mesh the batches of boxes are sharded over: ``devices`` (a sequence of devices or a
    :class:`jax.sharding.Mesh`, whose devices are used along one axis), or None for one
    device."""
    if devices is None:
        return None
    devs = list(np.asarray(devices.devices).reshape(-1) if isinstance(devices, Mesh)
                else devices)
    return Mesh(np.array(devs), ("boxes",)) if len(devs) > 1 else None


class _Runner:
    """Calls of the compiled programs on fixed-size batches (padding with copies). With a
    ``mesh``, a batch of boxes is split over its devices along the batch axis (the weights and
    the domain replicated): the same per-box arithmetic, each device a share of the boxes."""

    def __init__(self, fns: Compiled, program: prog.Program, params, mesh: Mesh | None = None):
        self.fns, self.params = fns, params
        self.rows = None if mesh is None else NamedSharding(mesh, PartitionSpec("boxes"))
        everywhere = None if mesh is None else NamedSharding(mesh, PartitionSpec())

        def arrays(cs, sharding=None):
            return tuple(tuple(jax.device_put(c, sharding) for c in group) for group in cs)

        self.box_params = arrays([params], everywhere)[0]
        self.consts = arrays(program.consts, everywhere)
        self.at_batch = arrays(program.batched(fns.batch)[1], everywhere)
        self.at_points = arrays(program.batched(POINT_BATCH)[1])
        self.at_starts = arrays(program.batched(ASCENT_STARTS)[1])

    @staticmethod
    def _pad(x: np.ndarray, size: int) -> np.ndarray:
        if len(x) == size:
            return x
        return np.concatenate([x, np.repeat(x[:1], size - len(x), axis=0)])

    def bound(self, c: np.ndarray, h: np.ndarray):
        m, b = len(c), self.fns.batch
        c, h = (jax.device_put(self._pad(v, b), self.rows) for v in (c, h))
        outs = self.fns.bound(self.consts, self.at_batch, self.box_params, c, h)
        return [np.asarray(v)[:m] for v in outs]

    def values(self, x: np.ndarray):
        vals, pts = [], []
        for i in range(0, len(x), POINT_BATCH):
            chunk = x[i:i + POINT_BATCH]
            v, p = self.fns.values(self.at_points, self.params,
                                   _to_device(self._pad(chunk, POINT_BATCH)))
            vals.append(np.asarray(v)[: len(chunk)])
            pts.append(np.asarray(p)[: len(chunk)])
        return np.concatenate(vals), np.concatenate(pts)

    def rigorous(self, points: np.ndarray) -> np.ndarray:
        """Proven lower bounds on ``max_j |D_j|`` at points of the domain (degenerate boxes)."""
        out = []
        for i in range(0, len(points), self.fns.batch):
            chunk = points[i:i + self.fns.batch]
            _, lb, *_ = self.bound(chunk, np.zeros_like(chunk))
            out.append(lb)
        return np.concatenate(out)

    def climb(self, lower: _Lower) -> None:
        """Projected gradient ascent from the best points so far."""
        starts = lower.pool[:ASCENT_STARTS]
        if not starts:
            return
        x0 = self._pad(np.stack([s[1] for s in starts]), ASCENT_STARTS)
        step = self._pad(np.array([s[2] for s in starts]), ASCENT_STARTS)
        vals, ends = self.fns.ascent(self.at_starts, self.params, _to_device(x0),
                                     _to_device(step))
        lower.pool = []
        lower.offer(np.asarray(vals)[: len(starts)], np.asarray(ends)[: len(starts)],
                    step[: len(starts)] * 0.25)


def _take(queue: BoxQueue, tree: ProofTree, batch: int, level: float):
    """The next batch of children: the boxes with the largest bounds (up to half a batch; as
    many as fill it once split), those the pruning ``level`` has overtaken closed as leaves,
    each split by its own count (every axis for a stalled box), all of them more times while
    that still fits the batch: ``((c, h, parent, nodes, parents' bounds), largest bound
    closed)``, None in place of the children when every box taken was closed."""
    pc, ph, pub, pids, psplit = queue.pop_top_ids(max(1, min(queue.n, batch // 2)))
    keep = pub > level
    over = -np.inf
    if not keep.all():
        over = float(np.max(pub[~keep]))
        tree.close(pids[~keep], pub[~keep])
        pc, ph, pub, pids, psplit = (v[keep] for v in (pc, ph, pub, pids, psplit))
    if len(pub) == 0:
        return None, over
    fits = np.cumsum(2 ** psplit) <= batch
    fits[0] = True
    if not fits.all():  # the rest back in the queue
        rest = ~fits
        queue.push(pc[rest], ph[rest], pub[rest], pids[rest], psplit[rest])
        pc, ph, pub, pids, psplit = (v[fits] for v in (pc, ph, pub, pids, psplit))
    extra = 0
    while np.sum(2 ** (psplit + extra + 1)) <= batch:
        extra += 1
    groups = [tree.split(pc[g], ph[g], int(t) + extra, pids[g]) + (np.flatnonzero(g),)
              for t in np.unique(psplit) for g in [psplit == t]]
    parent = np.concatenate([g[4][g[2]] for g in groups])
    return (np.concatenate([g[0] for g in groups]), np.concatenate([g[1] for g in groups]),
            parent, np.concatenate([g[3] for g in groups]), pub), over


def search(program: prog.Program, region: Region, fns: Compiled, *, eps, tol: float,
           atol: float, max_seconds: float, progress: bool, start: float,
           mesh: Mesh | None = None) -> SearchResult:
    """Run the branch and bound (see the module docstring) until a stopping rule holds (the
    batches of boxes sharded over ``mesh``'s devices when given: :func:`box_mesh`)."""
    params = tuple(_to_device(np.asarray(p)) for p in region.params())
    run = _Runner(fns, program, params, mesh)
    batch = fns.batch
    lower = _Lower(region.dim)

    def sample_first():
        # a first lower bound: uniform samples, then a local search from the best of them
        samples = np.concatenate([region.center[None], region.sample(INITIAL_SAMPLES - 1)])
        vals, pts = run.values(samples)
        _refuse_undefined(vals, pts)
        lower.offer(vals, pts, np.full(len(vals), 0.1 * region.radius))
        run.climb(lower)

    queue = BoxQueue(region.dim)
    tree = ProofTree(region.dim)
    wide_split = max(1, min(region.dim, int(math.log2(batch))))
    c0, h0 = region.root()
    root = tree.add(c0[None], h0[None], np.array([-1]), ProofTree.ROOT)
    queue.push(c0[None], h0[None], np.array([np.inf]), root)
    pruned = -np.inf
    boxes = 0
    history: list[tuple[float, float, float]] = []
    last_print = last_climb = time.perf_counter()
    climb_interval = CLIMB_INTERVAL
    status = "timeout"
    proven = 0.0  # the rigorous lower bound at lower.point, once asked for
    while True:
        now = time.perf_counter()
        elapsed = now - start
        upper = max(pruned, queue.max(), lower.value)
        if not history or history[-1][1:] != (lower.value, upper):
            history.append((elapsed, lower.value, upper))
        if progress and now - last_print >= 1.0:
            last_print = now
            ratio = f"{upper / lower.value:8.4f}x" if lower.value > 0 else "      n/a"
            print(f"verify: {elapsed:7.1f} s  {boxes:>11,} boxes  {queue.n:>9,} live  "
                  f"lower {lower.value:.6e}  upper {upper:.6e}  {ratio}", file=sys.stdout,
                  flush=True)
        if eps is not None and lower.value > eps:
            proven = float(run.rigorous(lower.point[None])[0])
            if proven > eps:
                status = "refuted"
                break
        if eps is not None and upper <= eps:
            status = "certified"
            break
        if np.isfinite(upper) and (upper - lower.value <= tol * upper or upper <= atol):
            status = "converged"
            break
        if elapsed >= max_seconds and boxes:  # one step at least: a bracket, compiled
            status = "timeout"
            break
        level = max(lower.value / (1.0 - tol), -np.inf if eps is None else eps, atol)

        # take the most promising boxes; drop those the pruning level has overtaken
        taken, over = _take(queue, tree, batch, level)
        pruned = max(pruned, over)
        if taken is None:
            continue
        cc, ch, parent, pids, pub = taken
        ub, _, c2, h2, vals, pts = run.bound(cc, ch)
        if not boxes:  # the bounding program first: a primitive without a rule fails fast
            sample_first()
        ub = np.minimum(np.where(np.isnan(ub), np.inf, ub), pub[parent])
        cids = tree.add(c2, h2, pids, ProofTree.CLIP)
        boxes += len(ub)
        _refuse_undefined(vals, pts)  # the boxes' centres: points of the domain
        improved = lower.offer(vals, pts, np.max(h2, axis=1))
        if improved and time.perf_counter() - last_climb >= climb_interval:
            run.climb(lower)
            last_climb = time.perf_counter()
            climb_interval = min(2 * climb_interval, max(5.0, CLIMB_INTERVAL))
        level = max(lower.value / (1.0 - tol), -np.inf if eps is None else eps, atol)
        keep = ub > level
        done = (ub > -np.inf) & ~keep  # boxes that meet the domain and are finished
        if done.any():
            pruned = max(pruned, float(np.max(ub[done])))
        tree.close(cids[~keep], ub[~keep])
        # no progress, far from the pruning level: next time every axis is halved at once
        stalled = (ub >= STALL * pub[parent]) & (ub > 2.0 * level)
        queue.push(c2[keep], h2[keep], ub[keep], cids[keep],
                   np.where(stalled, wide_split, 1)[keep])
    tree.close(queue.ids[: queue.n], queue.ub[: queue.n])
    if status != "refuted":
        for _ in range(1 if status == "certified" else FINAL_CLIMBS):
            run.climb(lower)
        proven = float(run.rigorous(lower.point[None])[0])
    upper = max(upper, proven)
    history.append((time.perf_counter() - start, proven, upper))
    return SearchResult(lower=proven, upper=upper, status=status, argmax=lower.point,
                        boxes=boxes, history=history,
                        proof=Proof(program.jaxprs, tuple(program.consts), region, tree))


def _refuse_undefined(vals: np.ndarray, pts: np.ndarray) -> None:
    """Raise when the difference is NaN or infinite at one of ``pts`` (points of the domain):
    a supremum over a domain where the programs are undefined has no meaning, and bounds on
    the rest of it would read as a proof."""
    if not np.all(np.isfinite(vals)):
        bad = int(np.argmin(np.isfinite(vals)))
        raise ValueError(f"verify: F_a - F_b is {vals[bad]} at x = {pts[bad].tolist()}, a "
                         "point of the domain: the difference must be finite everywhere on it "
                         "(a function outside its domain there, e.g. sqrt or log of a "
                         "negative value, a division by zero, or an overflow)")


def default_batch(program: prog.Program, order: int, *, symbolic: bool = False) -> int:
    """Children bounded per compiled call: about ``2e7`` float operations per call (a few
    milliseconds on a CPU core: small batches keep the search best-first), a power of two in
    ``[32, 256]`` (measured on ``[2, 64, 64, 1]`` vs ``collocation(4)``: 0.05 s to converge with
    64, 0.3 s with 512; on ``[2, 256, 256, 1]``: 0.67 ms per box with 32, 0.73 with 16)."""
    mono = tm.Monomials.of(program.dim, order)
    pairs = sum(mono.product_indices(j - 1, 1)[0].size for j in range(2, order + 1))
    # the matmuls on every coefficient, and the truncated powers of every activation
    per_box = mono.size * program.flops + 8.0 * (pairs + mono.size) * program.activations + 1e4
    if symbolic:  # every matmul also maps the symbols made so far: about half of them each
        per_box += 0.25 * program.activations * program.flops
    b = 2 ** int(round(math.log2(max(2e7 / per_box, 1.0))))
    return int(min(max(b, 8 if symbolic else 32), 256))
