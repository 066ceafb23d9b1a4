"""Data-free polishing: distil a compressed network towards its teacher on points of the domain.

The paper stops at "no fine-tuning". A compression, though, knows both networks and the input
domain, so it can keep improving the student without any data: minimise the squared difference
of the two networks' outputs on quasi-random points of the domain (ours, not the paper's). The
widths never change; only the student's kernels and biases move.

Measured on the five Table 1 teachers (``benchmarks/polish_table1.py``, float64, width 15): L-BFGS
with a long memory on fixed Sobol points (median test-MSE ratio 0.81 after 1000 steps) beats Adam
with a cosine decay, on the same fixed points or on minibatches resampled every step from a
larger pool (4.3 either way after 3000 steps), so it is the default; the measurements are in
``benchmarks/README.md`` ("Data-free polishing").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu

from jaxcompress._checks import check_info_matches, check_key, is_concrete, seed_key
from jaxcompress.activations import get_activation
from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.domains import check_domain
from jaxcompress.graph import Compressed
from jaxcompress.graph.plan import Plan, flat_output
from jaxcompress.layer import format_span
from jaxcompress.measure import error_estimate, error_points
from jaxcompress.mlp import Params, apply, layer_sizes, validate_params
from jaxcompress.networks import as_network
from jaxcompress.protocol import NetworkLike

__all__ = ["DEFAULT_POINTS", "DEFAULT_STEPS", "PolishHistory", "default_optimizer", "polish",
           "polish_leaves", "polished_info"]

#: Steps of the default optimizer (with 1000, every width-10 student of the five Table 1 teachers
#: met the task criterion; benchmarks/README.md, "Data-free polishing").
DEFAULT_STEPS = 1000
#: Fixed Sobol points of the domain the objective is averaged over, by default.
DEFAULT_POINTS = 4096
#: L-BFGS memory of the default optimizer: at width 15, 1000 steps met the Table 1 task criterion
#: on 5 of 5 seeds with 100 pairs, on 2 of 5 with optax's default 10 (benchmarks/README.md); the
#: memory costs ``2 x 100`` copies of the parameters.
LBFGS_MEMORY = 100
#: The loop runs as this many jitted ``lax.scan`` chunks; progress is reported between them.
CHUNKS = 10


def default_optimizer(batch: int | None = None, steps: int = DEFAULT_STEPS):
    """The optimizer :func:`polish` uses when none is given (cached: one object, one compilation).

    ``optax.lbfgs(memory_size=100)`` (zoom line search) on the fixed points: one object for
    every ``steps`` (it does not depend on them; keyed by ``steps`` too, another step count
    compiled polishing's programs again even where its chunks kept their length); with
    minibatches (``batch`` given) a line search has no fixed objective to search, so Adam with a
    cosine decay from ``1e-3`` to ``1e-6`` over ``steps``.
    """
    if batch is None:
        return _lbfgs()
    return _adam(steps)


@functools.cache
def _lbfgs():
    return optax.lbfgs(memory_size=LBFGS_MEMORY)


@functools.cache
def _adam(steps: int):
    return optax.adam(optax.cosine_decay_schedule(1e-3, steps, alpha=1e-3))


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["loss", "chunk_loss", "best_step", "error_before", "error_after", "info"],
    meta_fields=["steps", "n_points", "batch", "optimizer", "seconds", "dtype"],
)
@dataclasses.dataclass(frozen=True, repr=False)
class PolishHistory:
    """What :func:`polish` did (a pytree: under ``jax.vmap`` every array gains a leading axis).

    Attributes:
      loss: ``(steps,)`` the objective at every step, before that step's update (on the step's
        minibatch when ``batch`` was given, else on all points).
      chunk_loss: the objective on all points at the start and after each chunk (at most
        :data:`CHUNKS` chunks).
      best_step: the step whose parameters were returned (0: the student as given); the lowest
        ``chunk_loss``, so the result is never worse than the start on the points.
      error_before, error_after: :func:`jaxcompress.measure.error_estimate` of the student
        against the teacher (max error on 256 fixed Sobol points of the domain, none of them a
        polishing point) before and after.
      info: the ``CompressInfo`` passed in (for a compressed traced network, its own record
        when none was passed), refreshed by :func:`polished_info`: ``error_estimate`` is
        ``error_after``, ``estimated_on`` names its points and ``method`` ends with the
        polishing; ``None`` when there was none.
      steps, n_points, batch: the run's size (``batch`` is ``None`` for full-batch steps).
      optimizer: ``"default"`` or ``"user"``.
      seconds: wall time of the whole call (compilation included); ``None`` when traced (under
        ``jax.jit`` or ``jax.vmap``, where no wall time is known).
      dtype: the dtype the loop computed in (``polish``'s ``dtype``, default the student's).
    """

    loss: jax.Array
    chunk_loss: jax.Array
    best_step: jax.Array
    error_before: jax.Array
    error_after: jax.Array
    info: Any
    steps: int
    n_points: int
    batch: int | None
    optimizer: str
    seconds: float | None
    dtype: str = ""

    def __repr__(self) -> str:
        """A short summary: the run's size, the best step, the loss and the error estimate
        before and after (ranges over a vmapped stack); the arrays stay attributes."""
        arrays = (self.loss, self.best_step, self.error_before, self.error_after)
        if any(isinstance(a, jax.core.Tracer) for a in arrays):
            return (f"PolishHistory(steps={self.steps}, n_points={self.n_points}, traced: its "
                    "arrays are known once the surrounding jax.jit or jax.vmap returns)")
        loss = np.asarray(self.loss)
        first, last = loss[..., 0], loss[..., -1]
        stack = f", {loss.shape[0]} networks" if loss.ndim > 1 else ""
        batch = "full batch" if self.batch is None else f"batches of {self.batch}"
        secs = "" if self.seconds is None else f", {self.seconds:.1f} s"
        return (f"PolishHistory({self.steps} steps{stack}, {self.optimizer} optimizer, "
                f"{self.n_points} points, {batch}, {self.dtype or 'student dtype'}{secs}: "
                f"loss {format_span(first)} -> {format_span(last)}, best step "
                f"{format_span(self.best_step, 'd')}, error estimate "
                f"{format_span(self.error_before)} -> {format_span(self.error_after)})")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (host side; one network, not a vmapped stack)."""
        return {
            "steps": self.steps, "n_points": self.n_points, "batch": self.batch,
            "optimizer": self.optimizer, "seconds": self.seconds, "dtype": self.dtype,
            "best_step": int(self.best_step),
            "loss_first": float(self.loss[0]), "loss_last": float(self.loss[-1]),
            "chunk_loss": [float(v) for v in np.asarray(self.chunk_loss)],
            "error_before": float(self.error_before), "error_after": float(self.error_after),
        }


