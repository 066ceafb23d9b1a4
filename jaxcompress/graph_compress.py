"""Compression of a traced program's neuron groups: the graph path of :func:`jaxcompress.trace`.

A network that is not a chain (a skip connection that concatenates the input into a middle
layer, per-neuron parameters inside an activation, different activations per layer, a Fourier
feature input, a second head) is compressed group by group with the one per-layer step,
:func:`jaxcompress.compression.compress_layer`. For a group ``g`` of width ``d`` whose
activations ``h(x) in R^d`` are read by the kernels ``K_1, ..., K_c`` (rows ``R_j``: the block
of ``K_j``'s rows that multiplies ``h``), the network's output depends on ``h`` only through

.. math::
   h(x)^T [K_1[R_1], \\ldots, K_c[R_c]] = h(x)^T K_g .

The features ``Z`` of ``h`` (Taylor coefficients at the expansion point, or values at
collocation or data points, computed by evaluating the user's own program) select ``S`` and
coefficients ``C`` with ``Z ~= Z[:, S] C``; the kept neurons ``S`` stay (every producer leaf —
kernel, bias, per-neuron scales — is sliced along the group's axis) and each consumer's block of
rows becomes ``C K_j[R_j]``. When ``Z = Z[:, S] C`` exactly, every Taylor coefficient (or point
value) of ``h^T K_g`` is reproduced, as in the paper's per-layer step; the error otherwise is
what the selector's residual says. Groups are processed in the method's layer order: backward
(features of the original network, last group first) or forward (features of the partially
compressed network, re-fitted to the teacher's consumed values when the feature map re-fits).

**Tied sets.** Elementwise products tie several groups to one index set (a gated layer
``h_l <- h_l * U + (1 - h_l) * V`` of a modified MLP ties every ``h_l`` to ``U`` and ``V``;
``[cos(x B), sin(x B)]`` with a parameter ``B`` reads ``B``'s group twice). Neuron ``i`` of
every consumed tensor ``t_1, ..., t_c`` of the set (a value's block of the set's neurons) is
then a function of neuron ``i`` of the set's groups alone, and the set is compressed jointly:
the features ``Z_t`` of every tensor are stacked (rows), one set ``S`` of columns is selected
on the stack, every producer leaf of every group of the set is sliced at ``S`` (a kernel that
reads the set and produces one of its groups is sliced in its columns *and* re-weighted in its
rows), and each consumer ``K_j`` of tensor ``t`` gets its own tensor's coefficients:

.. math::
   C_t = Z_t[:, S]^+ Z_t, \\qquad K_j \\leftarrow C_t K_j .

*Exact where the single-layer step is exact.* If the stacked ``Z`` has rank ``<= |S|`` and
``Z[:, S]`` has the same rank, every column of ``Z`` is ``Z[:, S] c`` for one ``c`` common to
all blocks, so ``Z_t = Z_t[:, S] C_t`` for every ``t``: every Taylor coefficient (point value)
of every ``t^T K_j`` is reproduced. The kept neurons of the set then compute exactly what they
computed in the teacher (by induction along the program: a kept neuron's pre-activation reads
the previous tensors only through re-weighted kernels, which reproduce them), so the
network's function is unchanged. *Otherwise* the error of consumer ``j`` is
``(Z_t - Z_t[:, S] C_t) K_j``, no larger than with the joint least-squares ``C`` of the stack
(``C_t`` minimises each block on its own), and it propagates through the later tensors of the
set as in a chain; ``LayerInfo.residual`` is ``max_t max |Z_t K_t - Z_t[:, S] C_t K_t|``.
Forward order re-weights a tied set from the current network's features (no re-fit to the
teacher's targets: the set's tensors feed each other, ``h_2`` reads ``h_1`` through a kernel of
the set, so re-fitting all of them at once to the teacher from features taken before the step
corrects an upstream error twice; measured on a tanh layer of width 24 cut to 4 and 6 before a
gated set at 15: sup error 0.13 / 0.15 with that re-fit against 0.096 / 0.090 without; a
sequential re-fit, tensor by tensor with the features re-taken, is not implemented).
*Widths.* The stack of ``T`` tensors' features has rank up to ``T D_k``, so the exactness above
needs ``|S| >= T D_k`` in general; the default width of a set is still ``min(D_k, d)`` (ours: the
size a user asks for at order ``k``, with the error measured in ``info.error_estimate`` and each
tensor's residual in ``LayerInfo.residual``); pass ``widths=`` for the exact bound.

The program is re-traced with each set of shapes (``fn(params, x)`` must be shape-polymorphic
in its parameter leaves and batch size, as nnx, linen and Equinox modules and plain functions
are); :func:`jaxcompress.program.trace_program` checks that the re-traced program has the same
equations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.compression import CompressInfo, LayerInfo, compress_layer
from jaxcompress.evaluate import error_points
from jaxcompress.features import (
    CollocationFeatures,
    DataFeatures,
    DerivativeFeatures,
    LayerFeatures,
    default_centers,
    monomial_taylor_of,
)
from jaxcompress.methods import BestOf, Method
from jaxcompress.program import Program, evaluate, trace_program
from jaxcompress.select import default_rtol, lstsq_coefficients
from jaxcompress.taylor import monomials, num_monomials

__all__ = ["GraphPlan", "GroupPlan", "compress_graph"]

HIGHEST = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True)
class GroupPlan:
    """What the graph path needs of one compressible group (static).

    Attributes:
      index: the group's 1-based index in the network.
      width: its original width.
      producers: ``(leaf, axis)`` sliced with the neurons.
      consumers: ``(leaf, axis, block, value, value_axis)``: a kernel's rows (``axis``) in its
        row block ``block`` (:attr:`GraphPlan.layouts`), reading value ``value`` of the program
        along ``value_axis``.
      members: the 0-based indices of the groups of its tied set (every one has ``width``
        neurons and is sliced at the same kept indices); ``(index - 1,)`` for an untied group.
    """

    index: int
    width: int
    producers: tuple[tuple[int, int], ...]
    consumers: tuple[tuple[int, int, int, int, int], ...]
    members: tuple[int, ...] = ()

    def tensors(self) -> list[tuple[int, int]]:
        """The distinct consumed tensors ``(value, block)``: a value's block of the set's
        neurons (one per gated layer of a modified MLP, two for ``[cos(xB), sin(xB)]``)."""
        return list(dict.fromkeys((c[3], c[2]) for c in self.consumers))


@dataclasses.dataclass(frozen=True)
class GraphPlan:
    """The static plan of a graph compression.

    Attributes:
      fn: the user's ``fn(params, x)``.
      treedef: the parameter pytree's structure.
      signature: the traced program's primitives (a re-trace must match it).
      groups: the compressible groups, in program order.
      layouts: per consumer leaf and axis, ``(leaf, axis, ((group or -1, size), ...))``: its
        row blocks along that axis, in group indices 0-based as in the network.
      width_of: the original width of every group (0-based index).
    """

    fn: Callable
    treedef: Any
    signature: tuple[str, ...]
    groups: tuple[GroupPlan, ...]
    layouts: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]
    width_of: tuple[int, ...]

    def layout(self, leaf: int, axis: int) -> tuple[tuple[int, int], ...]:
        """The row blocks of ``leaf`` along ``axis`` (a kernel may be read along both: the
        last branch kernel of a DeepONet)."""
        for lf, ax, blocks in self.layouts:
            if (lf, ax) == (leaf, axis):
                return blocks
        raise KeyError((leaf, axis))

    def program(self, leaves: Sequence, x) -> Program:
        """The program at ``leaves``' and ``x``'s shapes (checked against the trace)."""
        params = jax.tree_util.tree_unflatten(self.treedef, list(leaves))
        try:
            prog = trace_program(self.fn, params, x)
        except (TypeError, ValueError) as e:
            shapes = [tuple(np.shape(v)) for v in leaves]
            raise ValueError(
                f"compress: fn(params, x) fails at the compressed widths (leaf shapes {shapes}, "
                f"x {tuple(np.shape(x))}), so fn is not shape-polymorphic in its parameters: "
                f"{type(e).__name__}: {str(e).splitlines()[0]:.300}. Make the widths follow the "
                "parameter shapes (e.g. x @ kernel, not a hard-coded size)") from None
        if prog.signature() != self.signature:
            raise ValueError(
                "compress: fn(params, x) traced at the compressed widths (or another batch size) "
                "is a different program (its equations differ), so fn is not shape-polymorphic "
                "in its parameters; make the widths follow the parameter shapes (e.g. "
                "x @ kernel, not a hard-coded size)")
        return prog

    def apply(self, leaves: Sequence, x) -> jax.Array:
        """``fn`` on ``leaves`` (checked to be the traced program at these shapes)."""
        self.program(leaves, x)
        params = jax.tree_util.tree_unflatten(self.treedef, list(leaves))
        return self.fn(params, x)


def _offset(plan: GraphPlan, widths: dict[int, int], leaf: int, axis: int, block: int) -> int:
    """Where ``block`` of ``leaf``'s rows along ``axis`` starts at the current ``widths``."""
    blocks = plan.layout(leaf, axis)
    return sum(widths.get(g, size) if g >= 0 else size for g, size in blocks[:block])


