r"""The one driver: every network, every method, one layer loop.

A network reaches the driver as a static :class:`Plan` (built by
:meth:`jaxcompress.Network.plan`, whatever made the network: a params list,
:func:`jaxcompress.trace`, :func:`jaxcompress.trace_module`, a compressed result) and its
parameter leaves. The plan names,
for every compressible **set** of neuron groups (a group, or groups tied by products), the leaves
that produce its neurons (sliced with them) and the kernel rows that read them (re-weighted).
:func:`run` visits the sets in the method's layer order (backward: deepest first, every set's
features from the teacher, the paper's Proposition 17; forward: the partially compressed
network's features, each set re-fitted to the teacher's next pre-activation when the feature map
re-fits), and for each set

1. takes its features :math:`Z` (one column per neuron) from a **feature source**: the
   method's feature map on the lowered chain (the closed-form multivariate Taylor pass, or the
   activations at points) when the network is a chain of dense layers with one activation, else
   :meth:`~jaxcompress.FeatureMap.of_values` on the set's activations computed by running the
   network's own program (Taylor coefficients by ``jet``, values at collocation nodes or data);
2. runs the pure per-layer step :func:`~jaxcompress.compress_layer` against the readers' rows
   side by side, :math:`K_g = [K_1[R_1], \ldots, K_c[R_c]]`: kept neurons :math:`S` and
   :math:`\tilde K_g = C K_g` with :math:`Z_{:,S} C \approx Z` (Algorithm 1);
3. writes back: every producer leaf sliced at :math:`S`, every reader's rows replaced
   (a tied set with several consumed tensors: each reader re-weighted from its own tensor's
   coefficients, :func:`_apply_joint`).

A **stack** (the layers of a ``scan``, whose leaves stay stacked: :attr:`SetPlan.parts`) is one
entry of one width: each of its sets takes the three steps with its own features and kept
neurons, written into its slices kept-first (:func:`_stack_step`), and the stack is cut to the
width after the last.

Widths (given or :math:`\min(D_k, d)`), the skip rule (a set kept whole computes nothing),
best-of (inside the same ``jit`` when the candidates' widths agree, so it runs under ``vmap``),
the error estimate and the method checks exist here once. Everything in :func:`run` is pure and
traceable: ``jax.jit``, ``jax.vmap``, ``jax.grad`` and ``jax.jvp`` go through it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import Activation
from jaxcompress.evaluate import ERROR_POINTS, error_estimate, error_points
from jaxcompress.features import FeatureMap, LayerFeatures
from jaxcompress.layer import CompressInfo, LayerInfo, compress_layer
from jaxcompress.methods import BestOf, Method
from jaxcompress.mlp import HIGHEST, Params, apply, param_count
from jaxcompress.placement import Placement
from jaxcompress.program import Program, evaluate, trace_program
from jaxcompress.select import default_rtol, lstsq_coefficients
from jaxcompress.taylor import memory_limit, num_monomials

__all__ = ["COMPILE_BYTES", "ChainPlan", "LayerLeaves", "Plan", "Producer", "Reader", "SetPlan",
           "best", "check_memory", "check_method", "expand", "features", "memory_estimate", "place",
           "resolve_widths", "restrict", "run", "run_jit", "set_widths", "skipped_sets",
           "trim_leaves", "truncate"]


# ------------------------------------------------------------------------------------------------
# The plan: what the driver knows of a network (static, hashable)
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Producer:
    """A leaf sliced with a set's neurons, along ``axis`` (of its slice ``index`` along axis 0
    for a stacked leaf: a layer under ``scan``; ``axis`` counts in the whole leaf)."""

    leaf: int
    axis: int
    index: int | None = None


@dataclasses.dataclass(frozen=True)
class Reader:
    """A kernel's rows that read a set's neurons.

    Attributes:
      leaf, axis: the kernel leaf and its axis along the neurons.
      block: the set's block among the leaf's row blocks (:attr:`Plan.layouts`).
      value, value_axis: the consumed value of the program and its neuron axis.
      index: the slice of a stacked leaf whose rows these are (``None``: the whole leaf).
    """

    leaf: int
    axis: int
    block: int
    value: int
    value_axis: int
    index: int | None = None


@dataclasses.dataclass(frozen=True)
class SetPlan:
    """One compressible set: a group, or groups tied by products, with one index set.

    Attributes:
      index: the 1-based index of its first group (the ``layer`` of its
        :class:`~jaxcompress.LayerInfo`; hidden layer ``l`` of a chain).
      width: its width before compression.
      producers, readers: the leaves sliced with its neurons, and the rows that read them.
      members: the 0-based indices of its groups.
      parts: for a **stack** (sets that touch the slices of stacked leaves: the layers of a
        ``scan``, which keep one width), its sets, each selecting its own neurons; each
        slice's kept neurons are moved to its front and the stack is cut to the width after
        the last (:func:`_stack_step`). Empty for any other set.
    """

    index: int
    width: int
    producers: tuple[Producer, ...]
    readers: tuple[Reader, ...]
    members: tuple[int, ...]
    parts: tuple[SetPlan, ...] = ()

    def axes(self) -> list[tuple[int, int]]:
        """The distinct ``(leaf, axis)`` of its producers (every slice of a stacked axis)."""
        return list(dict.fromkeys((p.leaf, p.axis) for p in self.producers))

    def tensors(self) -> list[tuple[int, int]]:
        """The distinct consumed tensors ``(value, block)`` (one per gated layer of a modified
        MLP, two for ``[cos(xB), sin(xB)]``)."""
        return list(dict.fromkeys((r.value, r.block) for r in self.readers))


@dataclasses.dataclass(frozen=True)
class LayerLeaves:
    """One dense layer of a chain: its kernel leaf (``out_in``: laid out ``(out, in)``) and
    bias leaf (``None``: no bias)."""

    kernel: int
    bias: int | None
    out_in: bool = False


@dataclasses.dataclass(frozen=True)
class ChainPlan:
    """A chain of dense layers with one activation: what the closed-form passes need."""

    activation: Activation
    layers: tuple[LayerLeaves, ...]

    def lower(self, leaves: Sequence) -> Params:
        """The chain in the params convention ``[{"kernel": (in, out), "bias": (out,)}]``."""
        out = []
        for layer in self.layers:
            kernel = leaves[layer.kernel]
            kernel = kernel.T if layer.out_in else kernel
            bias = (jnp.zeros((kernel.shape[1],), kernel.dtype) if layer.bias is None
                    else leaves[layer.bias])
            out.append({"kernel": kernel, "bias": bias})
        return out


@dataclasses.dataclass(frozen=True)
class Plan:
    """The static description of a network the driver compresses.

    Attributes:
      fn: ``fn(params, x)``, the network's program.
      treedef: the parameter pytree's structure.
      x: the input's shape and dtype (``(n, d_in)``).
      signature: the traced program's primitives (a re-trace at other widths must match);
        ``()`` for a network that was not traced (a params list).
      sets: the compressible sets, in program order.
      layouts: per reader leaf and axis, ``(leaf, axis, ((group or -1, size), ...))``: its row
        blocks along that axis (0-based groups).
      width_of: the width of every group (0-based).
      d_out: the output width (the last group's).
      chain: the chain's layers and activation, or ``None`` off a chain.
    """

    fn: Callable
    treedef: Any
    x: jax.ShapeDtypeStruct
    signature: tuple[str, ...]
    sets: tuple[SetPlan, ...]
    layouts: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]
    width_of: tuple[int, ...]
    d_out: int
    chain: ChainPlan | None = None

    @property
    def sizes(self) -> list[int]:
        """``[d_in, width of every set, d_out]``: a chain's layer sizes."""
        return [int(self.x.shape[-1])] + [s.width for s in self.sets] + [self.d_out]

    @property
    def activation_name(self) -> str:
        return self.chain.activation.name if self.chain is not None else "traced"

    def at_widths(self, widths: Sequence[int]) -> Plan:
        """The same network with set ``i`` ``widths[i]`` neurons wide (a compressed candidate's
        plan: the program is traced again at the new shapes when it runs, and must have the same
        equations)."""
        widths = tuple(int(w) for w in widths)
        if len(widths) != len(self.sets):
            raise ValueError(f"at_widths: {len(widths)} widths for {len(self.sets)} sets")
        width_of = list(self.width_of)
        for s, w in zip(self.sets, widths, strict=True):
            for m in s.members:
                width_of[m] = w
        sets = tuple(dataclasses.replace(s, width=w)
                     for s, w in zip(self.sets, widths, strict=True))
        layouts = tuple((leaf, axis, tuple((g, width_of[g] if g >= 0 else size)
                                           for g, size in blocks))
                        for leaf, axis, blocks in self.layouts)
        return dataclasses.replace(self, sets=sets, layouts=layouts, width_of=tuple(width_of))

    def layout(self, leaf: int, axis: int) -> tuple[tuple[int, int], ...]:
        for lf, ax, blocks in self.layouts:
            if (lf, ax) == (leaf, axis):
                return blocks
        raise KeyError((leaf, axis))

    def params(self, leaves: Sequence) -> Any:
        return jax.tree_util.tree_unflatten(self.treedef, list(leaves))

    def program(self, leaves: Sequence, x) -> Program:
        """The program at ``leaves``' and ``x``'s shapes (checked against the trace)."""
        try:
            prog = trace_program(self.fn, self.params(leaves), x)
        except (TypeError, ValueError) as e:
            shapes = [tuple(np.shape(v)) for v in leaves]
            raise ValueError(
                f"compress: fn(params, x) fails at the compressed widths (leaf shapes {shapes}, "
                f"x {tuple(np.shape(x))}), so fn is not shape-polymorphic in its parameters: "
                f"{type(e).__name__}: {str(e).splitlines()[0]:.300}. Make the widths follow the "
                "parameter shapes (e.g. x @ kernel, not a hard-coded size)") from None
        if self.signature and prog.signature() != self.signature:
            raise ValueError(
                "compress: fn(params, x) traced at the compressed widths (or another batch size) "
                "is a different program (its equations differ), so fn is not shape-polymorphic "
                "in its parameters; make the widths follow the parameter shapes (e.g. "
                "x @ kernel, not a hard-coded size)")
        return prog

    def apply(self, leaves: Sequence, x, placement: Placement | None = None) -> jax.Array:
        """The network at ``leaves`` on ``x``: the lowered chain, else the program."""
        if self.chain is not None:
            return apply(self.chain.lower(leaves), x, activation=self.chain.activation,
                         placement=placement)
        self.program(leaves, x)
        return flat_output(self.fn(self.params(leaves), x), x)


def flat_output(y, x) -> jax.Array:
    """``fn``'s output as one array ``(..., d_out)``: an output pytree (a tuple or dict of
    heads: a NeRF's density and colour) flattened, each leaf ``(..., k)`` (or ``(...)``) side
    by side in the pytree's leaf order, so that features, errors, polishing and the tolerance
    search see every output; one array passes through unchanged."""
    if isinstance(y, jax.Array | np.ndarray):
        return y
    leaves = jax.tree_util.tree_leaves(y)
    if not leaves:
        raise ValueError("fn(params, x) returned no arrays")
    batch = tuple(np.shape(x)[:-1])
    return jnp.concatenate([jnp.reshape(v, batch + (-1,)) for v in leaves], axis=-1)


# ------------------------------------------------------------------------------------------------
# Reading and writing a set's leaves
# ------------------------------------------------------------------------------------------------


def _take(leaf, kept, axis: int):
    """``leaf`` at the indices ``kept`` along ``axis`` (the indexing the chain always used)."""
    return leaf[(slice(None),) * axis + (kept,)]


def _offset(plan: Plan, widths: dict[int, int], leaf: int, axis: int, block: int) -> int:
    """Where ``block`` of ``leaf``'s rows along ``axis`` starts at the current ``widths``."""
    blocks = plan.layout(leaf, axis)
    return sum(widths.get(g, size) if g >= 0 else size for g, size in blocks[:block])


def _rows(leaf_value, axis: int, off: int, width: int) -> jax.Array:
    """A reader's block of rows as ``(width, cols)``."""
    if off == 0 and width == leaf_value.shape[axis] and axis == 0 and leaf_value.ndim == 2:
        return leaf_value
    block = jax.lax.slice_in_dim(leaf_value, off, off + width, axis=axis)
    return jnp.moveaxis(block, axis, 0).reshape(width, -1)


def _put_rows(leaf_value, axis: int, off: int, width: int, new) -> jax.Array:
    """``leaf_value`` with its rows ``off .. off + width`` along ``axis`` replaced by ``new``."""
    shape = list(leaf_value.shape)
    rest = [s for i, s in enumerate(shape) if i != axis]
    block = jnp.moveaxis(new.reshape([new.shape[0]] + rest), 0, axis).astype(leaf_value.dtype)
    if off == 0 and width == shape[axis]:
        return block
    before = jax.lax.slice_in_dim(leaf_value, 0, off, axis=axis)
    after = jax.lax.slice_in_dim(leaf_value, off + width, shape[axis], axis=axis)
    return jnp.concatenate([before, block, after], axis=axis)


def _get(leaves, leaf: int, index: int | None):
    """A leaf, or its slice ``index`` along axis 0 (a layer of a stacked leaf)."""
    return leaves[leaf] if index is None else leaves[leaf][index]


def _put(leaves: list, leaf: int, index: int | None, value) -> None:
    """Write a leaf, or its slice ``index`` (of the slice's shape)."""
    leaves[leaf] = value if index is None else leaves[leaf].at[index].set(value)


def _local(axis: int, index: int | None) -> int:
    """A whole leaf's ``axis`` in its slice (the stack axis 0 removed)."""
    return axis if index is None else axis - 1


def _padded(kept, width: int):
    """``kept`` filled to ``width`` entries with copies of its first: a stack's slice keeps its
    shape until the stack is cut (:func:`_slice_producers` zeroes the copies)."""
    return jnp.concatenate([kept, jnp.broadcast_to(kept[:1], (width - kept.shape[0],))])


def _pad_rows(new, width: int):
    """``new`` ``(n, cols)`` with zero rows appended to ``width``."""
    return jnp.pad(new, ((0, width - new.shape[0]), (0, 0)))


def _out_kernel(plan: Plan, s: SetPlan, leaves, widths):
    """Every reader's rows side by side, ``(width, sum cols)``, and each one's place."""
    width = widths[s.members[0]]
    blocks, places = [], []
    for r in s.readers:
        off = _offset(plan, widths, r.leaf, r.axis, r.block)
        rows = _rows(_get(leaves, r.leaf, r.index), _local(r.axis, r.index), off, width)
        places.append((r.leaf, r.axis, off, rows.shape[1], r.index))
        blocks.append(rows)
    return (blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks, axis=1)), places