def _is_traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def _check_points(points, d_in: int, steps, batch, where: str) -> int:
    """Check ``steps``, ``points`` and ``batch``; returns the number of points."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"{where}: steps must be a positive int, got {steps!r}")
    if points is None or isinstance(points, (int, np.integer)):
        n = DEFAULT_POINTS if points is None else int(points)
        if isinstance(points, bool) or n < 1:
            raise ValueError(f"{where}: points must be a positive int or an (N, {d_in}) array, "
                             f"got {points!r}")
    else:
        shape = np.shape(points)
        if len(shape) != 2 or shape[1] != d_in or shape[0] < 1:
            raise ValueError(f"{where}: points has shape {shape}; expected (N, {d_in}) with "
                             "N >= 1")
        if not isinstance(points, jax.core.Tracer) and not np.all(np.isfinite(points)):
            raise ValueError(f"{where}: points contains NaN or Inf values")
        n = shape[0]
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (int, np.integer))
                              or batch < 1):
        raise ValueError(f"{where}: batch must be None or a positive int, got {batch!r}")
    return n


def _check(student, teacher, domain, steps, points, batch, where="polish"):
    student = validate_params(student, where=f"{where}: student")
    teacher = validate_params(teacher, where=f"{where}: teacher")
    for name, p in (("student", student), ("teacher", teacher)):
        if p[0]["kernel"].ndim != 2:
            raise ValueError(
                f"{where}: expected one {name} network (2-D kernels), got kernel shape "
                f"{p[0]['kernel'].shape}; wrap polish in jax.vmap for a stack of networks")
    d_in, d_out = student[0]["kernel"].shape[0], student[-1]["kernel"].shape[1]
    t_in, t_out = teacher[0]["kernel"].shape[0], teacher[-1]["kernel"].shape[1]
    if (d_in, d_out) != (t_in, t_out):
        raise ValueError(
            f"{where}: the student maps {d_in} -> {d_out} but the teacher maps {t_in} -> {t_out}; "
            "input and output sizes must match")
    check_domain(domain, d_in, where)
    n = _check_points(points, d_in, steps, batch, where)
    return student, teacher, n


@dataclasses.dataclass(frozen=True)
class _MLPModel:
    """Student and teacher in the params convention with one activation (static, hashable)."""

    act_name: str

    def __call__(self, params, x):
        return apply(params, x, activation=self.act_name)

    teacher = __call__

    def estimate(self, teacher, student, domain):
        return error_estimate(teacher, student, activation=self.act_name, domain=domain)


def _trainable(leaf) -> bool:
    """Whether :func:`polish` optimises ``leaf``: a floating-point array. A Python number,
    bool or string, or an integer array (a dimension, a frequency, a step counter kept in the
    params) is given to ``fn`` as it was and given back unchanged."""
    return isinstance(leaf, (jax.Array, np.ndarray)) and jnp.issubdtype(leaf.dtype, jnp.floating)


@dataclasses.dataclass(frozen=True, eq=False)
class _Split:
    """A params tree cut into what the optimizer sees and the rest: :meth:`trainable` is the
    tree with every leaf that is not :func:`_trainable` replaced by ``None`` (optax skips
    ``None``), :meth:`merge` puts those leaves back, so ``fn`` sees its own tree."""

    treedef: Any
    leaves: tuple   # the tree's leaves; the trainable ones are replaced at merge

    @staticmethod
    def of(params) -> _Split:
        leaves, treedef = jax.tree_util.tree_flatten(params)
        return _Split(treedef, tuple(leaves))

    @property
    def keep(self) -> tuple[bool, ...]:
        return tuple(_trainable(a) for a in self.leaves)

    def trainable(self):
        return jax.tree_util.tree_unflatten(
            self.treedef, [a if k else None for a, k in zip(self.leaves, self.keep, strict=True)])

    def merge(self, trainable):
        new = iter(jax.tree_util.tree_leaves(trainable))
        return jax.tree_util.tree_unflatten(
            self.treedef, [next(new) if k else a
                           for a, k in zip(self.leaves, self.keep, strict=True)])


class _FnModel:
    """A compressed traced network (``student_apply(params, x)``) and its teacher's
    ``fn(params, x)``; hashed by identity (one compilation per :func:`polish` call). Both are
    called on their :meth:`_Split.trainable` leaves, the other leaves closed over (never traced
    by ``jax.jit``: a Python int stays one for ``fn``)."""

    def __init__(self, student_apply: Callable, teacher_fn: Callable, student: _Split,
                 teacher: _Split):
        self.student_apply, self.teacher_fn = student_apply, teacher_fn
        self.student, self.teacher_split = student, teacher

    def __call__(self, params, x):
        return flat_output(self.student_apply(self.student.merge(params), x), x)

    def teacher(self, params, x):
        return flat_output(self.teacher_fn(self.teacher_split.merge(params), x), x)

    def estimate(self, teacher, student, domain):
        """``max |F(x_p) - F~(x_p)|`` on :func:`~jaxcompress.measure.error_points` (NaN for an
        invalid domain), as :func:`~jaxcompress.measure.error_estimate`."""
        dtype = jnp.result_type(*jax.tree_util.tree_leaves(student))
        pts = error_points(domain, dtype=dtype)
        gap = jnp.max(jnp.abs(self.teacher(teacher, pts).astype(dtype) - self(student, pts)))
        return jnp.where(domain.valid(), gap, jnp.nan)


@dataclasses.dataclass(frozen=True)
class _PlanModel:
    """A candidate of the search for the smallest network (:mod:`jaxcompress.search`) and its
    teacher, as driver plans (static, hashable: every candidate of one shape structure, and
    every teacher of one plan, share one compilation). With ``masked``, the student is a pair
    ``(leaves, mask)`` and computes with ``leaves * mask``: a narrower network padded to a
    fixed shape, its padding neither computing nor learning (the polishing loop optimises the
    leaves only and passes the mask beside them, outside the gradient and the optimizer's
    state)."""

    plan: Plan
    teacher_plan: Plan
    masked: bool = False

    def _leaves(self, student):
        if not self.masked:
            return student
        leaves, mask = student
        return [a if m is None else a * jax.lax.stop_gradient(m)
                for a, m in zip(leaves, mask, strict=True)]

    def __call__(self, student, x):
        return self.plan.apply(self._leaves(student), x)

    def teacher(self, leaves, x):
        return self.teacher_plan.apply(leaves, x)

    def estimate(self, teacher, student, domain):
        """``max |F(x_p) - F~(x_p)|`` on :func:`~jaxcompress.measure.error_points`."""
        dtype = jnp.result_type(*[a for a in jax.tree_util.tree_leaves(student)
                                  if jnp.issubdtype(jnp.result_type(a), jnp.floating)])
        pts = error_points(domain, dtype=dtype)
        gap = jnp.max(jnp.abs(self.teacher(teacher, pts).astype(dtype) - self(student, pts)))
        return jnp.where(domain.valid(), gap, jnp.nan)


class _MergedModel:
    """``model`` (a :class:`_PlanModel`) on the :meth:`_Split.trainable` leaves of its student
    and teacher, their other leaves put back from the splits before each call. Equal (one
    compilation) to another of the same model, structures and other leaves when those are
    Python numbers (every candidate of a search); else hashed by identity."""

    def __init__(self, model: _PlanModel, student: _Split, teacher: _Split):
        self.model, self.student, self.teacher_split = model, student, teacher
        fixed = tuple((type(a), a) for split in (student, teacher)
                      for a, k in zip(split.leaves, split.keep, strict=True) if not k)
        self._key = ((model, student.treedef, teacher.treedef, fixed)
                     if all(t in (bool, int, float, str) for t, _ in fixed) else (id(self),))

    def __eq__(self, other) -> bool:
        return isinstance(other, _MergedModel) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def masked(self) -> bool:
        return self.model.masked

    def _full(self, student):
        if not self.masked:
            return self.student.merge(student)
        leaves, mask = student
        return self.student.merge(leaves), mask

    def __call__(self, student, x):
        return self.model(self._full(student), x)

    def teacher(self, leaves, x):
        return self.model.teacher(self.teacher_split.merge(leaves), x)

    def estimate(self, teacher, student, domain):
        return self.model.estimate(self.teacher_split.merge(teacher), self._full(student),
                                   domain)


@dataclasses.dataclass(frozen=True)
class _Flat:
    """``model`` on one flat parameter vector (ours): the default L-BFGS then keeps its history
    of 100 steps, its two-loop recursion and its line search on one array instead of one per
    leaf, which XLA compiles as a few fused kernels instead of a few per leaf (the docs' search:
    the loop's program compiles in about half the time, the same arithmetic up to the order of
    its sums). ``treedef`` and ``shapes`` are the leaves' structure (static, hashable: one
    compilation for every student of one structure)."""

    model: Any
    treedef: Any
    shapes: tuple[tuple[int, ...], ...]

    @property
    def masked(self) -> bool:
        return getattr(self.model, "masked", False)

    @staticmethod
    def of(model, params) -> _Flat | None:
        """The flat view of ``params`` for ``model``, or ``None`` when the leaves are not all
        arrays of one floating dtype on at most one device (the loop keeps the tree)."""
        leaves, treedef = jax.tree_util.tree_flatten(params)
        dtypes = {jnp.result_type(a) for a in leaves if hasattr(a, "dtype")}
        if (not leaves or len(dtypes) != 1 or not all(hasattr(a, "dtype") for a in leaves)
                or not jnp.issubdtype(dtypes.pop(), jnp.floating)
                or any(len(a.sharding.device_set) > 1 for a in leaves
                       if isinstance(a, jax.Array) and is_concrete(a))):
            return None
        return _Flat(model, treedef, tuple(tuple(np.shape(a)) for a in leaves))

    def ravel(self, params):
        """``params`` as one vector (joined on the host when concrete: no program per shape)."""
        leaves = jax.tree_util.tree_leaves(params)
        if all(is_concrete(a) for a in leaves):
            return jax.device_put(np.concatenate([np.ravel(np.asarray(a)) for a in leaves]))
        return jnp.concatenate([jnp.ravel(a) for a in leaves])

    def unravel(self, flat):
        """The leaves' tree of the vector ``flat`` (split on the host when concrete)."""
        host = is_concrete(flat)
        xp = np if host else jnp
        cuts = np.cumsum([math.prod(s) for s in self.shapes])[:-1]
        parts = [xp.reshape(v, s) for v, s in zip(
            xp.split(np.asarray(flat) if host else flat, cuts), self.shapes, strict=True)]
        if host:
            parts = [jax.device_put(a) for a in parts]
        return jax.tree_util.tree_unflatten(self.treedef, parts)

    def _tree(self, student):
        if self.masked:
            flat, fixed = student
            return self.unravel(flat), fixed
        return self.unravel(student)

    def __call__(self, student, x):
        return self.model(self._tree(student), x)

    def teacher(self, params, x):
        return self.model.teacher(params, x)

    def estimate(self, teacher, student, domain):
        return self.model.estimate(teacher, self._tree(student), domain)


