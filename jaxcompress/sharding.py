"""Compression sharded over devices: hidden neurons on a mesh axis, distributed selection.

:func:`shard` places a network's hidden neurons across one axis of a :class:`jax.sharding.Mesh`
(within a host, or across hosts after :func:`jax.distributed.initialize`):

======================================  =========================================================
``kernel`` of layer 1 ``(d_in, d_1)``   ``P(None, axis)``: split by its output columns
``kernel`` of layer ``l >= 2``          ``P(axis, None)``: split by its input rows (the
                                        previous hidden layer's neurons)
``bias`` of a hidden layer              ``P(axis)``: with its neurons
``bias`` of the output layer            ``P()``: replicated
======================================  =========================================================

so no device ever holds a whole hidden kernel (each holds ``1/n`` of every kernel). Every
hidden width must be divisible by the axis size.

:func:`jaxcompress.compress` on sharded params stays sharded (the same code path as on one
device; ours, not the paper's):

* **features** are computed with each device holding only its neurons' columns: the library
  asks XLA (GSPMD) to keep every pre-activation split by neurons, so the contraction over the
  previous layer's neurons becomes a reduce-scatter, and the Taylor pass (or the activations at
  collocation points) of each neuron runs on the device that holds it;
* **selection** is a tournament (:func:`tournament_step`, in :func:`jax.shard_map`): every
  device runs the method's selector on its own columns and nominates ``min(width, n_local)``
  candidates; the candidates (``D x n_devices width`` features, their next-layer rows) are
  gathered and the selector runs again among them, identically on every device. This is
  exact whenever the features have rank ``<= width`` (derivative features with
  ``D_k <= width``: any basis of the column space reproduces every column), and is the
  tournament pivoting of rank-revealing QR otherwise (Grigori, Demmel & Xiang 2011): the first
  pivot is the global one, later ones may differ from a single device's greedy choice;
* **re-weighting** contracts over the sharded neurons: each device solves for its own columns'
  coefficients against the chosen basis and multiplies by its own rows of the next kernel, and
  one ``psum`` adds the ``width x d_{l+1}`` results.

The compressed network (``D_k`` wide) comes back replicated on the same mesh. How close the
tournament is to the single-device selection is measured by ``tests/test_sharding.py`` and
``benchmarks/input_dimension.py``.

References:
  Grigori, Demmel & Xiang (2011), "CALU: a communication optimal LU factorization algorithm"
  (tournament pivoting); JAX's ``jax.sharding`` and ``jax.shard_map``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["NEURONS", "neuron_specs", "params_mesh", "shard", "tournament_step"]

HIGHEST = jax.lax.Precision.HIGHEST

#: The default name of the mesh axis the neurons are split over.
NEURONS = "neurons"
#: Candidates each device nominates in the tournament, per kept neuron (capped by its columns).
CANDIDATES = 2

_ACTIVE: contextvars.ContextVar[tuple[Mesh, str] | None] = contextvars.ContextVar(
    "jaxcompress_neuron_sharding", default=None)


def neuron_specs(num_layers: int, axis: str = NEURONS) -> list[dict[str, P]]:
    """The partition specs of :func:`shard` for a network of ``num_layers`` dense layers."""
    specs = []
    for i in range(num_layers):
        kernel = P(None, axis) if i == 0 else P(axis, None)
        bias = P(axis) if i < num_layers - 1 else P()
        specs.append({"kernel": kernel, "bias": bias})
    return specs


def shard(params, mesh: Mesh, axis: str = NEURONS) -> list[dict[str, jax.Array]]:
    """Place every hidden layer's neurons across the mesh axis ``axis`` (see the module docstring).

    Args:
      params: one network (host or device arrays; every process passes the same values when
        running on several hosts).
      mesh: a :class:`jax.sharding.Mesh` with an axis named ``axis`` (any other axes replicate).
      axis: the mesh axis the neurons are split over.

    Returns:
      The params as global :class:`jax.Array` s with :class:`~jax.sharding.NamedSharding` s: each
      device holds ``1/n`` of every kernel and of every hidden bias. The placement uses the mesh's
      devices with ``Auto`` axes (:func:`auto_mesh`), whatever the given mesh's axis types.
    """
    from jaxcompress.mlp import validate_params

    where = "shard"
    params = validate_params(params, where=where)
    if params[0]["kernel"].ndim != 2:
        raise ValueError(f"{where}: expected one network (2-D kernels); shard a stack's members "
                         "separately")
    if not isinstance(mesh, Mesh):
        raise TypeError(f"{where}: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"{where}: the mesh has axes {mesh.axis_names}; no axis {axis!r}")
    mesh = auto_mesh(mesh)
    n_dev = mesh.shape[axis]
    widths = [int(p["kernel"].shape[1]) for p in params[:-1]]
    bad = [(l, w) for l, w in enumerate(widths, start=1) if w % n_dev]
    if bad:
        raise ValueError(f"{where}: hidden widths must be divisible by the {n_dev} devices of axis "
                         f"{axis!r}; layer(s) {', '.join(f'{l} (width {w})' for l, w in bad)} "
                         "are not")
    out = []
    for layer, spec in zip(params, neuron_specs(len(params), axis), strict=True):
        placed = {}
        for name in ("kernel", "bias"):
            host = np.asarray(layer[name])
            sharding = NamedSharding(mesh, spec[name])
            placed[name] = jax.make_array_from_callback(
                host.shape, sharding, lambda idx, host=host: host[idx])
        out.append(placed)
    return out


def auto_mesh(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis of type ``Auto`` (the same devices and names).

    The compression lets XLA propagate shardings (GSPMD) and constrains them with
    :func:`jax.lax.with_sharding_constraint`, which needs ``Auto`` axes; meshes from
    :func:`jax.make_mesh` default to ``Explicit`` ones.
    """
    types = getattr(mesh, "axis_types", None)
    if types is None or all(t == jax.sharding.AxisType.Auto for t in types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names,
                axis_types=(jax.sharding.AxisType.Auto,) * len(mesh.axis_names))