def _slice_producers(s: SetPlan, leaves: list, kept, pad: int | None) -> None:
    """Every producer (slice) at ``kept``; with ``pad``, kept first and filled to ``pad`` with
    zero neurons (zero in every producer: they add nothing to a reader's columns, which an
    output-aware selector of an earlier layer sees)."""
    idx = kept if pad is None else _padded(kept, pad)
    for p in s.producers:
        axis = _local(p.axis, p.index)
        new = _take(_get(leaves, p.leaf, p.index), idx, axis)
        if pad is not None:
            live = (jnp.arange(pad) < kept.shape[0]).astype(new.dtype)
            new = new * live.reshape(tuple(pad if i == axis else 1 for i in range(new.ndim)))
        _put(leaves, p.leaf, p.index, new)


def _apply_step(s: SetPlan, leaves, widths, kept, new_kernel, places,
                pad: int | None = None) -> list:
    """Slice the producers at ``kept``, write each reader's new rows (with ``pad``: the kept
    neurons first, then filler neurons whose reading rows are zero, ``pad`` in all)."""
    leaves = list(leaves)
    width = widths[s.members[0]]
    _slice_producers(s, leaves, kept, pad)
    col = 0
    for leaf, axis, off, cols, index in places:
        part = new_kernel if len(places) == 1 else new_kernel[:, col:col + cols]
        part = part if pad is None else _pad_rows(part, pad)
        _put(leaves, leaf, index,
             _put_rows(_get(leaves, leaf, index), _local(axis, index), off, width, part))
        col += cols
    return leaves