def _student(params, fixed):
    """The model's student: the optimised ``params``, paired with ``fixed`` (a masked
    candidate's mask) when there is one."""
    return params if fixed is None else (params, fixed)


def _loss(params, x, y, model, fixed=None):
    return jnp.mean((model(_student(params, fixed), x) - y) ** 2)


def _uses_stored_value(state) -> bool:
    """Whether the optimizer keeps the objective's value and gradient (L-BFGS's line search)."""
    try:
        return (otu.tree_get(state, "value") is not None
                and otu.tree_get(state, "grad") is not None)
    except KeyError:  # several matches: not the single line search value_and_grad_from_state needs
        return False


@functools.partial(FastOnSmallCPU, static_argnames=("model", "optimizer", "n"))
def _start(params, fixed, teacher, points, domain, *, model, optimizer, n):
    """The points, the teacher's outputs there, the optimizer state (of ``params`` only, never
    of ``fixed``), the first loss and error."""
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
    t_dtype = jnp.result_type(*jax.tree_util.tree_leaves(teacher))
    x = domain.sobol(n, dtype=dtype) if points is None else points.astype(dtype)
    y = model.teacher(teacher, x.astype(t_dtype)).astype(dtype)
    before = model.estimate(teacher, _student(params, fixed), domain)
    # strongly typed, as the chunks return it: a weak-typed scalar in optax's initial state
    # would make the second chunk compile again
    state = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=a.dtype),
                                   optimizer.init(params))
    return x, y, state, _loss(params, x, y, model, fixed), before