def consumed_values(plan: GraphPlan, group: GroupPlan, leaves: Sequence, x, widths: dict,
                    *, tensor_ids: bool = False):
    """The group's consumed activations at the points ``x``: ``(rows, width)``, one block of
    rows per consumed tensor (:meth:`GroupPlan.tensors`; a value with more axes than
    ``(n, width)`` adds rows); with ``tensor_ids`` also each row's tensor (a NumPy array)."""
    prog = plan.program(leaves, x)
    tensors = group.tensors()
    vals = evaluate(prog, leaves, x, list(dict.fromkeys(v for v, _ in tensors)))
    width = widths[group.index - 1]
    outs, ids = [], []
    for t, (value, block) in enumerate(tensors):
        leaf, laxis, _, _, axis = next(c for c in group.consumers
                                       if (c[3], c[2]) == (value, block))
        off = _offset(plan, widths, leaf, laxis, block)
        v = jax.lax.slice_in_dim(vals[value], off, off + width, axis=axis)
        outs.append(jnp.moveaxis(v, axis, -1).reshape(-1, width))
        ids.append(np.full(outs[-1].shape[0], t))
    z = jnp.concatenate(outs, axis=0)
    return (z, np.concatenate(ids)) if tensor_ids else z


# ------------------------------------------------------------------------------------------------
# Features of one group
# ------------------------------------------------------------------------------------------------