def _joint(s: SetPlan, places) -> bool:
    """Whether the set needs its own re-weighting per tensor: several consumed tensors, or a
    kernel that both reads the set (rows) and produces one of its groups (columns)."""
    producers = {(p.leaf, p.index) for p in s.producers}
    return len(s.tensors()) > 1 or any((leaf, index) in producers
                                       for leaf, _, _, _, index in places)


def _apply_joint(s: SetPlan, leaves, widths, kept, feats, ids, rtol, out_kernel, places,
                 pad: int | None = None):
    """A tied set's step (see :mod:`jaxcompress.graph`): every producer sliced at ``kept``,
    then each reader's rows re-weighted with its own tensor's ``C_t`` (least squares of the
    tensor's scaled features on its kept columns); returns the leaves and the matching residual
    ``max_t max |Z_t K_t - Z_t[:, S] C_t K_t|``. ``pad`` as in :func:`_apply_step`."""
    leaves = list(leaves)
    width, n = widths[s.members[0]], kept.shape[0]
    _slice_producers(s, leaves, kept, pad)
    z = feats.z
    zs = z if feats.scale is None else z * feats.scale[:, None]
    tensors = s.tensors()
    coefs = []
    for t in range(len(tensors)):
        rows = np.nonzero(ids == t)[0]
        coef, _ = lstsq_coefficients(zs[rows], kept, n, rtol, rhs=zs[rows])
        coefs.append((rows, coef))
    col, residual, spans = 0, jnp.zeros((), z.dtype), []
    for r, (_, _, off, cols, _) in zip(s.readers, places, strict=True):
        spans.append((r.leaf, r.axis, off, tensors.index((r.value, r.block)), col, cols,
                      r.index))
        col += cols
    for t, (rows, coef) in enumerate(coefs):
        cols = np.concatenate([np.arange(c0, c0 + nc) for _, _, _, tt, c0, nc, _ in spans
                               if tt == t])
        k_t = out_kernel[:, cols]
        before = jnp.matmul(z[rows], k_t, precision=HIGHEST)
        after = jnp.matmul(z[rows][:, kept], jnp.matmul(coef, k_t, precision=HIGHEST),
                           precision=HIGHEST)
        residual = jnp.maximum(residual, jnp.max(jnp.abs(after - before)))
    # later blocks of a kernel first, so the earlier blocks' offsets stay valid
    for leaf, axis, off, t, _, _, index in sorted(
            spans, key=lambda sp: (sp[0], -1 if sp[6] is None else sp[6], -sp[2])):
        value, local = _get(leaves, leaf, index), _local(axis, index)
        new = jnp.matmul(coefs[t][1], _rows(value, local, off, width), precision=HIGHEST)
        new = new if pad is None else _pad_rows(new, pad)
        _put(leaves, leaf, index, _put_rows(value, local, off, width, new))
    return leaves, residual