@functools.partial(FastOnSmallCPU, static_argnames=("model",))
def _finish(teacher, student, domain, *, model):
    return model.estimate(teacher, student, domain)


@functools.partial(jax.jit, static_argnames=("model", "optimizer", "length", "batch"))
def _run_chunk(carry, x, y, key, start, total, fixed, *, model, optimizer, length, batch):
    """``length`` steps of the optimizer, then the loss on all points; keeps the best params.
    ``fixed`` (a masked candidate's mask, or ``None``) is an argument of the loss, outside the
    optimizer: in its state it would double L-BFGS's memory and the program XLA compiles
    (measured on the docs' search: 2.0 s instead of 1.55 s to compile, and 8.4 s instead of
    4.9 s for the whole search a second time)."""
    params, opt_state, best, best_loss, best_step = carry

    def full_loss(p):
        return _loss(p, x, y, model, fixed)

    stored = batch is None and _uses_stored_value(opt_state)
    value_and_grad = (optax.value_and_grad_from_state(full_loss) if stored
                      else jax.value_and_grad(_loss))

    def step(carry, i):
        p, s = carry
        if batch is None:
            xb, yb = x, y
        else:
            idx = jax.random.randint(jax.random.fold_in(key, i), (batch,), 0, x.shape[0])
            xb, yb = x[idx], y[idx]
        if stored:
            value, grad = value_and_grad(p, state=s)
        else:
            value, grad = value_and_grad(p, xb, yb, model, fixed)
        # optax's line search mixes integer widths: trace it with JAX's default promotion even
        # when the caller enabled strict promotion (our own arithmetic is strict-clean)
        with jax.numpy_dtype_promotion("standard"):
            updates, s_new = optimizer.update(grad, s, p, value=value, grad=grad,
                                              value_fn=lambda q: _loss(q, xb, yb, model, fixed))
        p_new = optax.apply_updates(p, updates)
        # steps past ``total`` (the last chunk's padding) leave everything unchanged, so every
        # chunk has the same length and the loop compiles once
        active = i < total
        p, s = jax.tree_util.tree_map(lambda a, b: jnp.where(active, a, b), (p_new, s_new), (p, s))
        return (p, s), value

    (params, opt_state), losses = jax.lax.scan(
        step, (params, opt_state), start + jnp.arange(length, dtype=jnp.result_type(start)))
    full = full_loss(params)
    # keep the best chunk boundary: a first-order optimizer may overshoot, and NaN never wins
    better = full < best_loss
    best = jax.tree_util.tree_map(lambda a, b: jnp.where(better, a, b), params, best)
    best_step = jnp.where(better, jnp.minimum(start + length, total), best_step)
    best_loss = jnp.where(better, full, best_loss)
    return (params, opt_state, best, best_loss, best_step), losses, full