def params_mesh(params) -> tuple[Mesh, str] | None:
    """``(mesh, axis)`` when ``params`` were placed by :func:`shard` (or alike), else ``None``.

    Looks at the first kernel: a :class:`~jax.sharding.NamedSharding` whose last dimension is
    split over a mesh axis with more than one device. Tracers (inside an outer ``jit``) carry no
    placement and give ``None``.
    """
    kernel = params[0]["kernel"]
    if isinstance(kernel, jax.core.Tracer) or not isinstance(kernel, jax.Array):
        return None
    sharding = getattr(kernel, "sharding", None)
    if not isinstance(sharding, NamedSharding) or len(sharding.spec) < 2:
        return None
    axis = sharding.spec[1]
    if not isinstance(axis, str) or sharding.mesh.shape[axis] < 2:
        return None
    return sharding.mesh, axis


@contextlib.contextmanager
def neuron_sharding(spec: tuple[Mesh, str] | None) -> Iterator[None]:
    """While tracing inside this context, :func:`constrain_neurons` splits arrays by neurons."""
    token = _ACTIVE.set(spec)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active() -> tuple[Mesh, str] | None:
    """The ``(mesh, axis)`` of the compression being traced, or ``None``."""
    return _ACTIVE.get()


def constrain_neurons(x: jax.Array) -> jax.Array:
    """Ask XLA to keep ``x`` split by its last axis (neurons) during a sharded compression.

    A no-op (the identity, decided while tracing) outside :func:`neuron_sharding`.
    """
    spec = _ACTIVE.get()
    if spec is None or x.shape[-1] % spec[0].shape[spec[1]]:
        return x
    mesh, axis = spec
    return jax.lax.with_sharding_constraint(
        x, NamedSharding(mesh, P(*(None,) * (x.ndim - 1), axis)))


def _check_selector(selector) -> None:
    if getattr(selector, "name", None) == "random":
        raise ValueError("compress: the random baseline has no sharded form (its choice would "
                         "depend on the number of devices); use it on one device")


