"""The zoo of real coordinate networks, trained, traced, compressed and polished (issue 22, 6).

Beyond the paper. Every architecture of ``benchmarks/zoo_models.py`` is trained briefly with
optax Adam (float32) on a real small task:

``image``  (siren, fourier_tanh, fourier_relu)
    the colour field of ``grace_hopper.jpg`` (matplotlib's sample photograph, nothing
    downloaded), pixel coordinates in ``[-1, 1]^2`` -> RGB; MSE on random pixel minibatches;
    metric: PSNR over every pixel (outputs clipped to ``[0, 1]``); domain ``Box([-1, 1]^2)``.
``sdf``  (sdf_igr, linen_compact, eqx_mlp)
    the signed distance of a torus (major radius 0.5, minor 0.2, in the ``xy`` plane) in
    ``[-1, 1]^3``; MSE against the exact SDF on minibatches half uniform in the cube, half near
    the surface (surface points + ``N(0, 0.05^2)``); metrics: mean ``|f|`` on surface points
    and mean ``|f - SDF|`` on uniform points of the cube (off it); domain ``Box([-1, 1]^3)``.
``pinn``  (pinn_tanh, nnx_custom; modified_mlp, pirate_net, residual_mlp of issue 23)
    the Poisson problem of ``benchmarks/pinn_poisson.py`` (``-Delta u = 2 pi^2 sin(pi x)
    sin(pi y)`` on the unit square, ``u = 0`` on its boundary); metric: relative L2 error
    against the exact solution on a grid; domain ``Box([0, 1]^2)``.
``operator``  (deeponet, issue 23)
    the antiderivative operator on 16 fixed input functions (``zoo_models.operator_family``):
    ``y -> (int_0^y u_j)_j``; MSE on random ``y``; metric: relative L2 on a grid of ``y`` in
    ``[0, 1]`` over every function; domain ``Box([0, 1])`` (the trunk's coordinate).
``hamiltonian``  (hamiltonian: ``jax.grad`` inside ``fn``)
    the pendulum, ``H = p^2 / 2 + (1 - cos q)``: the network's field ``J grad H_theta =
    (dH/dp, -dH/dq)`` fitted to ``(p, -sin q)`` by MSE on uniform points of ``[-2, 2]^2``;
    metric: relative L2 of the field against the true one on a grid (both components), and
    ``teacher_rel_l2``, the same against the teacher's field; domain ``Box([-2, 2]^2)``.
``ode``  (neural_ode: a network inside a bigger model)
    a neural ODE ``y' = f_theta(y)`` whose vector field is an Equinox MLP inside
    ``Func(t, y, args)``, trained on the damped pendulum ``(q, p)' = (p, -sin q - 0.1 p)`` by
    matching one fixed-step RK4 step (``dt = 0.1``) of the model to the true next state from
    uniform states of ``[-2, 2]^2`` (MSE over ``dt^2``); metric: the relative L2 error of RK4
    trajectories (``zoo_models.rk4``, 100 steps of 0.1 from 64 initial states on a grid of
    ``[-1, 1]^2``, which stay in the domain) against the true ones (``rel_l2``) and against the
    teacher's (``teacher_rel_l2``); only the field is compressed; domain ``Box([-2, 2]^2)``.

Each trained network is traced (``jc.trace``) and compressed at the orders of its configuration
by every method that applies (collocation; derivative matching for analytic activations); at
each order the candidate with the best task metric is kept and polished (``jc.polish`` toward
the teacher, on Sobol points of the domain). Reported per order: parameters before and after,
the task metric of teacher / compressed / polished, the compression and polish seconds,
evaluation throughput (points per second, float32, jitted, batch 65,536, median of
``repeats`` interleaved runs after a warm-up; the jitted outputs are first checked against the
unjitted ones), and a network **of the compressed widths trained from scratch** with the
teacher's training budget (the same steps, schedule and batch): its metric and seconds.

Targets (issue 22): the Fourier, SDF and PINN models at >= 4x fewer parameters within 0.5 dB
PSNR / 1.1x the teacher's SDF or PINN error, >= 3x faster evaluation on CPU, and no worse than
the from-scratch network of the same size; for SIREN the PSNR-vs-parameters curve of both.
Issue 23 (modified_mlp, pirate_net, residual_mlp, deeponet): >= 3x fewer parameters within 1.1x
the teacher's task error after polish.

``--models`` (a comma list; default all, i.e. issue 22's models; ``tied``: issue 23's
modified_mlp, pirate_net, residual_mlp, deeponet; ``hamiltonian``, a network differentiated
inside ``fn``, and ``neural_ode``, only by name) selects models. The chains (siren, pinn_tanh,
nnx_custom, linen_compact, eqx_mlp) are compressed through the one driver, the Fourier-feature
and SDF networks group by group. Output: ``<out>/zoo_<platform>_<dtype>.{json,png}`` for the
default set, ``zoo_..._tied`` for ``tied``, ``zoo_..._<names>`` for another list.
Issue 23's models polish in float64 (their ``"polish"`` entry, see ``_TIED_POLISH``).

``--polish-dtype`` / ``--polish-steps`` override every model's polish settings (the file name
says so: ``zoo_..._polish_float64_2000``).

``--cache DIR`` keeps every trained network (teacher and from scratch) in ``DIR``, named by a
hash of its configuration, training spec and JAX version, and reads it back on the next run
(with its recorded training seconds) instead of training again.

``--quick`` compiles at XLA optimisation level 0 with the test suite's CPU flags
(:data:`QUICK_XLA_FLAGS`; the run is compilation-bound: 131 s at the default level, 46 s at
level 0 on two loaded cores), so its throughput numbers say nothing: it is a smoke test.

Run (from the repository root)::

    python benchmarks/zoo.py                      # the full run (~1 h estimated)
    python benchmarks/zoo.py --quick --out /tmp/zoo   # small instances, a smoke test
    python benchmarks/zoo.py --models tied        # issue 23's models (gates, g * v, DeepONet)
    python benchmarks/zoo.py --models tied --cache /tmp/zoo_cache   # trained nets kept
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import pickle
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import _workloads as W  # noqa: E402
import image_field as IF  # noqa: E402
import pinn_poisson as PP  # noqa: E402
import zoo_models as Z  # noqa: E402

import jaxcompress as jc  # noqa: E402

NAME = "zoo"
#: Non-analytic activations: derivative matching does not apply.
NON_ANALYTIC = ("fourier_relu",)
TORUS = (0.5, 0.2)
TIMING_BATCH = 65_536
#: XLA flags of ``--quick`` (as ``tests/conftest.py``): compile faster, run slower.
QUICK_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false",
                   "xla_cpu_parallel_codegen_split_count": "1"}

_IMAGE_TRAIN = W.TrainSpec(steps=3000, lr=1e-3, batch=4096)
_SDF_TRAIN = W.TrainSpec(steps=3000, lr=1e-3, batch=4096)
_PINN_TRAIN = W.TrainSpec(steps=4000, lr=1e-3, batch=1024, final=1e-3, warmup=200)
#: Sizing (2 loaded cores, float32, before any full run): 100 training steps of the bench-size
#: SIREN 13 s with compilation, of the PINN 8 s, SDF 6 s, Fourier 5 s; 1000 polish steps on
#: 16,384 points 248 s at SIREN width 190, 111 s at PINN width 55 (hence 500 on 8,192 here).
#: The default models come to about an hour.
#: Issue 23's models polish in float64 (``jc.polish(..., dtype=jnp.float64)``; the result is
#: float32): on the trained modified MLP at k = 9 (width 55, teacher rel. L2 1.66e-4) float32
#: L-BFGS stalled at 2.7e-4 after 500 steps and 2.6e-4 after 2000 (loss 1.3e-8 -> 1.0e-8);
#: float64 reached 2.1e-4 in 500 steps (35 s) and 1.74e-4 in 2000 (127 s, loss 5.1e-10).
_TIED_POLISH = {"steps": 2000, "points": 8192, "dtype": "float64"}
FULL = {
    "stride": 2, "grid": 101, "sdf_points": 16384, "repeats": 7,
    "polish": {"steps": 500, "points": 8192},
    "models": {
        "siren": {"train": W.TrainSpec(steps=2000, lr=1e-4, batch=4096), "orders": [6, 12, 18]},
        "fourier_tanh": {"train": _IMAGE_TRAIN, "orders": [8, 12]},
        "fourier_relu": {"train": _IMAGE_TRAIN, "orders": [8, 12]},
        "sdf_igr": {"train": _SDF_TRAIN, "orders": [4, 5]},
        "linen_compact": {"train": _SDF_TRAIN, "orders": [4, 5]},
        "eqx_mlp": {"train": _SDF_TRAIN, "orders": [4, 5]},
        "pinn_tanh": {"train": _PINN_TRAIN, "orders": [7, 9]},
        "nnx_custom": {"train": _PINN_TRAIN, "orders": [7, 9]},
        "modified_mlp": {"train": _PINN_TRAIN, "orders": [7, 9], "polish": _TIED_POLISH},
        "pirate_net": {"train": _PINN_TRAIN, "orders": [7, 9], "polish": _TIED_POLISH},
        "residual_mlp": {"train": _PINN_TRAIN, "orders": [7, 9], "polish": _TIED_POLISH},
        "deeponet": {"train": W.TrainSpec(steps=20000, lr=1e-3, batch=1024), "orders": [8, 12],
                     "polish": _TIED_POLISH},
        "hamiltonian": {"train": W.TrainSpec(steps=3000, lr=1e-3, batch=1024),
                        "orders": [5, 7]},
        "neural_ode": {"train": W.TrainSpec(steps=3000, lr=1e-3, batch=1024),
                       "orders": [5, 7]},
    },
}
_QUICK_TRAIN = W.TrainSpec(steps=100, lr=3e-3, batch=256, warmup=20, chunk=50)
QUICK = {
    "stride": 8, "grid": 21, "sdf_points": 1024, "repeats": 3,
    "polish": {"steps": 20, "points": 512},
    "models": {**{name: {"train": _QUICK_TRAIN, "orders": [3]} for name in Z.MODELS},
               **{name: {"train": _QUICK_TRAIN, "orders": [3],
                         "polish": {"steps": 20, "points": 512, "dtype": "float64"}}
                  for name in Z.TIED_MODELS},
               **{name: {"train": _QUICK_TRAIN, "orders": [3]}
                  for name in Z.DERIVATIVE_MODELS + Z.ODE_MODELS}},
}
PAPER = {"figure": "none (beyond the paper)",
         "reports": "nothing: the paper has no trained coordinate-network zoo",
         "source": "issue 22, point 6"}


# ------------------------------------------------------------------------------------------------
# Tasks
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    """A training task and its metrics.

    ``loss(fn)`` returns the training loss ``(params, batch) -> scalar`` of the network ``fn``;
    ``metrics(f)`` measures an :class:`Evaluator` ``f`` (a teacher, a student: ``x -> y`` in
    ``f.dtype``); ``primary`` is the metric
    candidates are ranked by, ``higher`` whether larger is better."""

    name: str
    domain: object
    sample: Callable
    loss: Callable
    metrics: Callable
    primary: str
    higher: bool
    low: tuple[float, ...]
    high: tuple[float, ...]


def image_task(cfg) -> Task:
    img, coords, rgb = IF.load_image(cfg["stride"])
    x_all, y_all = jnp.asarray(coords, jnp.float32), jnp.asarray(rgb, jnp.float32)

    def sample(key, n):
        idx = jax.random.randint(key, (n,), 0, x_all.shape[0])
        return x_all[idx], y_all[idx]

    def loss(fn):
        return lambda params, batch: jnp.mean((fn(params, batch[0]) - batch[1]) ** 2)

    def metrics(f):
        pred = jnp.clip(f(x_all.astype(f.dtype)), 0, 1)
        return {"psnr": IF.psnr(float(jnp.mean((pred - y_all) ** 2)))}

    return Task("image", jc.Box([-1.0, -1.0], [1.0, 1.0]), sample, loss, metrics, "psnr", True,
                (-1.0, -1.0), (1.0, 1.0))


def torus_sdf(p):
    """The exact signed distance to the torus of radii :data:`TORUS` around the ``z`` axis."""
    big, small = TORUS
    q = jnp.sqrt(p[..., 0] ** 2 + p[..., 1] ** 2) - big
    return jnp.sqrt(q**2 + p[..., 2] ** 2) - small


def torus_surface(key, n, dtype=jnp.float32):
    """``n`` points on the torus (angles uniform)."""
    big, small = TORUS
    t, f = jnp.moveaxis(jax.random.uniform(key, (n, 2), dtype, 0.0, 2 * jnp.pi), -1, 0)
    ring = big + small * jnp.cos(f)
    return jnp.stack([ring * jnp.cos(t), ring * jnp.sin(t), small * jnp.sin(f)], axis=-1)


def sdf_task(cfg) -> Task:
    n = cfg["sdf_points"]
    k1, k2 = jax.random.split(jax.random.PRNGKey(1234))
    surface = torus_surface(k1, n)
    off = jax.random.uniform(k2, (n, 3), jnp.float32, -1.0, 1.0)

    def sample(key, n):
        ka, kb, kc = jax.random.split(key, 3)
        near = torus_surface(ka, n // 2) + 0.05 * jax.random.normal(kb, (n // 2, 3), jnp.float32)
        x = jnp.concatenate([near, jax.random.uniform(kc, (n - n // 2, 3), jnp.float32, -1, 1)])
        return x, torus_sdf(x)[:, None]

    def loss(fn):
        return lambda params, batch: jnp.mean((fn(params, batch[0]) - batch[1]) ** 2)

    def metrics(f):
        dt = f.dtype
        on = float(jnp.mean(jnp.abs(f(surface.astype(dt))[:, 0])))
        away = float(jnp.mean(jnp.abs(f(off.astype(dt))[:, 0] - torus_sdf(off.astype(dt)))))
        return {"surface": on, "off": away, "sum": on + away}

    return Task("sdf", jc.Box([-1.0] * 3, [1.0] * 3), sample, loss, metrics, "sum", False,
                (-1.0,) * 3, (1.0,) * 3)


def laplacian(fn, params, x):
    """``Delta u`` of ``u = fn(params, .)[0, 0]`` at every row of ``x`` (forward over reverse)."""

    def u(p):
        return fn(params, p[None, :])[0, 0]

    grad = jax.grad(u)

    def lap(p):
        eye = jnp.eye(p.shape[0], dtype=p.dtype)
        return sum(jax.jvp(grad, (p,), (eye[i],))[1][i] for i in range(p.shape[0]))

    return jax.vmap(lap)(x)


def pinn_task(cfg) -> Task:
    g = np.linspace(0.0, 1.0, cfg["grid"])
    grid = jnp.asarray(np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2), jnp.float32)

    def sample(key, n):
        ki, kb = jax.random.split(key)
        return (jax.random.uniform(ki, (n, 2), jnp.float32),
                PP.boundary_points(kb, max(n // 4, 16), jnp.float32))

    def loss(fn):
        def f(params, batch):
            xi, xb = batch
            res = -laplacian(fn, params, xi) - PP.source(xi)
            return jnp.mean(res**2) + PP.BOUNDARY_WEIGHT * jnp.mean(fn(params, xb)[:, 0] ** 2)

        return f

    def metrics(f):
        x = grid.astype(f.dtype)
        u, ue = f(x)[:, 0], PP.exact(x)
        return {"rel_l2": float(jnp.linalg.norm(u - ue) / jnp.linalg.norm(ue)),
                "max_error": float(jnp.max(jnp.abs(u - ue)))}

    return Task("pinn", jc.Box([0.0, 0.0], [1.0, 1.0]), sample, loss, metrics, "rel_l2", False,
                (0.0, 0.0), (1.0, 1.0))


def operator_task(cfg) -> Task:
    """The antiderivative operator on :func:`zoo_models.operator_family`'s input functions:
    ``G(u_j)(y) = int_0^y u_j``; MSE on random ``y``; metric: relative L2 over a grid of ``y``
    and every function."""
    coef, _ = Z.operator_family()
    grid = jnp.linspace(0.0, 1.0, cfg["grid"], dtype=jnp.float32)[:, None]

    def sample(key, n):
        y = jax.random.uniform(key, (n, 1), jnp.float32)
        return y, Z.antiderivative(coef, y)

    def loss(fn):
        return lambda params, batch: jnp.mean((fn(params, batch[0]) - batch[1]) ** 2)

    def metrics(f):
        y = grid.astype(f.dtype)
        u, ue = f(y), Z.antiderivative(coef, y)
        return {"rel_l2": float(jnp.linalg.norm(u - ue) / jnp.linalg.norm(ue)),
                "max_error": float(jnp.max(jnp.abs(u - ue)))}

    return Task("operator", jc.Box([0.0], [1.0]), sample, loss, metrics, "rel_l2", False,
                (0.0,), (1.0,))


def pendulum_field(x):
    """``J grad H = (p, -sin q)`` of the pendulum ``H = p^2 / 2 + (1 - cos q)`` at rows
    ``(q, p)``."""
    return jnp.stack([x[:, 1], -jnp.sin(x[:, 0])], axis=-1)


def hamiltonian_task(cfg) -> Task:
    """A Hamiltonian network's field fitted to the pendulum's on ``[-2, 2]^2``; metric:
    relative L2 over a grid against the true field (``rel_l2``), and, once a teacher is set
    (``metrics.teacher``), against the teacher's field (``teacher_rel_l2``)."""
    g = np.linspace(-2.0, 2.0, cfg["grid"])
    grid = jnp.asarray(np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2), jnp.float32)

    def sample(key, n):
        x = jax.random.uniform(key, (n, 2), jnp.float32, -2.0, 2.0)
        return x, pendulum_field(x)

    def loss(fn):
        return lambda params, batch: jnp.mean((fn(params, batch[0]) - batch[1]) ** 2)

    def metrics(f):
        x = grid.astype(f.dtype)
        u, ue = f(x), pendulum_field(x)
        out = {"rel_l2": float(jnp.linalg.norm(u - ue) / jnp.linalg.norm(ue)),
               "max_error": float(jnp.max(jnp.abs(u - ue)))}
        if metrics.teacher is not None and metrics.teacher is not f:
            ut = metrics.teacher(x)
            out["teacher_rel_l2"] = float(jnp.linalg.norm(u - ut) / jnp.linalg.norm(ut))
        return out

    metrics.teacher = None     # run_model sets the teacher's Evaluator
    return Task("hamiltonian", jc.Box([-2.0, -2.0], [2.0, 2.0]), sample, loss, metrics, "rel_l2",
                False, (-2.0, -2.0), (2.0, 2.0))