# ------------------------------------------------------------------------------------------------
# Feature sources
# ------------------------------------------------------------------------------------------------


def _consumed(plan: Plan, s: SetPlan, leaves, widths, x) -> list[jax.Array]:
    """The set's consumed activations at the points ``x``, one ``(n, r, width)`` array per
    consumed tensor (:meth:`SetPlan.tensors`)."""
    prog = plan.program(leaves, x)
    tensors = s.tensors()
    vals = evaluate(prog, leaves, x, list(dict.fromkeys(v for v, _ in tensors)))
    width = widths[s.members[0]]
    out = []
    for value, block in tensors:
        r = next(r for r in s.readers if (r.value, r.block) == (value, block))
        off = _offset(plan, widths, r.leaf, r.axis, block)
        v = jax.lax.slice_in_dim(vals[value], off, off + width, axis=r.value_axis)
        v = jnp.moveaxis(v, r.value_axis, -1)
        out.append(v.reshape(v.shape[0], -1, width))
    return out


def _program_features(plan: Plan, fmap: FeatureMap, s: SetPlan, position: int, leaves, widths,
                      domain, dtype) -> tuple[LayerFeatures, np.ndarray]:
    """The set's features from its activations computed by the network's own program
    (:meth:`FeatureMap.of_values`, once per consumed tensor, stacked), and each row's tensor."""
    feats, ids = [], []
    for t in range(len(s.tensors())):
        def values(x, t=t):
            return _consumed(plan, s, leaves, widths, x)[t]
        f = fmap.of_values(values, position, domain=domain, dtype=dtype)
        f = dataclasses.replace(f, layer=s.index)
        feats.append(f)
        ids.append(np.full(f.z.shape[0], t))
    if len(feats) == 1:
        return feats[0], ids[0]
    scale = (None if feats[0].scale is None
             else jnp.concatenate([f.scale for f in feats]))
    return dataclasses.replace(feats[0], z=jnp.concatenate([f.z for f in feats]),
                               scale=scale), np.concatenate(ids)


def _features(plan: Plan, fmap: FeatureMap, positions: Sequence[int], leaves, widths, domain,
              dtype, placement, *, prefix: bool = False
              ) -> dict[int, tuple[LayerFeatures, np.ndarray | None]]:
    """The features of the sets at ``positions`` (0-based) in the network ``leaves``: the
    feature map on the lowered chain (hidden layer ``l`` is set ``l - 1``; with ``prefix``,
    only the layers up to the deepest requested one: a partially compressed network), else
    through the program."""
    if not positions:
        return {}
    if plan.chain is not None:
        params = plan.chain.lower(leaves)
        if prefix:
            top = max(positions) + 1
            params = params[:top] + [params[top]]
        got = fmap(params, [i + 1 for i in positions], activation=plan.chain.activation,
                   domain=domain, placement=placement)
        return {i: (got[i + 1], None) for i in positions}
    return {i: _program_features(plan, fmap, plan.sets[i], i + 1, leaves, widths, domain, dtype)
            if not plan.sets[i].parts else
            [_program_features(plan, fmap, part, i + 1, leaves, widths, domain, dtype)
             for part in plan.sets[i].parts]
            for i in positions}


def features(plan: Plan, fmap: FeatureMap, leaves, domain, placement=None
             ) -> dict[int, tuple[LayerFeatures, np.ndarray | None]]:
    """The teacher's features of every set (by 0-based position), from the same source the
    driver uses; what :func:`run` takes as ``teacher_features``."""
    dtype = jnp.result_type(*[v for v in leaves if jnp.issubdtype(jnp.result_type(v),
                                                                    jnp.floating)])
    return _features(plan, fmap, list(range(len(plan.sets))), list(leaves),
                     dict(enumerate(plan.width_of)), domain, dtype, placement)