def _coordinates(domain, dtype):
    """``(to_x, m)``: the map from feature coordinates to the network input, and ``m``."""
    iota = domain.parameter_map
    if iota is not None:
        return iota, domain.base.input_dim(dtype)
    return (lambda u: u), domain.input_dim(dtype)


def _derivative(fmap: DerivativeFeatures, plan, group, leaves, widths, domain, order, dtype
                ) -> tuple[LayerFeatures, np.ndarray]:
    """Taylor coefficients of the consumed activations at the expansion point(s) (by
    :func:`jax.experimental.jet` along fixed directions, then least squares per degree: the
    library's jet backend, for any traced program), and each row's tensor."""
    to_x, m = _coordinates(domain, dtype)
    center, radius = domain.expansion(dtype)
    multi = fmap.centers is not None or fmap.auto_centers
    if fmap.centers is not None:
        pts = jnp.asarray(fmap.centers, dtype)
    elif multi:
        pts = default_centers(center, domain.half_widths(dtype))
    else:
        pts = center[None]

    point_ids = []

    def h(u):
        z, ids = consumed_values(plan, group, leaves, to_x(u)[None], widths, tensor_ids=True)
        point_ids[:] = [ids]
        return z.reshape(-1)

    width = widths[group.index - 1]
    z = jnp.concatenate([monomial_taylor_of(h, c, order).reshape(-1, width) for c in pts])
    n_c = pts.shape[0]
    r_eff = radius * (float(n_c) ** (-1.0 / m) if multi else 1.0)
    deg = monomials(m, order).sum(axis=1)
    rows_per = z.shape[0] // (n_c * len(deg))
    ids = np.tile(point_ids[0], len(deg) * n_c)
    deg = np.tile(np.repeat(deg, rows_per), n_c)
    return LayerFeatures(z=z, scale=jnp.asarray(r_eff, dtype) ** jnp.asarray(deg, dtype),
                         layer=group.index, order=order, num_features=num_monomials(m, order),
                         coord_dim=m), ids