#: The neural ODE's damping, step and trajectories (``ode`` task).
ODE_DAMPING, ODE_DT, ODE_STEPS = 0.1, 0.1, 100


def ode_field(y):
    """The damped pendulum's ``(q, p)' = (p, -sin q - 0.1 p)`` at rows ``y = (q, p)``."""
    return jnp.stack([y[:, 1], -jnp.sin(y[:, 0]) - ODE_DAMPING * y[:, 1]], axis=-1)


def ode_task(cfg) -> Task:
    """A neural ODE's vector field trained through one RK4 step of the solver, judged by its
    RK4 trajectories (``rel_l2`` against the true ones; ``teacher_rel_l2``, once a teacher is
    set in ``metrics.teacher``, against the teacher's)."""
    g = np.linspace(-1.0, 1.0, 8)
    y0 = jnp.asarray(np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2), jnp.float32)
    truth = np.asarray(jax.jit(lambda y: Z.rk4(ode_field, y, ODE_DT / 10, 10 * ODE_STEPS))(y0))
    truth = jnp.asarray(truth[::10])

    def sample(key, n):
        y = jax.random.uniform(key, (n, 2), jnp.float32, -2.0, 2.0)
        return y, Z.rk4(ode_field, y, ODE_DT / 10, 10)[-1]     # the true state after dt

    def loss(fn):
        def one_step(params, batch):
            y, target = batch
            nxt = Z.rk4(lambda v: fn(params, v), y, ODE_DT, 1)[-1]
            return jnp.mean((nxt - target) ** 2) / ODE_DT**2
        return one_step

    def trajectory(f):
        run = jax.jit(lambda p, y: Z.rk4(lambda v: f.fn(p, v), y, ODE_DT, ODE_STEPS))
        with jax.default_matmul_precision(C.PRECISION):
            return run(f.params, y0.astype(f.dtype))

    def metrics(f):
        u, ue = trajectory(f), truth.astype(f.dtype)
        out = {"rel_l2": float(jnp.linalg.norm(u - ue) / jnp.linalg.norm(ue)),
               "max_error": float(jnp.max(jnp.abs(u - ue)))}
        if metrics.teacher is not None and metrics.teacher is not f:
            ut = trajectory(metrics.teacher)
            out["teacher_rel_l2"] = float(jnp.linalg.norm(u - ut) / jnp.linalg.norm(ut))
        return out

    metrics.teacher = None     # run_model sets the teacher's Evaluator
    return Task("ode", jc.Box([-2.0, -2.0], [2.0, 2.0]), sample, loss, metrics, "rel_l2",
                False, (-2.0, -2.0), (2.0, 2.0))