@functools.cache
def _with_extra_args(optimizer):
    # cached so that the same optimizer gives the same (hashable, static) object: one compilation
    return optax.with_extra_args_support(optimizer)


def _reporter(progress) -> Callable[[str], None] | None:
    if progress is None or progress is False:
        return None
    if progress is True:
        return lambda line: print(line, file=sys.stderr, flush=True)
    if callable(progress):
        return progress
    raise TypeError(f"polish: progress must be None, a bool or a callable, got {progress!r}")


def polish(
    student: Params,
    teacher: Params,
    *,
    activation: str | None = None,
    domain,
    info=None,
    steps: int = DEFAULT_STEPS,
    optimizer: optax.GradientTransformation | None = None,
    points: int | jax.Array | None = None,
    batch: int | None = None,
    key: jax.Array | None = None,
    progress: bool | Callable[[str], None] | None = None,
    dtype=None,
) -> tuple[Params, PolishHistory]:
    """Distil ``student`` towards ``teacher`` on points of ``domain``: no data, same widths.

    Minimises (ours, not the paper's; the paper's students are not fine-tuned)

    .. math::
       L(\\tilde\\theta) = \\frac{1}{N\\, d_{out}} \\sum_{p=1}^{N}
       \\bigl\\| F_{\\tilde\\theta}(x_p) - F_\\theta(x_p) \\bigr\\|_2^2,

    where ``F_theta`` is the teacher, ``F_theta~`` the student (same depth and input/output
    sizes, any hidden widths, typically ``jc.compress``'s result, which is a far better start
    than a random initialisation) and ``x_1..x_N`` are the first ``N`` Sobol points of the domain
    (for a :class:`~jaxcompress.Parameterization` ``(iota, U)``: ``iota`` of Sobol points of
    ``U``), or the given ``points``. The teacher is evaluated once, on all points.

    Args:
      student: the network to polish (its widths are kept): a params list, or a compressed
        traced network (``jc.compress(jc.trace(fn, params, x), ...)``'s or a module's first
        result), which comes back with its parameters polished. Only its floating-point
        array leaves are optimised: Python numbers and integer arrays in the tree (a
        dimension, a frequency) reach ``fn`` and come back unchanged.
      teacher: the network to match: a params list, or for a compressed traced network the
        :class:`~jaxcompress.Network` (or module network) it was compressed from; ``F_theta``
        is then the user's own ``fn(params, x)``.
      activation: the activation shared by both (params lists only; a traced network carries
        its own).
      domain: a :class:`~jaxcompress.Ball`, :class:`~jaxcompress.Box` or
        :class:`~jaxcompress.Parameterization`: where the points are drawn and where the error
        estimate is measured.
      info: the ``CompressInfo`` of the compression that made ``student`` (a compressed
        traced network's own ``student.info`` when ``None``): returned in the history, and
        with a compressed traced network in the result, refreshed by :func:`polished_info`
        (the polished student's error estimate, so that :func:`~jaxcompress.save` stores
        it). Its hidden widths and activation must be the student's (a record of another
        network is a ``ValueError``).
      steps: optimizer steps (default :data:`DEFAULT_STEPS`).
      optimizer: an optax ``GradientTransformation``; its ``update`` receives ``value``, ``grad``
        and ``value_fn`` as extra arguments (what ``optax.lbfgs`` needs). Default
        :func:`default_optimizer`: L-BFGS (memory 100) on fixed points; with ``batch``, Adam with
        a cosine decay. Pass the same object again to reuse the compilation.
      points: ``N``, the number of Sobol points (default :data:`DEFAULT_POINTS`), or an
        ``(N, d_in)`` array of inputs to use instead.
      batch: ``None`` (default): every step uses all ``N`` points (fixed; measured best with the
        default L-BFGS). An int: every step uses ``batch`` points drawn uniformly from the ``N``
        (resampled each step; for first-order optimizers).
      key: PRNG key for the minibatches (default ``PRNGKey(0)``).
      progress: ``True`` prints a line per chunk (of :data:`CHUNKS`) to stderr; a callable
        receives each line. Only when run eagerly (not under ``jax.jit`` / ``jax.vmap``).
      dtype: the floating dtype the loop computes in (default ``None``: the student's). With
        ``jnp.float64`` for a float32 student, student, teacher and points are cast up, the
        optimisation runs in float64 and the polished parameters come back in the student's
        dtypes (the history's arrays too). Called eagerly, it runs under
        ``jax.enable_x64(True)`` when 64-bit types are off; under a trace they must be on
        already (else a ``ValueError``). A traced network's ``fn`` must accept float64 leaves
        and inputs (closed-over float32 constants are promoted by JAX's standard rules; under
        strict promotion that is a ``ValueError`` saying so). Why (ours, measured): L-BFGS on a
        float32 student stalls once the student is close to its teacher (on the zoo's modified
        MLP at width 55 the loss went 1.3e-8 -> 1.1e-8 in 500 steps and 1.0e-8 in 2000; in
        float64, 3.1e-9 in 500 steps: its curvature pairs are differences of gradients that
        float32 rounds away).

    Returns:
      ``(params, history)``: the polished student (the parameters with the lowest objective seen
      at a chunk boundary, so never worse on the points than the start; a compressed traced
      network comes back as one, carrying ``history.info``) and a :class:`PolishHistory`.

    The loop is ``jax.lax.scan`` inside ``jax.jit``, in :data:`CHUNKS` chunks of equal length.
    ``polish`` works under ``jax.vmap`` over stacks of (student, teacher) pairs of equal shapes
    (and under ``jax.jit``); validation is eager, at the call.

    References:
      Hinton, Vinyals & Dean (2015), "Distilling the Knowledge in a Neural Network" (matching a
      teacher's outputs); Liu & Nocedal (1989), L-BFGS.
    """
    if isinstance(student, Compressed):
        return _polish_traced(student, teacher, activation=activation, domain=domain, info=info,
                              steps=steps, optimizer=optimizer, points=points, batch=batch,
                              key=key, progress=progress, dtype=dtype)
    if activation is None:
        raise TypeError("polish: activation= is required for a network in the params convention "
                        "(a compressed traced network, from jc.compress(jc.trace(...)), carries "
                        "its own)")
    act = get_activation(activation)
    student, teacher, n = _check(student, teacher, domain, steps, points, batch)
    if info is not None:
        check_info_matches(info, layer_sizes(student), act.name, "polish")
    return _polish_loop(student, teacher, _MLPModel(act.name), domain, n, info=info, steps=steps,
                        optimizer=optimizer, points=points, batch=batch, key=key,
                        progress=progress, dtype=dtype)


