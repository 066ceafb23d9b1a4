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
* **selection** is the selector's own distributed form
  (:meth:`jaxcompress.select.Selector.distributed_select`, in :func:`jax.shard_map`, called by
  :func:`sharded_step`, which the one per-layer step :func:`jaxcompress.layer.compress_layer` calls
  when
  it is given a placement). For the greedy selectors it keeps the neurons one device keeps,
  whatever the number of devices (up to rounding and exact ties;
  :attr:`jaxcompress.select.Selector.device_independent`): :class:`~jaxcompress.PivotedQR` and
  :class:`~jaxcompress.select.GreedyGS` run the greedy column pivoting over every device's columns
  (:func:`jaxcompress.select.greedy_pivoted_qr` with a mesh axis: at each of the ``width`` steps
  every device finds its largest remaining residual norm, one all-gather of ``(value, global
  index)`` per device picks the global one, ties to the smallest index as LAPACK's, the owner's
  residual column is broadcast by a ``psum`` and every device orthogonalises its own columns
  against it); :class:`~jaxcompress.MaxVol` continues with the swaps taken at the global largest
  ``|C_ij|`` (:func:`jaxcompress.select.maxvol`), :class:`~jaxcompress.OMP` takes the global best
  score at each step (:func:`jaxcompress.select.output_greedy`), and the
  :class:`~jaxcompress.select.WeightNorm` baseline's tournament is exact (the global top norms are
  among
  every device's nominees). Per step: ``n_devices`` pairs gathered and one column of ``rows``
  numbers summed. The selectors without a device-independent form
  (:class:`~jaxcompress.select.Exhaustive`, user selectors that do not override it) keep the
  default, a
  tournament (:func:`jaxcompress.select.tournament_select`): every device runs the selector on its
  own columns and nominates ``min(2 width, n_local)`` candidates, the candidates are gathered and
  the selector runs again among them. That is exact whenever the features have rank ``<= width``
  and is the tournament pivoting of rank-revealing QR otherwise (Grigori, Demmel & Xiang 2011):
  later pivots may differ from a single device's;
* **re-weighting** contracts over the sharded neurons: each device solves for its own columns'
  coefficients against the chosen basis and multiplies by its own rows of the next kernel, and
  one ``psum`` adds the ``width x d_{l+1}`` results.

The placement is explicit: :func:`params_placement` reads it from the arrays' own shardings
and :func:`jaxcompress.compress` passes it, as a :class:`~jaxcompress.placement.Placement`
argument, to the feature maps, the evaluation code and the per-layer step. The compressed
network (``D_k`` wide) comes back replicated on the same mesh. ``tests/test_sharding.py``
checks that 1, 2 and 4 devices keep the same neurons in the same pivot order;
``benchmarks/sharded_selection.py`` measures the error ratio and the time against one device.

References:
  Grigori, Demmel & Xiang (2011), "CALU: a communication optimal LU factorization algorithm"
  (tournament pivoting); JAX's ``jax.sharding`` and ``jax.shard_map``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxcompress.features import LayerFeatures
from jaxcompress.mlp import HIGHEST, validate_params
from jaxcompress.placement import Placement
from jaxcompress.select import Selector, basis_coefficients, gather_columns, lstsq_coefficients

__all__ = ["NEURONS", "check_selector", "leaves_placement", "neuron_specs", "params_placement",
           "place_leaves", "shard", "sharded_step"]

#: The default name of the mesh axis the neurons are split over.
NEURONS = "neurons"
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
    where = "shard"
    params = validate_params(params, where=where)
    if params[0]["kernel"].ndim != 2:
        raise ValueError(f"{where}: expected one network (2-D kernels); shard a stack's members "
                         "separately")
    mesh, n_dev = _mesh_axis(mesh, axis, where)
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