_TASKS = {"image": image_task, "sdf": sdf_task, "pinn": pinn_task, "operator": operator_task,
          "hamiltonian": hamiltonian_task, "ode": ode_task}


class Evaluator:
    """``x -> y`` of one network, in ``dtype`` (what the task metrics call)."""

    def __init__(self, fn: Callable, params, dtype):
        self.fn, self.params, self.dtype = fn, params, dtype
        self._jit = jax.jit(fn)

    def __call__(self, x):
        with jax.default_matmul_precision(C.PRECISION):
            return self._jit(self.params, x.astype(self.dtype))


def cast(tree, dtype):
    """Every floating leaf of ``tree`` in ``dtype``."""
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)
        else a, tree)


# ------------------------------------------------------------------------------------------------
# The compression steps (isolated: graph phase 2 replaces what they call, nothing else)
# ------------------------------------------------------------------------------------------------


def methods_for(name: str, k: int) -> dict[str, object]:
    """The methods tried at order ``k``: collocation, and derivative matching when the
    activation is analytic (``jc.best_of`` of the two picks the one with the lower error
    estimate; recorded beside the task-metric choice)."""
    out = {"collocation": jc.collocation(k)}
    if name not in NON_ANALYTIC:
        out["derivative"] = jc.derivative_matching(k)
    return out