def tournament_step(features, out_kernel: jax.Array, width: int, selector, *,
                    target: jax.Array | None = None):
    """:func:`jaxcompress.compress_layer` with the neurons split over the active mesh axis.

    See the module docstring (tournament selection, local re-weighting, one ``psum``). Returns
    ``(kept, new_out_kernel, LayerInfo)`` like the single-device step, all replicated.
    """
    from jaxcompress.compression import LayerInfo
    from jaxcompress.select import (
        coefficients_from_r,
        default_rtol,
        lstsq_coefficients,
        reduce_rows,
    )

    mesh, axis = _ACTIVE.get()
    _check_selector(selector)
    n_dev = mesh.shape[axis]
    z, scale = features.z, features.scale
    n = z.shape[1]
    n_loc = n // n_dev
    cand = min(CANDIDATES * width, n_loc)
    rtol = getattr(selector, "rtol", None)
    rtol = default_rtol(z.dtype) if rtol is None else rtol
    baseline = bool(getattr(selector, "baseline", False))
    scale = jnp.ones((z.shape[0],), z.dtype) if scale is None else scale
    has_target = target is not None
    target = jnp.zeros((z.shape[0], out_kernel.shape[1]), z.dtype) if target is None else target

    def local(z_loc, k_loc, scale, target):
        zs = z_loc * scale[:, None]
        # the next layer's pre-activation features, for output-aware selectors and the residual
        before = jax.lax.psum(jnp.matmul(z_loc, k_loc, precision=HIGHEST), axis)
        goal = target if has_target else before
        goal_s = goal * scale[:, None]
        zr, tr = reduce_rows(zs, goal_s)
        nominated = selector(zr, cand, out_kernel=k_loc, target=tr, layer=features.layer)
        pick = nominated.perm[:cand]
        offset = jax.lax.axis_index(axis).astype(jnp.int32) * n_loc
        cands = jax.lax.all_gather(zs[:, pick], axis, axis=1, tiled=True)
        cands_raw = jax.lax.all_gather(z_loc[:, pick], axis, axis=1, tiled=True)
        cand_k = jax.lax.all_gather(k_loc[pick], axis, axis=0, tiled=True)
        cand_idx = jax.lax.all_gather(offset + pick, axis, axis=0, tiled=True)
        cr, ctr = reduce_rows(cands, goal_s)
        final = selector(cr, width, out_kernel=cand_k, target=ctr, layer=features.layer)
        chosen = final.perm[:width]
        kept = cand_idx[chosen]
        basis = cands[:, chosen]
        if baseline:
            coef_loc, _ = lstsq_coefficients(basis, jnp.arange(width, dtype=jnp.int32), width,
                                             rtol, rhs=zs)
            live = jnp.ones((width,), bool)
        else:
            q, r = jnp.linalg.qr(basis, mode="reduced")
            rows = r.shape[0]
            rhs = jnp.matmul(q.T, zs, precision=HIGHEST)
            if rows < width:  # fewer feature rows than kept neurons: pad with zero rows
                pad = width - rows
                r = jnp.concatenate([r, jnp.zeros((pad, width), r.dtype)])
                rhs = jnp.concatenate([rhs, jnp.zeros((pad, rhs.shape[1]), rhs.dtype)])
            coef_loc = coefficients_from_r(jnp.concatenate([r, rhs], axis=1), final.rank)
            coef_loc = coef_loc[:, width:]
            live = jnp.arange(width, dtype=jnp.int32) < final.rank
        if has_target:
            new_kernel, _ = lstsq_coefficients(cands_raw[:, chosen],
                                               jnp.arange(width, dtype=jnp.int32), width, rtol,
                                               rhs=target)
        else:
            new_kernel = jax.lax.psum(jnp.matmul(coef_loc, k_loc, precision=HIGHEST), axis)
        after = jnp.matmul(cands_raw[:, chosen], new_kernel, precision=HIGHEST)
        residual = jnp.max(jnp.abs(after - goal))
        max_coef = jax.lax.pmax(jnp.max(jnp.where(live[:, None], jnp.abs(coef_loc), 0)), axis)
        return kept, new_kernel, final.rank, residual, max_coef, final.swaps

    fn = jax.shard_map(local, mesh=mesh,
                       in_specs=(P(None, axis), P(axis, None), P(), P()),
                       out_specs=(P(), P(), P(), P(), P(), P()), check_vma=False)
    kept, new_kernel, rank, residual, max_coef, swaps = fn(z, out_kernel, scale, target)
    info = LayerInfo(
        kept=kept, rank=rank, residual=residual, max_coef=max_coef, swaps=swaps,
        layer=features.layer, order=features.order, num_features=features.num_features,
        width_in=n, width_out=width, num_rows=z.shape[0], coord_dim=features.coord_dim)
    return kept, new_kernel, info


def live_bytes(fn, *args: Any) -> int:
    """Bytes one device holds for the compiled ``fn(*args)``: arguments plus temporaries.

    From XLA's :meth:`~jax.stages.Compiled.memory_analysis` (per device for SPMD programs);
    used by the tests to check that sharding divides the memory.
    """
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return int(stats.argument_size_in_bytes + stats.temp_size_in_bytes)