def group_features(fmap, plan: GraphPlan, group: GroupPlan, leaves, widths, domain, order: int,
                   dtype, *, tensor_ids: bool = False):
    """The :class:`~jaxcompress.features.LayerFeatures` of ``group`` in the network ``leaves``
    (at the current ``widths``) for the feature map ``fmap`` at ``order`` (with
    ``tensor_ids``: and each feature row's consumed tensor, :meth:`GroupPlan.tensors`)."""
    _, m = _coordinates(domain, dtype)
    d_k = num_monomials(m, order)
    if isinstance(fmap, DerivativeFeatures):
        feats, ids = _derivative(fmap, plan, group, leaves, widths, domain, order, dtype)
        return (feats, ids) if tensor_ids else feats
    if isinstance(fmap, CollocationFeatures):
        x = domain.nodes(fmap.node_count(d_k, plan.groups.index(group) + 1), fmap.nodes,
                         dtype)
    elif isinstance(fmap, DataFeatures):
        x = jnp.asarray(fmap.x, dtype)
        x = jnp.where(jnp.all(jnp.isfinite(x)), x, jnp.nan)
    else:
        raise TypeError(f"compress: a traced network is compressed with derivative, collocation "
                        f"or data features, got the feature map {type(fmap).__name__}")
    z, ids = consumed_values(plan, group, leaves, x, widths, tensor_ids=True)
    feats = LayerFeatures(z=z, scale=None, layer=group.index, order=order, num_features=d_k,
                          coord_dim=m)
    return (feats, ids) if tensor_ids else feats


# ------------------------------------------------------------------------------------------------
# One group's step and the loop
# ------------------------------------------------------------------------------------------------


def _rows(leaf_value, axis: int, off: int, width: int) -> jax.Array:
    """A consumer's block of rows as ``(width, cols)``."""
    block = jax.lax.slice_in_dim(leaf_value, off, off + width, axis=axis)
    return jnp.moveaxis(block, axis, 0).reshape(width, -1)


def _put_rows(leaf_value, axis: int, off: int, width: int, new) -> jax.Array:
    """``leaf_value`` with its rows ``off .. off + width`` along ``axis`` replaced by ``new``
    (``(kept, cols)``)."""
    shape = list(leaf_value.shape)
    rest = [s for i, s in enumerate(shape) if i != axis]
    block = jnp.moveaxis(new.reshape([new.shape[0]] + rest), 0, axis).astype(leaf_value.dtype)
    before = jax.lax.slice_in_dim(leaf_value, 0, off, axis=axis)
    after = jax.lax.slice_in_dim(leaf_value, off + width, shape[axis], axis=axis)
    return jnp.concatenate([before, block, after], axis=axis)


def _out_kernel(plan, group, leaves, widths):
    """Every consumer's rows side by side, ``(width, sum cols)``, and each one's place."""
    width = widths[group.index - 1]
    blocks, places = [], []
    for leaf, axis, block, _, _ in group.consumers:
        off = _offset(plan, widths, leaf, axis, block)
        rows = _rows(leaves[leaf], axis, off, width)
        places.append((leaf, axis, off, rows.shape[1]))
        blocks.append(rows)
    return jnp.concatenate(blocks, axis=1), places


