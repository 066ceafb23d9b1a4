r"""The plan: what a compression needs to know of a network, and the index arithmetic on its leaves.

A :class:`~jaxcompress.Network` answers :meth:`~jaxcompress.Network.plan` with a static,
hashable :class:`Plan`: for every compressible **set** of neuron groups (a group, or groups tied
into one index set; a stack of them for the layers of a ``scan``) the leaves that produce its
neurons (:class:`Producer`: sliced with them) and the kernel rows that read them
(:class:`Reader`: re-weighted), and for every reader leaf its **row blocks** (which group's
neurons each block of rows reads, in order). Everything that turns those records into array
indices lives here, as their methods: where a block starts at the current widths
(:meth:`Plan.blocks`, the one offset computation), a set's readers' rows side by side
(:meth:`Plan.read_rows`) and their write-back (:meth:`Plan.write_rows`), slicing a set's
producers (:meth:`SetPlan.slice_producers`), cutting a stack (:meth:`Plan.compact`), and the
host-side moves between widths (:meth:`Plan.place`, :meth:`Plan.expand`, :meth:`Plan.restrict`,
:meth:`Plan.trim`). The driver (:mod:`jaxcompress.driver`) holds the loop over the sets and
nothing of this arithmetic; this module imports nothing of it.

A leaf is addressed by its index in the flattened parameter pytree; a **slice** ``index`` is
position ``index`` along axis 0 of a stacked leaf (layer ``index`` of a ``scan``), axes counting
in the whole leaf.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._checks import is_concrete
from jaxcompress.activations import Activation
from jaxcompress.graph.values import DUAL
from jaxcompress.mlp import Params, apply
from jaxcompress.placement import Placement
from jaxcompress.program import Program, evaluate, trace_program

__all__ = ["Block", "ChainPlan", "FlatFn", "LayerLeaves", "Plan", "Producer", "Reader",
           "SetPlan", "flat_output"]


# ------------------------------------------------------------------------------------------------
# Leaves and their slices
# ------------------------------------------------------------------------------------------------


def get_leaf(leaves, leaf: int, index: int | None):
    """A leaf, or its slice ``index`` along axis 0 (a layer of a stacked leaf)."""
    return leaves[leaf] if index is None else leaves[leaf][index]


def put_leaf(leaves: list, leaf: int, index: int | None, value) -> None:
    """Write a leaf, or its slice ``index`` (of the slice's shape)."""
    leaves[leaf] = value if index is None else leaves[leaf].at[index].set(value)


def local_axis(axis: int, index: int | None) -> int:
    """A whole leaf's ``axis`` in its slice (the stack axis 0 removed)."""
    return axis if index is None else axis - 1


def take(leaf, kept, axis: int):
    """``leaf`` at the indices ``kept`` along ``axis`` (the indexing the chain always used)."""
    return leaf[(slice(None),) * axis + (kept,)]


def padded(kept, width: int):
    """``kept`` filled to ``width`` entries with copies of its first: a stack's slice keeps its
    shape until the stack is cut (:meth:`SetPlan.slice_producers` zeroes the copies)."""
    return jnp.concatenate([kept, jnp.broadcast_to(kept[:1], (width - kept.shape[0],))])


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


def _pad_rows(new, width: int):
    """``new`` ``(n, cols)`` with zero rows appended to ``width``."""
    return jnp.pad(new, ((0, width - new.shape[0]), (0, 0)))


def _slice(value, axis: int, lo: int, hi: int):
    """``value[lo:hi]`` along ``axis`` (a NumPy or JAX array)."""
    return value[(slice(None),) * (axis % value.ndim) + (slice(lo, hi),)]


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


# ------------------------------------------------------------------------------------------------
# The records
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
      values: ``(value, neuron axis)`` of every value of the program the rows read: one per
        site of the set (each call of the network in ``fn``); the rows are re-weighted to fit
        them all (their features stacked).
      index: the slice of a stacked leaf whose rows these are (``None``: the whole leaf).
    """

    leaf: int
    axis: int
    block: int
    values: tuple[tuple[int, int], ...]
    index: int | None = None


class Block(NamedTuple):
    """One block of a reader leaf's rows: ``group``'s neurons (0-based; ``-1``: no group's, an
    input concatenated beside a layer) at rows ``start .. start + size``."""

    group: int
    start: int
    size: int


class Place(NamedTuple):
    """Where a reader's rows sit among the columns of :meth:`Plan.read_rows`: the leaf (its
    slice ``index``), the axis, the first row ``start`` and the ``cols`` columns they give."""

    leaf: int
    axis: int
    start: int
    cols: int
    index: int | None


@dataclasses.dataclass(frozen=True)
class SetPlan:
    """One compressible set: a group, or groups tied by products, with one index set.

    Attributes:
      index: the 1-based index of its first group (the ``layer`` of its
        :class:`~jaxcompress.layer.LayerInfo`; hidden layer ``l`` of a chain).
      width: its width before compression.
      producers, readers: the leaves sliced with its neurons, and the rows that read them.
      members: the 0-based indices of its groups.
      parts: for a **stack** (sets that touch the slices of stacked leaves: the layers of a
        ``scan``, which keep one width), its sets, each selecting its own neurons; each
        slice's kept neurons are moved to its front and the stack is cut to the width after
        the last (:meth:`Plan.compact`). Empty for any other set.
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

    def tensors(self) -> list[tuple[tuple[tuple[int, int], ...], int]]:
        """The distinct consumed tensors ``(values, block)`` (one per gated layer of a modified
        MLP, two for ``[cos(xB), sin(xB)]``; a tensor read at several sites is one tensor,
        its sites' values stacked)."""
        return list(dict.fromkeys((r.values, r.block) for r in self.readers))

    def value_ids(self) -> list[int]:
        """Every program value its readers read (not :data:`DUAL`, rows read only through a
        derivative: their features are :meth:`Plan.contribution`)."""
        return list(dict.fromkeys(v for r in self.readers for v, _ in r.values if v != DUAL))

    def slice_producers(self, leaves: list, kept, pad: int | None = None) -> None:
        """Every producer (slice) of ``leaves`` at ``kept``, in place; with ``pad``, kept first
        and filled to ``pad`` with zero neurons (zero in every producer: they add nothing to a
        reader's columns, which an output-aware selector of an earlier layer sees)."""
        idx = kept if pad is None else padded(kept, pad)
        for p in self.producers:
            axis = local_axis(p.axis, p.index)
            new = take(get_leaf(leaves, p.leaf, p.index), idx, axis)
            if pad is not None:
                live = (jnp.arange(pad) < kept.shape[0]).astype(new.dtype)
                new = new * live.reshape(tuple(pad if i == axis else 1 for i in range(new.ndim)))
            put_leaf(leaves, p.leaf, p.index, new)

    def joint(self, places: Sequence[Place]) -> bool:
        """Whether the set needs its own re-weighting per tensor: several consumed tensors, or a
        kernel that both reads the set (rows) and produces one of its groups (columns)."""
        producers = {(p.leaf, p.index) for p in self.producers}
        return len(self.tensors()) > 1 or any((pl.leaf, pl.index) in producers for pl in places)


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
                    else jnp.reshape(leaves[layer.bias], (-1,)))   # a (1, n) bias too
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
        blocks along that axis (0-based groups) at the network's widths.
      width_of: the width of every group (0-based).
      d_out: the output width (the last group's).
      chain: the chain's layers and activation, or ``None`` off a chain.
      derivative: whether ``fn`` differentiates the network (:attr:`Network.derivative`).
      exits: where its cotangents leave the network (:attr:`Network.exits`).
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
    derivative: bool = False
    exits: tuple[int, ...] = ()

    # -- shapes ---------------------------------------------------------------------------------

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
        """The row blocks ``((group or -1, size), ...)`` of ``leaf`` along ``axis``."""
        for lf, ax, blocks in self.layouts:
            if (lf, ax) == (leaf, axis):
                return blocks
        raise KeyError((leaf, axis))

    def blocks(self, leaf: int, axis: int, widths: dict[int, int] | None = None
               ) -> tuple[Block, ...]:
        """The row blocks of ``leaf`` along ``axis`` with where each starts, at the current
        ``widths`` (0-based group -> width; a group it does not name, or ``None``, at its
        width in the plan): the one place block offsets are computed."""
        out, start = [], 0
        for g, size in self.layout(leaf, axis):
            if g >= 0 and widths is not None:
                size = widths.get(g, size)
            out.append(Block(g, start, size))
            start += size
        return tuple(out)

    def set_widths(self, leaves: Sequence) -> tuple[int, ...]:
        """The width of every set in ``leaves`` (the network's leaves at any widths), read off its
        first producer."""
        return tuple(int(np.shape(leaves[s.producers[0].leaf])[s.producers[0].axis])
                     for s in self.sets)

    def group_widths(self, leaves: Sequence) -> dict[int, int]:
        """Every compressible group's width in ``leaves`` (read off its set's first producer)."""
        return {m: w for s, w in zip(self.sets, self.set_widths(leaves), strict=True)
                for m in s.members}

    # -- the program ----------------------------------------------------------------------------

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
                f"{type(e).__name__}: {str(e).splitlines()[0].rstrip('.')}. Make the widths "
                "follow the parameter shapes (e.g. x @ kernel, not a hard-coded size)") from None
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

    # -- one set's rows: read, written back (traceable) -----------------------------------------

    def read_rows(self, s: SetPlan, leaves, widths: dict[int, int]
                  ) -> tuple[jax.Array, list[Place]]:
        """Every reader's rows side by side, ``(width, sum cols)``, and each one's place."""
        width = widths[s.members[0]]
        blocks, places = [], []
        for r in s.readers:
            off = self.blocks(r.leaf, r.axis, widths)[r.block].start
            rows = _rows(get_leaf(leaves, r.leaf, r.index), local_axis(r.axis, r.index), off,
                         width)
            places.append(Place(r.leaf, r.axis, off, rows.shape[1], r.index))
            blocks.append(rows)
        return (blocks[0] if len(blocks) == 1 else jnp.concatenate(blocks, axis=1)), places

    @staticmethod
    def write_rows(leaves: list, places: Sequence[Place], width: int, new_kernel,
                   pad: int | None = None) -> None:
        """Write ``new_kernel`` (``(n, sum cols)``, the readers' new rows side by side as
        :meth:`read_rows` read them) over the ``width`` rows of each place, in place; with
        ``pad``, each block filled with zero rows to ``pad``."""
        col = 0
        for pl in places:
            part = new_kernel if len(places) == 1 else new_kernel[:, col:col + pl.cols]
            part = part if pad is None else _pad_rows(part, pad)
            put_leaf(leaves, pl.leaf, pl.index,
                     _put_rows(get_leaf(leaves, pl.leaf, pl.index), local_axis(pl.axis, pl.index),
                               pl.start, width, part))
            col += pl.cols

    @staticmethod
    def write_spans(leaves: list, spans, coefs, width: int, pad: int | None = None) -> None:
        """Re-weight every reader span ``(leaf, axis, start, tensor, index)`` with its tensor's
        coefficients ``coefs[tensor]`` (``(n, width)``), in place: a tied set's write-back. Later
        blocks of a kernel first, so the earlier blocks' offsets stay valid."""
        for leaf, axis, off, t, index in sorted(
                spans, key=lambda sp: (sp[0], -1 if sp[4] is None else sp[4], -sp[2])):
            value, local = get_leaf(leaves, leaf, index), local_axis(axis, index)
            new = jnp.matmul(coefs[t], _rows(value, local, off, width),
                             precision=jax.lax.Precision.HIGHEST)
            new = new if pad is None else _pad_rows(new, pad)
            put_leaf(leaves, leaf, index, _put_rows(value, local, off, width, new))

    def consumed_slice(self, s: SetPlan, tensor, values: dict, widths, program=None,
                       leaves=None, x=None, dual: bool | None = None) -> jax.Array:
        """The set's neurons in the consumed ``tensor`` (``(n, r, width)``; the values of its
        sites side by side along ``r``) from the program's ``values`` (by id; rows read only
        through a derivative: :meth:`contribution` of ``program`` on ``leaves`` and ``x``). A
        site computed
        on other rows than ``x``'s ``n`` (``f(x0)`` at fixed points: a constant of ``x``) is
        one row, broadcast to all ``n``. ``dual``: only the sites read through a derivative
        (``True``) or only the others (``False``)."""
        sites, block = tensor
        if dual is not None:
            sites = tuple(site for site in sites if (site[0] == DUAL) == dual)
        r = next(r for r in s.readers if (r.values, r.block) == tensor)
        width = widths[s.members[0]]
        off = self.blocks(r.leaf, r.axis, widths)[block].start
        parts = []
        for value, axis in sites:
            if value == DUAL:
                parts.append(self.contribution(r, program, leaves, x, off, width))
                continue
            v = jax.lax.slice_in_dim(values[value], off, off + width, axis=axis)
            parts.append(jnp.moveaxis(v, axis, -1))
        n = parts[0].shape[0] if len(parts) == 1 else max(
            p.shape[0] for p in parts if p.ndim > 1)
        out = []
        for v in parts:
            if v.ndim < 2 or v.shape[0] != n:
                v = jnp.broadcast_to(v.reshape(1, -1, width), (n, v.size // width, width))
            out.append(v.reshape(n, -1, width))
        return out[0] if len(out) == 1 else jnp.concatenate(out, axis=1)

    def contribution(self, r: Reader, program: Program, leaves, x, off: int, width: int
                     ) -> jax.Array:
        """``d e(x) / d K[j, :]`` for each of the ``width`` rows ``j`` of the reader ``r`` from
        ``off`` (``(n, r, width)``), ``e`` the values where the program's cotangents leave the
        network (:attr:`exits`: its derivatives by ``x``, before ``fn`` normalises or combines
        them): what neuron ``j`` adds to them through these rows, which ``fn`` reads only
        through a derivative (``jax.grad`` of ``h K`` inside ``fn``: the features are then
        ``grad h_j``, the only functional of ``h`` the output depends on). The exits are linear
        in the rows, so one ``jvp`` per row, all of its columns at once, is exact."""
        leaves = list(leaves)
        base = get_leaf(leaves, r.leaf, r.index)
        axis = local_axis(r.axis, r.index)
        n = x.shape[0]

        def out(rows):
            put_leaf(leaves, r.leaf, r.index, rows)
            if not self.exits:
                return flat_output(self.fn(self.params(leaves), x), x)
            got = evaluate(program, leaves, x, self.exits)
            return jnp.concatenate([jnp.reshape(got[e], (n, -1)) for e in self.exits], axis=1)

        def along(j):
            hot = (jnp.arange(base.shape[axis]) == off + j).astype(base.dtype)
            tangent = jnp.broadcast_to(
                hot.reshape(tuple(-1 if i == axis else 1 for i in range(base.ndim))),
                base.shape)
            return jax.jvp(out, (base,), (tangent,))[1]

        got = jax.vmap(along)(jnp.arange(width))          # (width, n, r)
        return jnp.moveaxis(got, 0, -1)

    def compact(self, s: SetPlan, leaves, widths: dict[int, int], width: int) -> list:
        """A stack cut to ``width``: every slice of every producer axis, and every block of rows
        that reads it, keeps its first ``width`` neurons (each slice's kept ones, moved there)."""
        full = widths[s.members[0]]
        leaves = list(leaves)
        if width == full:
            return leaves
        for leaf, axis in s.axes():
            leaves[leaf] = jax.lax.slice_in_dim(leaves[leaf], 0, width, axis=axis)
        spans = {(r.leaf, r.axis, self.blocks(r.leaf, r.axis, widths)[r.block].start)
                 for r in s.readers}
        for leaf, axis, off in sorted(spans, key=lambda sp: (sp[0], sp[1], -sp[2])):
            v = leaves[leaf]
            leaves[leaf] = jnp.concatenate(
                [jax.lax.slice_in_dim(v, 0, off + width, axis=axis),
                 jax.lax.slice_in_dim(v, off + full, v.shape[axis], axis=axis)], axis=axis)
        return leaves

    @staticmethod
    def taken(leaves: Sequence, taken: dict[tuple[int, int, int | None], jax.Array]) -> list:
        """``leaves`` with every producer axis (slice) in ``taken`` at its kept neurons (no
        reader re-weighted): the teacher's columns where earlier sets kept them."""
        out = list(leaves)
        sliced: dict[tuple[int, int], dict[int, jax.Array]] = {}
        for (leaf, axis, index), kept in taken.items():
            if index is None:
                out[leaf] = take(out[leaf], kept, axis)
            else:
                sliced.setdefault((leaf, axis), {})[index] = kept
        for (leaf, axis), per in sliced.items():
            out[leaf] = jnp.stack([take(out[leaf][i], per[i], axis - 1) if i in per
                                   else out[leaf][i] for i in range(out[leaf].shape[0])])
        return out

    # -- between widths (the searches; host side or traceable) ----------------------------------

    def expand(self, small: Sequence, infos) -> list:
        """The compressed ``small`` at the teacher's shapes: every kept neuron back at its
        index, the others zero in their producers and in the rows that read them, so they
        contribute nothing (the same function; one compilation of a measurement serves every
        candidate). ``infos``: the compression's :class:`~jaxcompress.layer.LayerInfo` records."""
        return self.place(small, [None if info.skipped else info.kept for info in infos])

    def place(self, small: Sequence, kept: Sequence) -> list:
        """``small`` (set ``i`` ``len(kept[i])`` wide; ``None``: the set at its full width) at
        the plan's widths: neuron ``j`` of set ``i`` at index ``kept[i][j]``, zeros elsewhere in
        the producers and in the rows that read them (:meth:`expand` for a compression's kept
        indices; the search for the smallest network pads its candidates with it). Traceable;
        concrete leaves are placed on the host (op by op, each scatter of a new shape would
        compile a program), NumPy leaves stay there."""
        out = list(small)
        on_host = all(isinstance(v, np.ndarray) for v in out)
        concrete = all(is_concrete(v) for v in out) and all(
            i is None or is_concrete(i) for i in kept)
        if concrete and not on_host:
            placed = self.place([np.asarray(v) for v in out],
                                [None if i is None else np.asarray(i) for i in kept])
            return [jax.device_put(v) for v in placed]
        xp = np if on_host else jnp
        where = {}
        for s, idx in zip(self.sets, kept, strict=True):
            if idx is None:
                continue
            for member in s.members:
                where[member] = (xp.asarray(idx), self.width_of[member])
            for leaf, axis in s.axes():
                out[leaf] = _scatter(out[leaf], axis, *where[s.members[0]])
        current = {g: int(idx.shape[0]) for g, (idx, _) in where.items()}
        for leaf, axis, _ in self.layouts:
            parts = []
            blocks = self.blocks(leaf, axis, current)
            for b in blocks:
                part = _slice(out[leaf], axis, b.start, b.start + b.size)
                parts.append(_scatter(part, axis, *where[b.group]) if b.group in where else part)
            end = blocks[-1].start + blocks[-1].size if blocks else 0
            if end != out[leaf].shape[axis]:
                raise ValueError(f"expand: leaf {leaf} has {out[leaf].shape[axis]} rows along "
                                 f"axis {axis}; its layout accounts for {end}")
            out[leaf] = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=axis)
        return out

    def restrict(self, leaves: Sequence, masks: Sequence) -> list:
        """The neurons of set ``i`` where ``masks[i]`` (a boolean array over its current
        neurons) is true, the others dropped from their producers and from the rows that read
        them (host side; the inverse of :meth:`place`)."""
        out = [np.asarray(v) for v in leaves]
        widths = self.group_widths(out)
        keep_of = {}
        for s, keep in zip(self.sets, masks, strict=True):
            keep = np.asarray(keep, bool)
            for m in s.members:
                keep_of[m] = keep
            for leaf, axis in s.axes():
                out[leaf] = np.compress(keep, out[leaf], axis=axis)
        for leaf, axis, _ in self.layouts:
            parts = []
            for b in self.blocks(leaf, axis, widths):
                part = np.take(out[leaf], np.arange(b.start, b.start + b.size), axis=axis)
                parts.append(np.compress(keep_of[b.group], part, axis=axis)
                             if b.group in keep_of else part)
            out[leaf] = np.concatenate(parts, axis=axis)
        return [jax.device_put(v) for v in out]

    def reading_norms(self, leaves: Sequence) -> list[np.ndarray]:
        """Per set, per neuron: the largest ``|w|`` of the rows that read it (host side; a
        stack, whose slices keep one width, takes the largest over its slices)."""
        out = [np.asarray(v) for v in leaves]
        widths = self.group_widths(out)
        norms = []
        for s in self.sets:
            width = widths[s.members[0]]
            most = np.zeros(width)
            for r in s.readers:
                off = self.blocks(r.leaf, r.axis, widths)[r.block].start
                axis = local_axis(r.axis, r.index)
                rows = np.moveaxis(np.take(get_leaf(out, r.leaf, r.index),
                                           np.arange(off, off + width), axis=axis),
                                   axis, 0).reshape(width, -1)
                most = np.maximum(most, np.max(np.abs(rows), axis=1, initial=0.0))
            norms.append(most)
        return norms

    def trim(self, leaves: Sequence, atol: float = 0.0) -> tuple[list, list]:
        """Drop every neuron of every set whose reading rows are all at most ``atol`` (zero by
        default: the neurons past the numerical rank); ``(leaves, masks)``, one boolean mask of
        the kept neurons per set (host side; a set that would lose every neuron keeps its
        first, so the network stays well-formed)."""
        masks = []
        for norms in self.reading_norms(leaves):
            keep = norms > atol
            if not keep.any():
                keep[0] = True
            masks.append(keep)
        return self.restrict(leaves, masks), masks


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


@dataclasses.dataclass(frozen=True)
class FlatFn:
    """``fn(params, x)`` with an output pytree (several heads) as one array
    (:func:`flat_output`); equal for equal ``fn``, so equal programs share a compilation."""

    fn: Callable

    def __call__(self, params, x):
        return flat_output(self.fn(params, x), x)