def _polish_traced(student, teacher, *, activation, domain, info, steps, optimizer, points,
                   batch, key, progress, dtype):
    """:func:`polish` of a compressed traced network towards its :class:`~jaxcompress.Network`
    (or module network): the same loop on ``student.apply`` and ``teacher.fn``; returns the
    compressed network with the polished parameters."""
    where = "polish"
    if activation is not None:
        raise ValueError(f"{where}: a compressed traced network carries its own activations; "
                         "drop activation=")
    if not isinstance(teacher, NetworkLike):
        raise TypeError(f"{where}: the teacher of a compressed traced network is a network "
                        "(the one it came from, jc.trace(...) or jc.trace_module(...)), got "
                        f"{type(teacher).__name__}")
    teacher = as_network(teacher, where=where)
    d_in = teacher.x.shape[-1]
    # only the floating-point arrays are optimised; ints, strings, ... are given back as they were
    s_split, t_split = _Split.of(student.params), _Split.of(teacher.params)
    if not any(s_split.keep):
        raise ValueError(f"{where}: the student has no floating-point array leaf to optimise "
                         f"(its leaves are {sorted({type(a).__name__ for a in s_split.leaves})})")
    check_domain(domain, d_in, where, jnp.result_type(
        *jax.tree_util.tree_leaves(s_split.trainable())))
    n = _check_points(points, d_in, steps, batch, where)
    if info is None:
        info = student.info
    elif info is not student.info:
        check_info_matches(info, student.layer_sizes(), None, where)
    best, history = _polish_loop(s_split.trainable(), t_split.trainable(),
                                 _FnModel(student.apply, teacher.fn, s_split, t_split), domain, n,
                                 info=info, steps=steps, optimizer=optimizer, points=points,
                                 batch=batch, key=key, progress=progress, dtype=dtype)
    return dataclasses.replace(student, params=s_split.merge(best), info=history.info), history