def _apply_step(plan, group, leaves, widths, kept, new_kernel, places) -> list:
    """Slice the producers at ``kept``, write each consumer's new rows."""
    leaves = list(leaves)
    width = widths[group.index - 1]
    for leaf, axis in group.producers:
        leaves[leaf] = jnp.take(leaves[leaf], kept, axis=axis)
    col = 0
    for leaf, axis, off, cols in places:
        leaves[leaf] = _put_rows(leaves[leaf], axis, off, width, new_kernel[:, col:col + cols])
        col += cols
    return leaves


def _joint(group: GroupPlan, places) -> bool:
    """Whether the set needs its own re-weighting per tensor: several consumed tensors, or a
    kernel that both reads the set (rows) and produces one of its groups (columns)."""
    producers = {leaf for leaf, _ in group.producers}
    return len(group.tensors()) > 1 or any(leaf in producers for leaf, _, _, _ in places)


def _apply_joint(plan, group, leaves, widths, kept, feats, ids, rtol, out_kernel, places):
    """The tied set's step (see the module docstring): every producer sliced at ``kept``, then
    each consumer's rows re-weighted with its own tensor's ``C_t`` (least squares of the
    tensor's scaled features on its kept columns); returns the leaves and the matching residual
    ``max_t max |Z_t K_t - Z_t[:, S] C_t K_t|``."""
    leaves = list(leaves)
    width, n = widths[group.index - 1], kept.shape[0]
    for leaf, axis in group.producers:
        leaves[leaf] = jnp.take(leaves[leaf], kept, axis=axis)
    z = feats.z
    zs = z if feats.scale is None else z * feats.scale[:, None]
    tensors = group.tensors()
    coefs = []
    for t in range(len(tensors)):
        rows = np.nonzero(ids == t)[0]
        coef, _ = lstsq_coefficients(zs[rows], kept, n, rtol, rhs=zs[rows])
        coefs.append((rows, coef))
    col, residual = 0, jnp.zeros((), z.dtype)
    spans = []
    for (leaf, axis, block, value, _), (_, _, off, cols) in zip(group.consumers, places,
                                                                strict=True):
        spans.append((leaf, axis, off, tensors.index((value, block)), col, cols))
        col += cols
    for t, (rows, coef) in enumerate(coefs):
        cols = np.concatenate([np.arange(c0, c0 + nc) for _, _, _, tt, c0, nc in spans
                               if tt == t])
        k_t = out_kernel[:, cols]
        before = jnp.matmul(z[rows], k_t, precision=HIGHEST)
        after = jnp.matmul(z[rows][:, kept], jnp.matmul(coef, k_t, precision=HIGHEST),
                           precision=HIGHEST)
        residual = jnp.maximum(residual, jnp.max(jnp.abs(after - before)))
    # later blocks of a kernel first, so the earlier blocks' offsets stay valid
    for leaf, axis, off, t, _, _ in sorted(spans, key=lambda s: (s[0], -s[2])):
        rows = _rows(leaves[leaf], axis, off, width)
        new = jnp.matmul(coefs[t][1], rows, precision=HIGHEST)
        leaves[leaf] = _put_rows(leaves[leaf], axis, off, width, new)
    return leaves, residual


def _skipped_info(group: GroupPlan, order: int, d_k: int, m: int, dtype) -> LayerInfo:
    w = group.width
    return LayerInfo(kept=jnp.arange(w, dtype=jnp.int32), rank=jnp.asarray(w, jnp.int32),
                     residual=jnp.zeros((), dtype), max_coef=jnp.ones((), dtype),
                     swaps=jnp.zeros((), jnp.int32), layer=group.index, order=order,
                     num_features=d_k, width_in=w, width_out=w, num_rows=0, coord_dim=m,
                     skipped=True)