def truncate(feats: LayerFeatures, ids, order: int) -> tuple[LayerFeatures, Any]:
    """Derivative features at a lower ``order``: the rows of the monomials of degree
    ``<= order`` (they come first, by degree, in each consumed tensor's block)."""
    d_k = num_monomials(feats.coord_dim, order)
    ids = None if ids is None else np.asarray(ids)
    if ids is None:
        rows = np.arange(d_k * (feats.z.shape[0] // feats.num_features))
    else:
        rows = np.concatenate([
            np.nonzero(ids == t)[0][:d_k * (int(np.sum(ids == t)) // feats.num_features)]
            for t in np.unique(ids)])
    scale = None if feats.scale is None else feats.scale[rows]
    return dataclasses.replace(feats, z=feats.z[rows], scale=scale, order=order,
                               num_features=d_k), (None if ids is None else ids[rows])


# ------------------------------------------------------------------------------------------------
# Widths, the skip rule and the records of skipped sets
# ------------------------------------------------------------------------------------------------


def resolve_widths(method: Method, sizes: Sequence[int], domain) -> tuple[int, ...]:
    """The widths of ``method`` per set (``sizes`` = ``[d_in, set widths, d_out]``): given, or
    ``min(D_k, d)``."""
    if method.widths is not None:
        return method.widths
    d_ks = method.features.num_features(list(sizes), domain)
    return tuple(min(dk, w) for dk, w in zip(d_ks, sizes[1:-1], strict=True))


def skipped_sets(method: Method, sizes: Sequence[int], domain,
                 widths: Sequence[int]) -> tuple[bool, ...]:
    """Per set: kept whole with nothing computed (see ``LayerInfo.skipped``).

    A set is skipped when it keeps all its ``d`` neurons and has ``D_k >= d`` features
    (selection would keep every neuron with ``C = I``). In forward order with re-fitting, a set
    after a compressed one is not skipped: its re-fit compensates the upstream change.
    """
    d_ks = method.features.num_features(list(sizes), domain)
    whole = [w == h <= dk for w, h, dk in zip(widths, sizes[1:-1], d_ks, strict=True)]
    if method.layer_order == "forward" and method.features.refit:
        whole = [w and all(whole[:i]) for i, w in enumerate(whole)]
    return tuple(whole)


def _skipped_info(method: Method, sizes: Sequence[int], domain, position: int, index: int,
                  dtype) -> LayerInfo:
    """The :class:`LayerInfo` of the set at ``position`` (1-based) kept whole."""
    fmap, width = method.features, sizes[position]
    order, coord_dim = fmap.layer_description(list(sizes), domain, position)
    return LayerInfo(
        kept=jnp.arange(width, dtype=jnp.int32), rank=jnp.asarray(width, jnp.int32),
        residual=jnp.zeros((), dtype), max_coef=jnp.ones((), dtype),
        swaps=jnp.zeros((), jnp.int32), layer=index, order=order,
        num_features=fmap.num_features(list(sizes), domain)[position - 1], width_in=width,
        width_out=width, num_rows=0, coord_dim=coord_dim, skipped=True)


# ------------------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------------------


def _step(plan, method, s, feats, ids, leaves, widths, width, target, placement,
          pad: int | None = None):
    """One set: the per-layer step and the write-back; returns the leaves and the record
    (``pad``: the write-back of a stack's part, see :func:`_apply_step`)."""
    out_kernel, places = _out_kernel(plan, s, leaves, widths)
    joint = _joint(s, places)
    kept, new_kernel, info = compress_layer(feats, out_kernel, width, method.selector,
                                            target=None if joint else target,
                                            placement=placement)
    if not joint:
        return _apply_step(s, leaves, widths, kept, new_kernel, places, pad), info
    rtol = (default_rtol(feats.z.dtype) if method.selector.rtol is None
            else method.selector.rtol)
    leaves, residual = _apply_joint(s, leaves, widths, kept, feats, ids, rtol, out_kernel,
                                    places, pad)
    return leaves, dataclasses.replace(info, residual=residual)


def _taken(leaves: Sequence, taken: dict[tuple[int, int, int | None], jax.Array]) -> list:
    """``leaves`` with every producer axis (slice) of the sets compressed so far taken at their
    kept neurons (no reader re-weighted)."""
    out = list(leaves)
    sliced: dict[tuple[int, int], dict[int, jax.Array]] = {}
    for (leaf, axis, index), kept in taken.items():
        if index is None:
            out[leaf] = _take(out[leaf], kept, axis)
        else:
            sliced.setdefault((leaf, axis), {})[index] = kept
    for (leaf, axis), per in sliced.items():
        out[leaf] = jnp.stack([_take(out[leaf][i], per[i], axis - 1) if i in per
                               else out[leaf][i] for i in range(out[leaf].shape[0])])
    return out


def _compact(plan: Plan, s: SetPlan, leaves, widths, width: int) -> list:
    """A stack cut to ``width``: every slice of every producer axis, and every block of rows
    that reads it, keeps its first ``width`` neurons (each slice's kept ones, moved there)."""
    full = widths[s.members[0]]
    leaves = list(leaves)
    if width == full:
        return leaves
    for leaf, axis in s.axes():
        leaves[leaf] = jax.lax.slice_in_dim(leaves[leaf], 0, width, axis=axis)
    spans = {(r.leaf, r.axis, _offset(plan, widths, r.leaf, r.axis, r.block))
             for r in s.readers}
    for leaf, axis, off in sorted(spans, key=lambda sp: (sp[0], sp[1], -sp[2])):
        v = leaves[leaf]
        leaves[leaf] = jnp.concatenate(
            [jax.lax.slice_in_dim(v, 0, off + width, axis=axis),
             jax.lax.slice_in_dim(v, off + full, v.shape[axis], axis=axis)], axis=axis)
    return leaves


def _stack_step(plan, method, i, s, refs, leaves, teacher, current, original, width, taken,
                domain, dtype, placement):
    """A stack (:attr:`SetPlan.parts`: the layers of a ``scan``, which keep one width): each
    part (set) selects its own ``width`` neurons with the per-layer step, in layer order (each
    on the current network's features in forward order, re-fitted to the teacher), written
    back with its kept neurons first in each slice and filler neurons behind them whose rows
    that read them are zero (the function is the compressed one; the slices keep their
    shapes); then the stack is cut to ``width`` (:func:`_compact`). Returns the leaves and one
    record: ``kept`` is ``arange(width)`` (every slice's kept neurons at its front), ``rank``,
    ``residual`` and ``max_coef`` the largest over the parts."""
    fmap, forward = method.features, method.layer_order == "forward"
    full = current[s.members[0]]
    order = range(len(s.parts)) if forward else range(len(s.parts) - 1, -1, -1)
    infos, kepts = {}, {}
    for j in order:
        part = s.parts[j]
        if forward:
            feats, ids = _program_features(plan, fmap, part, i + 1, leaves, current, domain,
                                           dtype)
        else:
            feats, ids = refs[j]
        target = (_refit_target(plan, part, refs[j][0].z, teacher, taken, original)
                  if forward and fmap.refit else None)
        leaves, infos[j] = _step(plan, method, part, feats, ids, leaves, current, width,
                                 target, placement, pad=full)
        kepts[j] = infos[j].kept
        taken.update({(p.leaf, p.axis, p.index): _padded(kepts[j], full)
                      for p in part.producers})
    leaves = _compact(plan, s, leaves, current, width)
    for j, part in enumerate(s.parts):
        taken.update({(p.leaf, p.axis, p.index): kepts[j] for p in part.producers})
    parts = [infos[j] for j in range(len(s.parts))]

    def most(field):
        return jnp.max(jnp.stack([getattr(li, field) for li in parts]))

    info = dataclasses.replace(
        parts[0], kept=jnp.arange(width, dtype=jnp.int32), rank=most("rank"),
        residual=most("residual"), max_coef=most("max_coef"),
        swaps=jnp.sum(jnp.stack([li.swaps for li in parts])), layer=s.index, width_in=full,
        width_out=width)
    return leaves, info


def run(plan: Plan, method: Method, leaves: Sequence, domain,
        placement: Placement | None = None, *,
        teacher_features: dict[int, tuple[LayerFeatures, Any]] | None = None,
        only: Sequence[int] | None = None, skip: bool = True) -> tuple[list, CompressInfo]:
    """One method on the network ``leaves`` (pure; traced inside :func:`run_jit`): the one
    layer loop of the library (see the module docstring).

    Args:
      plan, method, leaves, domain, placement: the network, the method, its parameter leaves,
        the domain, where the neurons live (``None``: one device).
      teacher_features: the teacher's features of the sets to compress (by 0-based position),
        computed earlier (the tolerance search truncates one pass at its largest order);
        default: computed here.
      only: compress only these sets (0-based positions); the others are kept whole.
      skip: apply the skip rule (a set that keeps all its neurons computes nothing); ``False``
        computes every set of ``only`` (the tolerance search's masked candidates, whose widths
        are an upper bound).
    """
    dtype = jnp.result_type(*[v for v in leaves if jnp.issubdtype(jnp.result_type(v),
                                                                    jnp.floating)])
    fmap, sizes = method.features, plan.sizes
    widths = resolve_widths(method, sizes, domain)
    skipped = skipped_sets(method, sizes, domain, widths) if skip else (False,) * len(widths)
    if only is not None:
        skipped = tuple(skip or i not in only for i, skip in enumerate(skipped))
        widths = tuple(w if i in only else d for i, (w, d) in
                       enumerate(zip(widths, sizes[1:-1], strict=True)))
    needed = [i for i, skip in enumerate(skipped) if not skip]
    infos: list = [_skipped_info(method, sizes, domain, i + 1, s.index, dtype) if skip else None
                   for i, (s, skip) in enumerate(zip(plan.sets, skipped, strict=True))]
    teacher, leaves = list(leaves), list(leaves)
    original = dict(enumerate(plan.width_of))
    current = dict(original)
    forward = method.layer_order == "forward"
    taken: dict[tuple[int, int, int | None], jax.Array] = {}
    refs = {}
    if teacher_features is not None:
        refs = {i: teacher_features[i] for i in needed}
    elif not forward or fmap.refit:
        refs = _features(plan, fmap, needed, teacher, original, domain, dtype, placement)
    for i in (needed if forward else reversed(needed)):
        s = plan.sets[i]
        if s.parts:
            leaves, infos[i] = _stack_step(plan, method, i, s, refs.get(i), leaves, teacher,
                                           current, original, widths[i], taken, domain,
                                           dtype, placement)
            for member in s.members:
                current[member] = widths[i]
            continue
        if forward:
            feats, ids = _features(plan, fmap, [i], leaves, current, domain, dtype, placement,
                                   prefix=True)[i]
        else:
            feats, ids = refs[i]
        target = (_refit_target(plan, s, refs[i][0].z, teacher, taken, original)
                  if forward and fmap.refit else None)
        leaves, infos[i] = _step(plan, method, s, feats, ids, leaves, current, widths[i],
                                 target, placement)
        for member in s.members:
            current[member] = widths[i]
        taken.update({(p.leaf, p.axis, p.index): infos[i].kept for p in s.producers})
    estimate = _estimate(plan, teacher, leaves, domain, placement)
    return leaves, CompressInfo.for_method(method, domain, infos, activation=plan.activation_name,
                                           error_estimate=estimate)


def expand(plan: Plan, small: Sequence, infos: Sequence[LayerInfo]) -> list:
    """The compressed ``small`` at the teacher's shapes: every kept neuron back at its index,
    the others zero in their producers and in the rows that read them, so they contribute
    nothing (the same function; one compilation of a measurement serves every candidate)."""
    return place(plan, small, [None if info.skipped else info.kept for info in infos])


def place(plan: Plan, small: Sequence, kept: Sequence) -> list:
    """``small`` (set ``i`` ``len(kept[i])`` wide; ``None``: the set at its full width) at the
    plan's widths: neuron ``j`` of set ``i`` at index ``kept[i][j]``, zeros elsewhere in the
    producers and in the rows that read them (:func:`expand` for a compression's kept indices;
    the search for the smallest network pads its candidates with it). Traceable; on NumPy
    leaves it stays on the host (no dispatch per leaf)."""
    out = list(small)
    xp = np if all(isinstance(v, np.ndarray) for v in out) else jnp
    where = {}
    for s, idx in zip(plan.sets, kept, strict=True):
        if idx is None:
            continue
        for member in s.members:
            where[member] = (xp.asarray(idx), plan.width_of[member])
        for leaf, axis in s.axes():
            out[leaf] = _scatter(out[leaf], axis, *where[s.members[0]])
    for leaf, axis, blocks in plan.layouts:
        parts, off = [], 0
        for g, size in blocks:
            if g in where:
                idx, width = where[g]
                cur = int(idx.shape[0])
                parts.append(_scatter(_slice(out[leaf], axis, off, off + cur), axis, idx, width))
                off += cur
            else:
                parts.append(_slice(out[leaf], axis, off, off + size))
                off += size
        if off != out[leaf].shape[axis]:
            raise ValueError(f"expand: leaf {leaf} has {out[leaf].shape[axis]} rows along axis "
                             f"{axis}; its layout accounts for {off}")
        out[leaf] = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=axis)
    return out


def _slice(value, axis: int, lo: int, hi: int):
    """``value[lo:hi]`` along ``axis`` (a NumPy or JAX array)."""
    return value[(slice(None),) * (axis % value.ndim) + (slice(lo, hi),)]


def trim_leaves(plan: Plan, leaves: Sequence, atol: float = 0.0) -> tuple[list, list]:
    """Drop every neuron of every set whose reading rows are all at most ``atol`` (zero by
    default: the neurons past the numerical rank); ``(leaves, masks)``, one boolean mask of the
    kept neurons per set (host side; a stack, whose slices keep one width, keeps a neuron
    position that any of its slices reads)."""
    out = [np.asarray(v) for v in leaves]
    widths = _widths_of(plan, out)
    masks = []
    for s in plan.sets:
        width = widths[s.members[0]]
        keep = np.zeros(width, bool)
        for r in s.readers:
            off = _offset(plan, widths, r.leaf, r.axis, r.block)
            axis = _local(r.axis, r.index)
            rows = np.moveaxis(np.take(_get(out, r.leaf, r.index), np.arange(off, off + width),
                                       axis=axis), axis, 0).reshape(width, -1)
            keep |= np.any(np.abs(rows) > atol, axis=1)
        if not keep.any():
            keep[0] = True  # keep one neuron so the network stays well-formed
        masks.append(keep)
    return restrict(plan, out, masks), masks


def _widths_of(plan: Plan, leaves: Sequence) -> dict[int, int]:
    """Every compressible group's width in ``leaves`` (read off its first producer)."""
    return {m: w for s, w in zip(plan.sets, set_widths(plan, leaves), strict=True)
            for m in s.members}


def set_widths(plan: Plan, leaves: Sequence) -> tuple[int, ...]:
    """The width of every set in ``leaves`` (the network's leaves at any widths), read off its
    first producer."""
    return tuple(int(np.shape(leaves[s.producers[0].leaf])[s.producers[0].axis])
                 for s in plan.sets)


def restrict(plan: Plan, leaves: Sequence, masks: Sequence) -> list:
    """The neurons of set ``i`` where ``masks[i]`` (a boolean array over its current neurons)
    is true, the others dropped from their producers and from the rows that read them (host
    side; the inverse of :func:`place`)."""
    out = [np.asarray(v) for v in leaves]
    widths = _widths_of(plan, out)
    keep_of = {}
    for s, keep in zip(plan.sets, masks, strict=True):
        keep = np.asarray(keep, bool)
        for m in s.members:
            keep_of[m] = keep
        for leaf, axis in s.axes():
            out[leaf] = np.compress(keep, out[leaf], axis=axis)
    for leaf, axis, blocks in plan.layouts:
        parts, off = [], 0
        for g, _ in blocks:
            size = widths.get(g, None) if g >= 0 else None
            size = dict(blocks)[g] if size is None else size
            part = np.take(out[leaf], np.arange(off, off + size), axis=axis)
            parts.append(np.compress(keep_of[g], part, axis=axis) if g in keep_of else part)
            off += size
        out[leaf] = np.concatenate(parts, axis=axis)
    return [jax.device_put(v) for v in out]


def _scatter(value, axis: int, idx, width: int):
    """``value`` (``len(idx)`` along ``axis``) placed at ``idx`` of a zero array ``width`` long
    (NumPy in, NumPy out)."""
    shape = list(value.shape)
    shape[axis] = width
    index = (slice(None),) * (axis % value.ndim) + (idx,)
    if isinstance(value, np.ndarray):
        out = np.zeros(shape, value.dtype)
        out[index] = value
        return out
    return jnp.zeros(shape, value.dtype).at[index].set(value)


def _refit_target(plan: Plan, s, z, teacher, taken, original):
    """The forward re-fit's target ``Z K_teacher`` of a set with one consumed tensor (else
    ``None``): the teacher's readers, their columns where earlier sets kept them (a stream's set
    comes first and slices the columns of every block's output kernel)."""
    if len(s.tensors()) != 1:
        return None
    teacher_kernel, _ = _out_kernel(plan, s, _taken(teacher, taken), original)
    return jnp.matmul(z, teacher_kernel, precision=HIGHEST)


def _estimate(plan: Plan, teacher, small, domain, placement) -> jax.Array:
    """``max |F - F~|`` on the domain's fixed Sobol points (NaN for an invalid traced domain)."""
    if plan.chain is not None:
        return error_estimate(plan.chain.lower(teacher), plan.chain.lower(small),
                              activation=plan.chain.activation, domain=domain,
                              placement=placement)
    pts = error_points(domain, dtype=plan.x.dtype)
    est = jnp.max(jnp.abs(plan.apply(teacher, pts) - plan.apply(small, pts)))
    return jnp.where(domain.valid(), est, jnp.nan)


def best(results: list[tuple[list, CompressInfo]], method: BestOf) -> tuple[list, CompressInfo]:
    """Per teacher, the candidate with the smallest error estimate (same shapes throughout; a
    traced choice, so it runs under ``vmap``).

    A non-finite estimate (a NaN result, e.g. from non-finite traced data) never wins; when
    every candidate's is non-finite the first is kept and the estimate is NaN.
    """
    estimates = jnp.stack([info.error_estimate for _, info in results])
    finite = jnp.isfinite(estimates)
    choice = jnp.argmin(jnp.where(finite, estimates, jnp.inf)).astype(jnp.int32)
    best_estimate = jnp.where(jnp.any(finite), estimates[choice], jnp.nan)

    def pick(*xs):
        return jnp.stack(xs)[choice]

    leaves = jax.tree.map(pick, *[p for p, _ in results])
    first = results[0][1]
    layers = []
    for i, li in enumerate(first.layers):
        cands = [info.layers[i] for _, info in results]
        arrays = {f: pick(*[getattr(c, f) for c in cands])
                  for f in ("kept", "rank", "residual", "max_coef", "swaps")}
        rows = {c.num_rows for c in cands}
        layers.append(dataclasses.replace(li, **arrays,
                                          num_rows=rows.pop() if len(rows) == 1 else -1,
                                          skipped=all(c.skipped for c in cands)))

    def joined(field):
        return "|".join(dict.fromkeys(getattr(info, field) for _, info in results))

    info = dataclasses.replace(
        first, layers=tuple(layers), layer_order=joined("layer_order"),
        features=joined("features"), selector=joined("selector"),
        coordinates=joined("coordinates"), method=method.describe(),
        error_estimate=best_estimate, choice=choice,
        candidates=tuple(m.describe() for m in method.methods))
    return leaves, info


def _run_impl(leaves, method, domain, *, plan: Plan, placement: Placement | None = None):
    if isinstance(method, BestOf):
        out = best([run(plan, m, leaves, domain, placement) for m in method.methods], method)
    else:
        out = run(plan, method, leaves, domain, placement)
    if placement is not None:  # the compressed network is D_k wide: replicated on the mesh
        replicated = placement.replicated()
        out = ([jax.lax.with_sharding_constraint(a, replicated) for a in out[0]], out[1])
    return out


#: :func:`run` (or the best of several methods of equal widths) in one ``jax.jit``: the method's
#: and the domain's settings and the plan are static, their arrays traced.
run_jit = jax.jit(_run_impl, static_argnames=("plan", "placement"))


# ------------------------------------------------------------------------------------------------
# The method checks (eager, before anything is compiled)
# ------------------------------------------------------------------------------------------------


def check_method(method, plan: Plan, domain, where: str, *, devices: int = 1,
                 set_names: Sequence[str] | None = None) -> tuple[int, ...]:
    """Eager checks of ``method`` against a network's plan and domain (the feature map's own
    checks, widths, the selector, memory over ``devices``); returns the widths per set (a
    best-of's candidates must agree: their widths, else ``ValueError``)."""
    sizes = plan.sizes
    dtype = plan.x.dtype
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    names = set_names or [f"hidden layer {l}" for l in range(1, len(plan.sets) + 1)]
    found = []
    for m in candidates:
        if plan.chain is None:
            _check_program_features(m, where)
        m.features.check(sizes, dtype, domain, where)
        if m.widths is not None and len(m.widths) != len(plan.sets):
            if plan.chain is not None:
                raise ValueError(f"{where}: widths has {len(m.widths)} entries; expected one "
                                 f"per hidden layer ({len(plan.sets)})")
            raise ValueError(f"{where}: widths={tuple(m.widths)} gives {len(m.widths)} widths; "
                             f"this traced network has {len(plan.sets)} compressible sets (a "
                             f"tied set counts once): {'; '.join(names)}")
        widths = resolve_widths(m, sizes, domain)
        for name, w, h in zip(names, widths, sizes[1:-1], strict=True):
            if not 1 <= w <= h:
                raise ValueError(f"{where}: target width {w} for {name} must be in [1, {h}] "
                                 f"(its width)")
            m.selector.check(h, w, f"{where}: {name}")
        found.append(widths)
    if len(set(found)) > 1 and plan.chain is not None:
        raise ValueError(f"{where}: best_of needs methods of equal widths (one result is kept per "
                         f"teacher); got {found}. Give them the same order or widths=.")
    check_memory(candidates, sizes, dtype, domain, where, devices=devices)
    return found[0]


def _check_program_features(m: Method, where: str) -> None:
    fmap = m.features
    if fmap.coordinates != "input":
        raise ValueError(f"{where}: coordinates={fmap.coordinates!r} needs a chain of dense "
                         "layers; this network is compressed in input coordinates (through its "
                         "program)")
    if type(fmap).of_values is FeatureMap.of_values:
        raise TypeError(f"{where}: the feature map {fmap.name!r} computes features of a params "
                        "list only; this network is not a chain, so it needs "
                        "of_values(values, layer, *, domain, dtype) (see jaxcompress.FeatureMap)")


#: Bytes that compiling a compression's program costs whatever its order (measured: 9 MB on
#: ``[2, 64, 64, 1]`` at k = 2, on a 2-core CPU).
COMPILE_BYTES = 16 * 2**20


def memory_estimate(method, sizes, dtype, domain, *, devices: int = 1,
                    compilation: bool = False) -> dict[str, int]:
    """Bytes per device one compression needs, by part (the largest method of a best-of).

    The teacher's parameters, the feature map's working set (``method.features.memory``: e.g. the
    Taylor pass's coefficient products, or the activations at the collocation points; none for
    layers kept whole, ``LayerInfo.skipped``), the selection's scaled copy of the largest
    feature matrix and the error estimate's activations, divided over ``devices`` when the
    neurons are sharded.

    With ``compilation`` also the host memory of compiling the program (not divided: one
    program is compiled whatever the device count): :data:`COMPILE_BYTES` and the feature map's
    compile cost (e.g. :func:`jaxcompress.features.taylor_compile_cost`). With it the sum is an
    upper bound of the growth of the process's peak resident memory during ``compress``
    (``tests/test_memory.py`` measures it on a grid of widths and orders); :func:`check_memory`
    uses it.
    """
    itemsize = jnp.dtype(dtype).itemsize
    candidates = method.methods if isinstance(method, BestOf) else (method,)
    most: dict[str, int] = {}
    for m in candidates:
        parts = {"teacher parameters": itemsize * param_count(sizes)}
        skipped = skipped_sets(m, sizes, domain, resolve_widths(m, sizes, domain))
        if not all(skipped):
            parts.update(m.features.with_skipped(skipped).memory(sizes, itemsize, domain))
        d_ks = m.features.num_features(sizes, domain)
        parts["selection"] = itemsize * max(
            [dk * w for dk, w, skip in zip(d_ks, sizes[1:-1], skipped, strict=True)
             if not skip], default=0)
        parts["error estimate"] = itemsize * ERROR_POINTS * max(sizes[1:]) * 2
        compiling = {k: parts.pop(k) for k in list(parts) if k.startswith("compiling")}
        parts = {k: -(-v // devices) for k, v in parts.items()}
        if compilation:
            parts.update(compiling, **{"compiling the compression": COMPILE_BYTES})
        if sum(parts.values()) > sum(most.values()):
            most = parts
    return most


def check_memory(methods, sizes, dtype, domain, where: str, *, devices: int = 1) -> None:
    """Refuse, before allocating anything, a compression that would not fit in memory."""
    for m in methods:
        parts = memory_estimate(m, sizes, dtype, domain, devices=devices, compilation=True)
        need, limit = sum(parts.values()), memory_limit()
        if need > limit:
            detail = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in
                               sorted(parts.items(), key=lambda kv: -kv[1]))
            raise ValueError(
                f"{where}: {m.describe()} on {sizes} needs about {need / 2**30:.1f} GiB per "
                f"device ({detail} GiB), over the limit of {limit / 2**30:.1f} GiB (the device's "
                "memory, or jaxcompress.taylor.MAX_FEATURE_BYTES when set). Lower the order "
                "(D_k) or the oversampling, use an effective input dimension (coordinates="
                "'bottleneck' or a Parameterization domain), or shard the neurons over more "
                "devices with jc.shard.")