def compress_step(net: jc.Network, method, domain):
    """``jc.compress`` on the traced network: ``(Compressed, info, seconds)``."""
    t0 = time.perf_counter()
    with jax.default_matmul_precision(C.PRECISION):
        small, info = jc.compress(net, method, domain=domain)
    jax.block_until_ready(small.params)
    return small, info, time.perf_counter() - t0


def polish_step(small: jc.Compressed, net: jc.Network, domain, cfg: dict):
    """``jc.polish`` of the compressed network toward the teacher (the user's own function):
    ``(Compressed, history)``."""
    with jax.default_matmul_precision(C.PRECISION):
        return jc.polish(small, net, domain=domain, steps=cfg["steps"], points=cfg["points"],
                         dtype=cfg.get("dtype"))


def compressed_program(model: Z.ZooModel, small: jc.Compressed):
    """``(f, params)`` with ``f(params, x)`` the compressed function: the user's own function
    when it takes the smaller leaves, else (linen's shape check) the lowered chain."""
    return small.apply, small.params


# ------------------------------------------------------------------------------------------------
# One model
# ------------------------------------------------------------------------------------------------


def throughput(fns: dict[str, tuple[Callable, object]], task: Task, repeats: int,
               log) -> dict[str, dict]:
    """Points per second of every ``fns[label] = (f, params)`` (float32, jit, batch 65,536),
    after checking the jitted outputs against unjitted ones on the first 256 points."""
    x = jax.random.uniform(jax.random.PRNGKey(7), (TIMING_BATCH, len(task.low)), jnp.float32,
                           jnp.asarray(task.low, jnp.float32), jnp.asarray(task.high, jnp.float32))
    jitted = {}
    for label, (f, params) in fns.items():
        p32 = cast(params, jnp.float32)
        run = jax.jit(f)
        with jax.disable_jit():
            ref = np.asarray(f(p32, x[:256]))
        got = np.asarray(run(p32, x)[:256])
        err = float(np.max(np.abs(got - ref)))
        if not err <= 1e-4 * (1 + float(np.max(np.abs(ref)))):
            raise RuntimeError(f"throughput: jitted {label} differs from unjitted by {err:.2e}")
        jitted[label] = functools.partial(run, p32)
    measured = W.inference_seconds(jitted, x, repeats)
    out = {label: {"points_per_s": TIMING_BATCH / t["median"], "median_s": t["median"],
                   "times_s": t["times"]} for label, t in measured.items()}
    log("  throughput (float32, batch 65,536): " + ", ".join(
        f"{label} {v['points_per_s']:.3g} pts/s" for label, v in out.items()))
    return out