def _targets(method, plan, leaves, domain, orders, dtype, skip) -> dict[int, jax.Array]:
    """Forward order with re-fitting: the teacher's consumed features times its kernels."""
    out = {}
    widths = dict(enumerate(plan.width_of))
    for i, (g, k) in enumerate(zip(plan.groups, orders, strict=True)):
        if not skip[i] and len(g.tensors()) == 1:
            ref = group_features(method.features, plan, g, leaves, widths, domain, k, dtype)
            ok, _ = _out_kernel(plan, g, leaves, widths)
            out[i] = jnp.matmul(ref.z, ok, precision=HIGHEST)
    return out


def run_method(plan: GraphPlan, method: Method, leaves: Sequence, domain
               ) -> tuple[list, CompressInfo]:
    """One method on the traced network ``leaves`` (pure; jit-able)."""
    dtype = jnp.result_type(*leaves)
    fmap = method.features
    _, m = _coordinates(domain, dtype)
    orders = fmap.orders(len(plan.groups), "compress", prefix=True)
    d_ks = [num_monomials(m, k) for k in orders]
    wanted = method.widths or tuple(min(dk, g.width) for dk, g in zip(d_ks, plan.groups,
                                                                       strict=True))
    skip = [w == g.width <= dk for w, g, dk in zip(wanted, plan.groups, d_ks, strict=True)]
    forward = method.layer_order == "forward"
    if forward and fmap.refit:
        skip = [s and all(skip[:i]) for i, s in enumerate(skip)]
    teacher = list(leaves)
    targets = _targets(method, plan, teacher, domain, orders, dtype, skip) if (
        forward and fmap.refit) else {}
    widths = dict(enumerate(plan.width_of))
    infos: list = [None] * len(plan.groups)
    order = range(len(plan.groups)) if forward else reversed(range(len(plan.groups)))
    leaves = list(leaves)
    for i in order:
        g, k = plan.groups[i], orders[i]
        if skip[i]:
            infos[i] = _skipped_info(g, k, d_ks[i], m, dtype)
            continue
        src = leaves if forward else teacher
        feats, ids = group_features(fmap, plan, g, src, widths if forward else dict(
            enumerate(plan.width_of)), domain, k, dtype, tensor_ids=True)
        out_kernel, places = _out_kernel(plan, g, leaves, widths)
        joint = _joint(g, places)
        kept, new_kernel, infos[i] = compress_layer(
            feats, out_kernel, wanted[i], method.selector,
            target=None if joint else targets.get(i))
        if joint:
            rtol = (default_rtol(feats.z.dtype) if method.selector.rtol is None
                    else method.selector.rtol)
            leaves, residual = _apply_joint(plan, g, leaves, widths, kept, feats, ids, rtol,
                                            out_kernel, places)
            infos[i] = dataclasses.replace(infos[i], residual=residual)
        else:
            leaves = _apply_step(plan, g, leaves, widths, kept, new_kernel, places)
        for member in g.members or (g.index - 1,):
            widths[member] = wanted[i]
    pts = error_points(domain, dtype=dtype)
    estimate = jnp.max(jnp.abs(plan.apply(teacher, pts) - plan.apply(leaves, pts)))
    estimate = jnp.where(domain.valid(), estimate, jnp.nan)
    return leaves, CompressInfo.for_method(method, domain, infos, activation="traced",
                                           error_estimate=estimate)


def compress_graph(plan: GraphPlan, method, leaves: Sequence, domain
                   ) -> tuple[list, CompressInfo]:
    """:func:`run_method`, or the best of several (:func:`jaxcompress.best_of`: the smallest
    error estimate; the candidates' widths may differ, so the choice is made on the host)."""
    if not isinstance(method, BestOf):
        return _jit_run(plan, method, list(leaves), domain)
    results = [_jit_run(plan, m, list(leaves), domain) for m in method.methods]
    est = [float(info.error_estimate) for _, info in results]
    finite = [e if np.isfinite(e) else np.inf for e in est]
    choice = int(np.argmin(finite))
    small, info = results[choice]
    info = dataclasses.replace(info, method=method.describe(),
                               choice=jnp.asarray(choice, jnp.int32),
                               candidates=tuple(m.describe() for m in method.methods))
    return small, info


_jit_run = jax.jit(run_method, static_argnums=(0,))