def polished_info(info, error: jax.Array, domain, *, steps: int, n_points: int):
    """The record ``info`` of a compression after :func:`polish`: every field that describes
    the student's weights, as they now are.

    * ``error_estimate``: ``error`` (:func:`~jaxcompress.measure.error_estimate` of the polished
      student on ``domain``'s fixed points), and ``estimated_on`` those points in words (the
      domain polished on may be another than the one compressed on);
    * ``method``: the compression's description, then ``"; polished (S steps on N points)"``,
      so a saved or printed record says that the weights are not the compression's.

    The per-layer records (:class:`~jaxcompress.layer.LayerInfo`: kept neurons, ranks, the
    Eq. (41) residual, ``max |C|``) describe the compression's selection and re-weighting and
    stay as they were: polishing keeps the neurons and moves their weights. ``None`` stays
    ``None``.
    """
    if info is None:
        return None
    note = f"polished ({steps} steps on {n_points} points)"
    return dataclasses.replace(info, error_estimate=error,
                               estimated_on=domain.estimate_description(),
                               method=f"{info.method}; {note}" if info.method else note)


def polish_leaves(plan: Plan, leaves, teacher_plan: Plan, teacher_leaves, *, domain,
                  mask=None, steps: int = DEFAULT_STEPS, points=None, optimizer=None,
                  dtype=None, progress=None):
    """:func:`polish` of the network ``plan`` at ``leaves`` towards ``teacher_plan`` at
    ``teacher_leaves`` (checked by the caller): the search for the smallest network polishes its
    candidates with it. With ``mask`` (one array per leaf, ``0`` where the leaf is padding), the
    loop runs on ``leaves * mask`` and the padding stays where it is (``leaves`` are returned
    multiplied by the mask), so candidates of many widths share one compilation.

    Returns ``(leaves, history)``."""
    model = _PlanModel(plan, teacher_plan, masked=mask is not None)
    s_split, t_split = _Split.of(list(leaves)), _Split.of(list(teacher_leaves))
    split = not (all(s_split.keep) and all(t_split.keep))
    if split:  # a Python number or an integer array among the leaves: given back as it was
        model = _MergedModel(model, s_split, t_split)
        if mask is not None:
            mask = [m if k else None for m, k in zip(mask, s_split.keep, strict=True)]
    student = s_split.trainable() if split else list(leaves)
    student = student if mask is None else (student, list(mask))
    n = _check_points(points, int(plan.x.shape[-1]), steps, None, "polish")
    best, history = _polish_loop(student, t_split.trainable() if split else list(teacher_leaves),
                                 model, domain, n, info=None, steps=steps, optimizer=optimizer,
                                 points=points, batch=None, key=None, progress=progress,
                                 dtype=dtype)
    if split:
        best = (s_split.merge(best) if mask is None
                else (s_split.merge(best[0]), [1 if m is None else m for m in best[1]]))
    if mask is not None:
        pairs = list(zip(*best, strict=True))
        if all(is_concrete(a) and is_concrete(m) for a, m in pairs):
            # on the host: no program per leaf shape to compile (a search polishes many)
            best = [jax.device_put(np.asarray(a) * np.asarray(m)) for a, m in pairs]
        else:
            best = [a * m for a, m in pairs]
    if split:
        best = [a if k else leaf for a, k, leaf in zip(best, s_split.keep, s_split.leaves,
                                                      strict=True)]
    return best, history


def _joined(parts, traced: bool, stack: bool = False, length: int | None = None):
    """The chunks' losses in one array (``stack``: scalars into a vector), its first
    ``length`` entries (default all); on the host when they are concrete, so no program is
    compiled for it (a slice of the joined device array compiled one per step count)."""
    if traced:
        return (jnp.stack(parts) if stack else jnp.concatenate(parts))[:length]
    host = [np.asarray(p) for p in parts]
    return jax.device_put((np.stack(host) if stack else np.concatenate(host))[:length])


def _cast(a, dtype):
    """``a.astype(dtype)``; a concrete array on one device is cast on the host and put back,
    committed to its device only if it was (the same numbers and the same placement, so the
    loop's programs are the same: run op by op the cast compiles a program per shape)."""
    if (isinstance(a, jax.Array) and is_concrete(a) and len(a.sharding.device_set) == 1
            and not a.weak_type):
        host = np.asarray(a).astype(dtype)
        return jax.device_put(host, a.sharding) if a.committed else jax.device_put(host)
    return a.astype(dtype)


def _cast_floats(tree, dtype):
    """``tree`` with its floating-point array leaves cast to ``dtype``."""
    return jax.tree_util.tree_map(
        lambda a: _cast(a, dtype) if hasattr(a, "dtype") and jnp.issubdtype(a.dtype,
                                                                           jnp.floating) else a,
        tree)