def _cache_path(cache: Path, model: Z.ZooModel, spec: W.TrainSpec) -> Path:
    """The file of a trained model in ``cache``: named by the model and a hash of everything
    the training depends on (model config, training spec, JAX version)."""
    key = json.dumps({"model": model.name, "config": model.config,
                      "spec": dataclasses.asdict(spec), "jax": jax.__version__},
                     sort_keys=True, default=str)
    return cache / f"{model.name}_{hashlib.sha256(key.encode()).hexdigest()[:16]}.pkl"


def train(model: Z.ZooModel, task: Task, spec: W.TrainSpec, log, cache: Path | None = None):
    """``(params, seconds)``: ``model`` trained on ``task``; with ``cache`` (``--cache``) a
    model trained before with the same config, spec and JAX version is read back instead (its
    recorded training seconds with it), and a new one is written there."""
    path = None if cache is None else _cache_path(cache, model, spec)
    if path is not None and path.exists():
        with open(path, "rb") as f:
            saved = pickle.load(f)
        log(f"  (trained params read from {path})")
        return jax.tree.map(jnp.asarray, saved["params"]), saved["train_seconds"]
    params, record = W.train(model.params, task.loss(model.fn), task.sample, spec,
                             log=log)
    params = jax.block_until_ready(params)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump({"params": jax.tree.map(np.asarray, params),
                         "train_seconds": record["train_seconds"]}, f)
    return params, record["train_seconds"]


