"""Helpers shared by the coordinate-network workloads (``image_field.py``, ``pinn_poisson.py``).

* :func:`train` — optax Adam with a warm-up cosine schedule, ``lax.scan`` chunks inside ``jit``,
  progress lines between chunks;
* :func:`load_or_train` — cache a trained teacher as ``.npz`` (the layout of
  ``benchmarks/teachers.py``), reused only when its stored configuration matches;
* :data:`METHODS` and :func:`compress_all` — the four compressions every workload compares:
  derivative matching, collocation (OMP, forward order), collocation + ``jc.polish`` and the
  magnitude-pruning baseline, each timed;
* :func:`inference_seconds` — median wall times of jitted forward passes, interleaved, after a
  warm-up.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: name -> (the method's name in ``_common.METHODS``, polish afterwards)
METHODS: dict[str, tuple[str, bool]] = {
    "derivative": ("derivative", False),
    "collocation": ("collocation+omp/fwd", False),
    "collocation+polish": ("collocation+omp/fwd", True),
    "weight_norm": ("weight_norm+lstsq", False),
}
LABELS = {
    "derivative": "derivative matching (the paper)",
    "collocation": "collocation + OMP, forward (data-free)",
    "collocation+polish": "collocation + jc.polish (data-free)",
    "weight_norm": "largest weights + least squares (magnitude pruning)",
}
COLORS = {"derivative": "C0", "collocation": "C2", "collocation+polish": "C3",
          "weight_norm": "C7"}


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """Adam with a linear warm-up to ``lr`` and a cosine decay to ``lr * final``."""

    steps: int
    lr: float
    batch: int
    final: float = 1e-2
    warmup: int = 100
    chunk: int = 250
    seed: int = 0


def train(params, loss_fn: Callable, sample: Callable, spec: TrainSpec, *,
          log: Callable[[str], None] = print, metric: Callable | None = None):
    """Minimise ``loss_fn(params, batch)`` with ``batch = sample(key, spec.batch)``.

    ``metric(params) -> str`` (optional) is printed after every chunk. Returns the final params
    and a record with the chunk losses and the training time.
    """
    import jax
    import optax

    sched = optax.warmup_cosine_decay_schedule(spec.lr / 100, spec.lr, spec.warmup, spec.steps,
                                               spec.lr * spec.final)
    opt = optax.adam(sched)
    state = opt.init(params)

    @jax.jit
    def chunk(p, s, key):
        def step(carry, k):
            p, s = carry
            loss, g = jax.value_and_grad(loss_fn)(p, sample(k, spec.batch))
            upd, s = opt.update(g, s, p)
            return (optax.apply_updates(p, upd), s), loss

        (p, s), losses = jax.lax.scan(step, (p, s), jax.random.split(key, spec.chunk))
        return p, s, losses.mean()

    key = jax.random.PRNGKey(spec.seed)
    t0 = time.perf_counter()
    losses = []
    n_chunks = -(-spec.steps // spec.chunk)
    for c in range(n_chunks):
        params, state, loss = chunk(params, state, jax.random.fold_in(key, c))
        losses.append(float(loss))
        if (c + 1) % max(1, n_chunks // 6) == 0 or c == n_chunks - 1:
            extra = "" if metric is None else f", {metric(params)}"
            log(f"  step {(c + 1) * spec.chunk:>6}: loss {losses[-1]:.3e}{extra}  "
                f"({time.perf_counter() - t0:.0f} s)")
    return params, {"chunk_losses": losses, "train_seconds": time.perf_counter() - t0,
                    "spec": dataclasses.asdict(spec)}


def load_or_train(path: Path, config: dict[str, Any], make: Callable[[], tuple],
                  log: Callable[[str], None] = print):
    """Reuse ``path`` when its stored ``config`` equals ``config``; else ``make()`` and save.

    ``make() -> (params, record)``; the record is stored with the config. Returns
    ``(float32 NumPy params, record)``.
    """
    import numpy as np
    import teachers as T

    config = json.loads(json.dumps(config))
    if path.exists():
        params, record = T.load_teacher(path)
        if record.get("config") == config:
            log(f"  loaded {path}")
            return params, record
        log(f"  {path} has a different configuration; retraining")
    params, record = make()
    params = [{k: np.asarray(v, np.float32) for k, v in layer.items()} for layer in params]
    record = {**record, "config": config}
    T.save_teacher(path, params, record)
    return params, record


def compress_all(jc, teacher, *, activation: str, order: int, domain, polish_kwargs: dict,
                 methods=tuple(METHODS), oversample: int = 4) -> dict[str, dict]:
    """Every method of :data:`METHODS` at order ``order``: ``{name: {params, seconds, ...}}``.

    ``domain`` (a Ball, Box or Parameterization) is where the methods compress and where
    ``jc.polish`` draws its points. The polished student starts from the ``"collocation"`` one
    (compressed once); its ``seconds`` are the polish time alone (``compress_seconds`` holds the
    compression's).
    """
    import _common as C
    import jax

    out = {}
    cache = {}
    for name in methods:
        base, polish = METHODS[name]
        if base not in cache:
            method = C.make_method(jc, base, order, oversample=oversample)
            t0 = time.perf_counter()
            small, info = jc.compress(teacher, method, activation=activation, domain=domain)
            small = jax.block_until_ready(small)
            cache[base] = (small, info, time.perf_counter() - t0, method.describe())
        small, info, secs, described = cache[base]
        row = {"params": small, "seconds": secs, "compress_seconds": secs, "method": described}
        if polish:
            small, hist = jc.polish(small, teacher, activation=activation, domain=domain,
                                    info=info, **polish_kwargs)
            row = {**row, "params": small, "seconds": hist.seconds, "polish": hist.to_dict()}
        out[name] = row
    return out


def inference_seconds(fns: dict[str, Callable], x, repeats: int) -> dict[str, dict]:
    """Wall time of every ``fns[label](x)`` (each jitted by the caller): ``{label: {"median",
    "times"}}`` in seconds.

    Each function is called once to compile, then the ``repeats`` rounds interleave the
    functions (teacher, student, teacher, ...), so a change in the load of a shared machine
    during the measurement falls on all of them alike; the median of each is reported.
    """
    import jax

    for fn in fns.values():
        jax.block_until_ready(fn(x))
    times: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(x))
            times[label].append(time.perf_counter() - t0)
    return {label: {"median": statistics.median(t), "times": t} for label, t in times.items()}