def _polish_loop(student, teacher, model, domain, n, *, info, steps, optimizer, points, batch,
                 key, progress, dtype=None):
    """The chunked optimisation loop of :func:`polish` (validated arguments); with ``dtype``
    (see :func:`polish`) on copies cast to it, the result cast back."""
    if dtype is None:
        return _polish_run(student, teacher, model, domain, n, info=info, steps=steps,
                           optimizer=optimizer, points=points, batch=batch, key=key,
                           progress=progress)
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"polish: dtype must be a floating dtype (e.g. jnp.float64), got {dtype}")
    wide = dtype.itemsize == 8 and not jax.config.jax_enable_x64
    if wide and _is_traced((student, teacher, points, domain, key)):
        raise ValueError("polish: dtype=float64 under jax.jit / jax.vmap needs 64-bit types on "
                         "(jax.config.update('jax_enable_x64', True)); called eagerly, polish "
                         "turns them on for the loop itself")
    low = jnp.result_type(*jax.tree_util.tree_leaves(student))
    with jax.enable_x64(True) if wide else contextlib.nullcontext():
        try:
            best, history = _polish_run(
                _cast_floats(student, dtype), _cast_floats(teacher, dtype), model,
                _cast_floats(domain, dtype), n,
                info=info, steps=steps, optimizer=optimizer,
                points=None if points is None else _cast_floats(points, dtype), batch=batch,
                key=key, progress=progress)
        except jax.dtypes.TypePromotionError as e:
            raise ValueError(
                f"polish: dtype={dtype}: the networks fail on {dtype} parameters and inputs "
                f"({str(e).splitlines()[0]:.200}); a function that mixes them with constants of "
                "another dtype needs JAX's standard dtype promotion "
                "(jax.numpy_dtype_promotion('standard')) or constants cast to the input's "
                "dtype") from e
        # back to the student's own leaf dtypes; the history's floats (info too) to its dtype
        best = jax.tree_util.tree_map(lambda a, b: _cast(a, b.dtype), best, student)
        return best, _cast_floats(history, low)


def _polish_run(student, teacher, model, domain, n, *, info, steps, optimizer, points, batch,
                key, progress):
    """The chunked optimisation loop of :func:`polish` (validated arguments)."""
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"polish: optimizer must be an optax GradientTransformation (e.g. "
                        f"optax.adam(1e-3)), got {type(optimizer).__name__} {optimizer!r:.40}")
    if key is not None:
        check_key(key, "polish")
    report = _reporter(progress)
    traced = _is_traced((student, teacher, points, domain, key))
    t0 = time.perf_counter()
    user_opt = optimizer is not None
    opt = _with_extra_args(default_optimizer(batch, steps) if optimizer is None else optimizer)
    key = seed_key(0) if key is None else key
    given = None if points is None or isinstance(points, (int, np.integer)) else points
    # a masked candidate (leaves, mask): the optimizer sees the leaves only
    params, fixed = student if getattr(model, "masked", False) else (student, None)
    # the default optimizer on one flat vector (a user's optimizer sees the tree it expects)
    flat = None if user_opt else _Flat.of(model, params)
    if flat is not None:
        model, params = flat, flat.ravel(params)
    x, y, state, loss0, before = _start(params, fixed, teacher, given, domain, model=model,
                                        optimizer=opt, n=n)
    length = -(-steps // CHUNKS)
    # from the host: jnp.zeros would compile a program of its own
    carry = (params, state, params, loss0,
             jax.device_put(np.zeros((), jax.dtypes.canonicalize_dtype(np.int64))))
    chunk_loss, losses = [loss0], []
    for c in range(-(-steps // length)):
        carry, step_losses, full = _run_chunk(
            carry, x, y, key, c * length, steps, fixed, model=model, optimizer=opt,
            length=length, batch=None if batch is None else int(batch))
        losses.append(step_losses)
        chunk_loss.append(full)
        if report is not None and not traced:
            done = min((c + 1) * length, steps)
            report(f"polish: step {done:>{len(str(steps))}}/{steps}  loss {float(full):.3e}  "
                   f"(start {float(loss0):.3e})  {time.perf_counter() - t0:.1f} s")
    best, best_step = _student(carry[2], fixed), carry[4]
    after = _finish(teacher, best, domain, model=model)
    if flat is not None:
        best = _student(flat.unravel(carry[2]), fixed)
    info = polished_info(info, after, domain, steps=int(steps), n_points=int(n))
    seconds = None
    if not traced:
        jax.block_until_ready(best)
        seconds = time.perf_counter() - t0
    history = PolishHistory(
        loss=_joined(losses, traced, length=steps),
        chunk_loss=_joined(chunk_loss, traced, stack=True),
        best_step=best_step, error_before=before, error_after=after, info=info, steps=int(steps),
        n_points=int(n), batch=None if batch is None else int(batch),
        optimizer="user" if user_opt else "default", seconds=seconds,
        dtype=str(jnp.result_type(*jax.tree_util.tree_leaves(student))))
    return best, history