def run_model(name: str, size: str, mcfg: dict, cfg: dict, task: Task, dtype, log,
              cache: Path | None = None) -> dict:
    spec, polish_cfg = mcfg["train"], mcfg.get("polish", cfg["polish"])
    model = Z.build(name, size, seed=spec.seed)
    log(f"\n## {name} ({task.name} task), hidden {list(model.hidden)}, "
        f"{Z.num_params(model.params):,} parameters; {spec.steps} Adam steps")
    params32, train_s = train(model, task, spec, log, cache)
    params = cast(params32, dtype)
    teacher_f = Evaluator(model.fn, params, dtype)
    teacher = task.metrics(teacher_f)
    if hasattr(task.metrics, "teacher"):   # metrics against the teacher too (hamiltonian)
        task.metrics.teacher = teacher_f
    log(f"  teacher: {_fmt(teacher)} (trained in {train_s:.1f} s)")
    net = jc.trace(model.fn, params, jnp.zeros((4, model.d_in), dtype))
    rows = []
    for k in mcfg["orders"]:
        cands = []
        for label, method in methods_for(name, k).items():
            small, info, secs = compress_step(net, method, task.domain)
            f, p = compressed_program(model, small)
            m = task.metrics(Evaluator(f, p, dtype))
            cands.append({"method": label, "described": method.describe(), "metrics": m,
                          "error_estimate": float(info.error_estimate), "seconds": secs,
                          "hidden": model.hidden_widths(small.params),
                          "settings": model.settings_of(small.params),
                          "num_params": Z.num_params(small.params), "_small": small})
            log(f"  k={k} {label:<12} hidden {cands[-1]['hidden']}: {_fmt(m)}, estimate "
                f"{info.error_estimate:.2e} ({secs:.1f} s)")
        sign = -1.0 if task.higher else 1.0
        best = min(cands, key=lambda c: sign * c["metrics"][task.primary])
        best_of = min(cands, key=lambda c: c["error_estimate"]
                      if math.isfinite(c["error_estimate"]) else math.inf)["method"]
        polished, hist = polish_step(best["_small"], net, task.domain, polish_cfg)
        f, p = compressed_program(model, polished)
        m_pol = task.metrics(Evaluator(f, p, dtype))
        log(f"  k={k} polished ({best['method']}): {_fmt(m_pol)} ({hist.seconds:.1f} s)")
        scratch_model = Z.build(name, size, seed=spec.seed + 1, hidden=best["hidden"],
                                settings=best["settings"])
        s_params, s_secs = train(scratch_model, task, spec, lambda _: None, cache)
        m_scr = task.metrics(Evaluator(scratch_model.fn, cast(s_params, dtype), dtype))
        log(f"  k={k} from scratch, hidden {best['hidden']} {best['settings'] or ''}: "
            f"{_fmt(m_scr)} ({s_secs:.1f} s)")
        timing = throughput({"teacher": (model.fn, params), "compressed": (f, p)}, task,
                            cfg["repeats"], log)
        rows.append({
            "k": k, "hidden": best["hidden"], "settings": best["settings"],
            "num_params": best["num_params"],
            "candidates": [{c: v for c, v in cand.items() if c != "_small"} for cand in cands],
            "best": best["method"], "best_of_choice": best_of,
            "compressed": best["metrics"], "compress_seconds": best["seconds"],
            "polished": m_pol, "polish": hist.to_dict(), "polish_seconds": hist.seconds,
            "scratch": m_scr, "scratch_seconds": s_secs,
            "throughput": timing,
            "speedup": timing["compressed"]["points_per_s"] / timing["teacher"]["points_per_s"],
        })
    return {"task": task.name, "config": {**model.config, "train": dataclasses.asdict(spec),
                                          "orders": mcfg["orders"],
                                          "polish": polish_cfg},
            "num_params": Z.num_params(params), "hidden": list(model.hidden),
            "teacher": teacher, "train_seconds": train_s, "primary": task.primary,
            "higher_is_better": task.higher, "rows": rows}