def _mesh_axis(mesh, axis: str, where: str) -> tuple[Mesh, int]:
    """The mesh (with automatic axis types) and the number of devices along ``axis``, checked."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"{where}: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis not in mesh.axis_names:
        raise ValueError(f"{where}: the mesh has axes {mesh.axis_names}; no axis {axis!r}")
    mesh = auto_mesh(mesh)
    return mesh, mesh.shape[axis]


def place_leaves(leaves, split: dict[int, int], mesh: Mesh, axis: str = NEURONS) -> list:
    """Every leaf as a global :class:`jax.Array`: leaf ``i`` in ``split`` divided along its axis
    ``split[i]`` over the mesh axis ``axis``, the others replicated (what :func:`shard` does to a
    params list, for the leaves of any network's neuron groups)."""
    where = "shard"
    mesh, n_dev = _mesh_axis(mesh, axis, where)
    bad = sorted({(i, np.shape(leaves[i])[ax]) for i, ax in split.items()
                  if np.shape(leaves[i])[ax] % n_dev})
    if bad:
        raise ValueError(f"{where}: the neuron groups' widths must be divisible by the {n_dev} "
                         f"devices of axis {axis!r}; leaves "
                         f"{', '.join(f'{i} (width {w})' for i, w in bad)} are not")
    out = []
    for i, leaf in enumerate(leaves):
        host = np.asarray(leaf)
        spec = [None] * host.ndim
        if i in split:
            spec[split[i]] = axis
        sharding = NamedSharding(mesh, P(*spec))
        out.append(jax.make_array_from_callback(host.shape, sharding,
                                                lambda idx, host=host: host[idx]))
    return out


def leaves_placement(leaves, leaf: int, leaf_axis: int) -> Placement | None:
    """The :class:`~jaxcompress.placement.Placement` of a network whose neuron-group leaf
    ``leaf`` is split along ``leaf_axis`` over a mesh axis with more than one device, else
    ``None`` (tracers, inside an outer ``jit``, carry no placement)."""
    value = leaves[leaf]
    if isinstance(value, jax.core.Tracer) or not isinstance(value, jax.Array):
        return None
    sharding = value.sharding
    if not isinstance(sharding, NamedSharding) or len(sharding.spec) <= leaf_axis:
        return None
    axis = sharding.spec[leaf_axis]
    if not isinstance(axis, str) or sharding.mesh.shape[axis] < 2:
        return None
    return Placement(sharding.mesh, axis)


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


def params_placement(params) -> Placement | None:
    """The :class:`~jaxcompress.placement.Placement` of ``params`` placed by :func:`shard` (or
    alike), else ``None``.

    Looks at the first kernel: a :class:`~jax.sharding.NamedSharding` whose last dimension is
    split over a mesh axis with more than one device. Tracers (inside an outer ``jit``) carry no
    placement and give ``None``.
    """
    kernel = params[0]["kernel"]
    if isinstance(kernel, jax.core.Tracer) or not isinstance(kernel, jax.Array):
        return None
    sharding = kernel.sharding
    if not isinstance(sharding, NamedSharding) or len(sharding.spec) < 2:
        return None
    axis = sharding.spec[1]
    if not isinstance(axis, str) or sharding.mesh.shape[axis] < 2:
        return None
    return Placement(sharding.mesh, axis)


def check_selector(selector: Selector, where: str) -> None:
    """Refuse a selector without a sharded form
        (:attr:`jaxcompress.select.Selector.distributable`)."""
    if not selector.distributable:
        kind = "baseline" if selector.baseline else "selector"
        raise ValueError(f"{where}: the {selector.name} {kind} has no sharded form (its choice "
                         "would depend on the number of devices); use it on one device")


def sharded_step(features: LayerFeatures, out_kernel: jax.Array, width: int, selector: Selector,
               placement: Placement, *, rtol, target: jax.Array | None = None):
    """Selection and re-weighting of one hidden layer with its neurons split over ``placement``.

    See the module docstring: the selector's own distributed form
    (:meth:`jaxcompress.select.Selector.distributed_select`, in :func:`jax.shard_map`; the
    tournament
    for selectors without a device-independent one), then the local re-weighting and one
    ``psum``. Called by :func:`jaxcompress.layer.compress_layer`, which builds the layer's record.
    Returns ``(kept, new_out_kernel, rank, residual, max_coef, swaps)`` like its single-device
    selection, all replicated.
    """
    mesh, axis = placement.mesh, placement.axis
    z, scale = features.z, features.scale
    scale = jnp.ones((z.shape[0],), z.dtype) if scale is None else scale
    has_target = target is not None
    target = jnp.zeros((z.shape[0], out_kernel.shape[1]), z.dtype) if target is None else target

    def local(z_loc, k_loc, scale, target):
        zs = z_loc * scale[:, None]
        # the next layer's pre-activation features, for output-aware selectors and the residual
        before = jax.lax.psum(jnp.matmul(z_loc, k_loc, precision=HIGHEST), axis)
        goal = target if has_target else before
        chosen = selector.distributed_select(zs, width, axis=axis, out_kernel=k_loc,
                                             target=goal * scale[:, None], layer=features.layer)
        rows = z.shape[0]
        both = gather_columns(jnp.concatenate([zs, z_loc]), chosen.kept, axis)
        basis, basis_raw = both[:rows], both[rows:]
        coef_loc, live = basis_coefficients(basis, zs, chosen.rank, rtol, selector.baseline)
        if has_target:
            new_kernel, _ = lstsq_coefficients(basis_raw, jnp.arange(width, dtype=jnp.int32),
                                               width, rtol, rhs=target)
        else:
            new_kernel = jax.lax.psum(jnp.matmul(coef_loc, k_loc, precision=HIGHEST), axis)
        after = jnp.matmul(basis_raw, new_kernel, precision=HIGHEST)
        residual = jnp.max(jnp.abs(after - goal))
        # the max over devices of one number each, by all_gather (differentiable, as the
        # one-device max is; pmax has no derivative rule)
        max_coef = jnp.max(jax.lax.all_gather(
            jnp.max(jnp.where(live[:, None], jnp.abs(coef_loc), 0)), axis))
        return chosen.kept, new_kernel, chosen.rank, residual, max_coef, chosen.swaps

    fn = jax.shard_map(local, mesh=mesh,
                       in_specs=(P(None, axis), P(axis, None), P(), P()),
                       out_specs=(P(), P(), P(), P(), P(), P()), check_vma=False)
    return fn(z, out_kernel, scale, target)