def _fmt(m: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in m.items() if isinstance(v, float))


# ------------------------------------------------------------------------------------------------
# Targets, plot, main
# ------------------------------------------------------------------------------------------------


def targets(result: dict) -> dict:
    """Per model and order: the issue's targets, each True / False."""
    out = {}
    for name, r in result["models"].items():
        t = r["teacher"]
        out[name] = []
        for row in r["rows"]:
            pol = row["polished"]
            if r["task"] == "image":
                within = pol["psnr"] >= t["psnr"] - 0.5
                beats = pol["psnr"] >= row["scratch"]["psnr"]
            elif r["task"] == "sdf":
                within = pol["surface"] <= 1.1 * t["surface"] and pol["off"] <= 1.1 * t["off"]
                beats = pol["sum"] <= row["scratch"]["sum"]
            else:
                within = pol["rel_l2"] <= 1.1 * t["rel_l2"]
                beats = pol["rel_l2"] <= row["scratch"]["rel_l2"]
            out[name].append({"k": row["k"], "params_ratio": r["num_params"] / row["num_params"],
                              "4x_fewer": r["num_params"] >= 4 * row["num_params"],
                              "within_tolerance": bool(within), "3x_faster": row["speedup"] >= 3,
                              "no_worse_than_scratch": bool(beats)})
            if name in Z.TIED_MODELS:      # issue 23's target: >= 3x fewer within 1.1x
                out[name][-1]["3x_fewer"] = r["num_params"] >= 3 * row["num_params"]
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogFormatterSciNotation, NullFormatter

    names = list(result["models"])
    cols = min(4, max(1, len(names)))
    blocks = -(-len(names) // cols)          # each model: its metric above its speed-up
    fig, axes = plt.subplots(2 * blocks, cols, figsize=(4.4 * cols, 6.6 * blocks),
                             squeeze=False)
    for a in range(2 * blocks):
        for b in range(cols):
            if (a // 2) * cols + b >= len(names):
                axes[a, b].set_visible(False)
    for n, name in enumerate(names):
        r = result["models"][name]
        key = r["primary"]
        j, top = n % cols, 2 * (n // cols)
        ax = axes[top, j]
        params = [row["num_params"] for row in r["rows"]]
        for label, color in (("compressed", "C0"), ("polished", "C3"), ("scratch", "C7")):
            ax.plot(params, [row[label][key] for row in r["rows"]], "o-", color=color,
                    label={"scratch": "trained from scratch (same budget)"}.get(label, label))
        ax.plot([r["num_params"]], [r["teacher"][key]], "k*", ms=10, label="teacher")
        if r["higher_is_better"]:
            ax.axhline(r["teacher"][key] - 0.5, color="k", ls=":", lw=1,
                       label="teacher - 0.5 dB (target)")
        else:
            ax.axhline(1.1 * r["teacher"][key], color="k", ls=":", lw=1,
                       label="1.1x the teacher's sum (target: each part)" if key == "sum"
                       else "1.1x the teacher (target)")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        if not r["higher_is_better"]:
            ax.set_yscale("log")
            # label the minor ticks too: most panels span less than a decade
            ax.yaxis.set_minor_formatter(LogFormatterSciNotation(labelOnlyBase=False,
                                                                 minor_thresholds=(2, 0.5)))
            ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xlabel("parameters")
        ax.set_ylabel({"psnr": "PSNR [dB]", "sum": "mean |SDF error| on + off surface",
                       "rel_l2": "relative L2 error"}[key])
        ax.set_title(f"{name} ({r['task']}), teacher {r['hidden']}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        ax = axes[top + 1, j]
        ks = [str(row["k"]) for row in r["rows"]]
        ax.bar(ks, [row["speedup"] for row in r["rows"]], color="C2")
        ax.axhline(3.0, color="k", ls="--", lw=1, label="issue 22's target 3x")
        ax.set_xlabel("order k")
        ax.set_ylabel("evaluation speed-up over the teacher")
        ax.set_title("float32, jit, batch 65,536 (median)", fontsize=9)
        ax.legend(fontsize=7)
    env = result["env"]
    title = (f"The zoo: trained coordinate networks, compressed ({result['dtype']}); "
             f"{C.device_label(env)}; load avg {env['load_avg_1_5_15']['start']}")
    # (wrapped to the figure: one model's column is narrower than the line)
    fig.suptitle(textwrap.fill(title, width=int(55 * cols)), fontsize=9)
    C.save_figure(fig, path, rect=(0, 0, 1, 0.95))


def parse(argv):
    p = C.parser(__doc__, default_dtype="float32")
    known = Z.MODELS + Z.TIED_MODELS + Z.DERIVATIVE_MODELS + Z.ODE_MODELS
    p.add_argument("--models", default="all",
                   help=f"comma-separated models of {known}, or 'all' (the default: "
                   f"{Z.MODELS}), or 'tied' ({Z.TIED_MODELS}, issue 23)")
    p.add_argument("--polish-dtype", default=None, choices=["float32", "float64"],
                   help="polish every model in this dtype (jc.polish(..., dtype=)), overriding "
                   "the configuration (default: issue 23's models float64, the others float32)")
    p.add_argument("--polish-steps", type=int, default=None,
                   help="polish steps for every model, overriding the configuration")
    p.add_argument("--cache", type=Path, default=None,
                   help="a folder for trained teachers and from-scratch students: a model "
                   "trained before with the same config, spec and JAX version is read back "
                   "(its recorded training seconds too) instead of trained again")
    args = p.parse_args(argv)
    groups = {"all": list(Z.MODELS), "tied": list(Z.TIED_MODELS)}
    models = groups[args.models] if args.models in groups else [
        m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in known]
    if bad or not models:
        p.error(f"--models: expected names of {known} or 'all', got {args.models!r}")
    # the default set writes zoo_<platform>_<dtype>.json; another set its own file beside it
    args.suffix = {tuple(groups["all"]): "", tuple(groups["tied"]): "_tied"}.get(
        tuple(models), "_" + "-".join(models))
    args.models = models
    if args.quick:     # before JAX starts its CPU backend, which reads XLA_FLAGS once
        for flag, value in QUICK_XLA_FLAGS.items():
            if flag not in os.environ.get("XLA_FLAGS", ""):
                flags = f"{os.environ.get('XLA_FLAGS', '')} --{flag}={value}"
                os.environ["XLA_FLAGS"] = flags.strip()
    cfg = dict(QUICK if args.quick else FULL)
    if args.polish_dtype is not None or args.polish_steps is not None:
        if args.polish_steps is not None and args.polish_steps < 1:
            p.error(f"--polish-steps: expected a positive int, got {args.polish_steps}")
        override = {k: v for k, v in (("dtype", args.polish_dtype),
                                      ("steps", args.polish_steps)) if v is not None}
        cfg["models"] = {name: {**m, "polish": {**m.get("polish", cfg["polish"]), **override}}
                         for name, m in cfg["models"].items()}
        # a run with other polish settings writes its own file
        args.suffix += "_polish" + "".join(f"_{v}" for v in override.values())
    return args, cfg


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun  # --replot
    start, args, cfg, env = begun
    dtype = jnp.dtype(args.dtype)
    size = "small" if args.quick else "bench"
    C.print_header(env, args.dtype, [
        f"models {args.models} ({size} instances); training float32 (optax Adam), compression, "
        f"polish and task metrics in {args.dtype}, throughput float32 at batch {TIMING_BATCH:,}",
        f"polish {cfg['polish']}" + "".join(
            f", {n}: {cfg['models'][n]['polish']}" for n in args.models
            if "polish" in cfg["models"][n]) +
        f"; image stride {cfg['stride']}, PINN grid {cfg['grid']}"])
    tasks: dict[str, Task] = {}
    models = {}
    with jax.numpy_rank_promotion("allow"):
        for name in args.models:
            tname = Z.TASKS[name]
            if tname not in tasks:
                tasks[tname] = _TASKS[tname](cfg)
            models[name] = run_model(name, size, cfg["models"][name], cfg, tasks[tname],
                                     dtype, lambda m: print(m, flush=True), args.cache)
    C.finish(env, start)
    result = {"benchmark": NAME, "paper": PAPER, "env": env, "device": env["device"],
              "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
              "config": {**{k: v for k, v in cfg.items() if k != "models"},
                         "models": {n: {**cfg["models"][n], "train": dataclasses.asdict(
                             cfg["models"][n]["train"])} for n in args.models},
                         "torus": TORUS, "timing_batch": TIMING_BATCH},
              "models": models}
    result["targets"] = targets(result)
    paths = C.save_results(args, env, NAME, result, plot, suffix=args.suffix)
    print("\n## per model and order: params, task metric teacher / compressed / polished / "
          "from scratch, speed-up")
    for name, r in models.items():
        key = r["primary"]
        for row, t in zip(r["rows"], result["targets"][name], strict=True):
            print(f"{name:<14} k={row['k']:<3} {r['num_params']:>7,} -> {row['num_params']:>7,} "
                  f"({t['params_ratio']:.1f}x)  {key} {r['teacher'][key]:.4g} / "
                  f"{row['compressed'][key]:.4g} / {row['polished'][key]:.4g} / "
                  f"{row['scratch'][key]:.4g}  (compress+polish "
                  f"{row['compress_seconds'] + row['polish_seconds']:.1f} s, scratch "
                  f"{row['scratch_seconds']:.1f} s)  {row['speedup']:.1f}x faster")
    C.print_written(paths, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
