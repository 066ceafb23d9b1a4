"""The state of one interpretation of a flat program, and the narrow API its rules use.

A rule (:mod:`jaxcompress.graph.rules`) sees one equation and its operands' :class:`Val` records
and answers through these methods only: :meth:`Analysis.new_group` (a ``dot_general`` with a
parameter kernel), :meth:`Analysis.consume` (a kernel's rows read a value's groups),
:meth:`Analysis.pin` (keep groups whole, with the reason and the line), :meth:`Analysis.tie`
(two groups share one index set), and the activation-building calls
(:meth:`Analysis.set_bias`, :meth:`Analysis.add_scale`, :meth:`Analysis.add_kink`,
:meth:`Analysis.extend_activation`). Rules never reach into the driver; the driver never knows a
primitive.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxcompress.graph.values import DUAL, Consumer, Group, Val
from jaxcompress.program import Const, Eqn

__all__ = ["Analysis", "chain_of", "close_constants", "close_duals", "close_sets", "close_stacks",
           "pin_shared", "seed_candidates"]


class Analysis:
    """What the interpretation has found so far: values, groups, layouts, ties."""

    def __init__(self, leaf_shapes: Sequence[tuple[int, ...]], seeds=frozenset()):
        self.leaf_shapes = list(leaf_shapes)
        #: (kernel leaf, axis, slice or None) whose ``c K^T`` of a constant ``c`` starts a
        #: derivative (found by a first interpretation: :func:`seed_candidates`)
        self.seeds = frozenset(seeds)
        #: whether ``fn`` differentiates the network (a cotangent crossed a kernel)
        self.derivative = False
        #: the values where a cotangent leaves the network: ``c K^T`` of a first kernel, the
        #: derivative by the input ``x`` (linear in every reader's rows)
        self.exits: list[int] = []
        #: ``(reason, line)`` of what a rule could not follow where no group was there to pin
        #: (a batched ``dot_general`` on ``x``): shown under the table
        self.notes: list[tuple[str, str]] = []
        self.vals: dict[int, Val] = {}
        self.groups: list[Group] = []
        self.unknown: list[tuple[str, str]] = []
        #: (leaf, slice or None) -> how many equations read the leaf (a slice of it), views
        #: (a transpose, a broadcast) not counted: the equation that uses the view is
        self.uses: dict[tuple[int, int | None], int] = {}
        #: (leaf, slice or None) -> how many of those reads a rule explained: a kernel of a
        #: group's site, its bias there, a per-neuron parameter of its activation
        self.explained: dict[tuple[int, int | None], int] = {}
        #: (kernel leaf, axis, slice or None) -> the group its columns produce: a second
        #: ``dot_general`` with the same kernel computes the same neurons at another *site*
        self.produced: dict[tuple[int, int, int | None], int] = {}
        #: (leaf, axis, slice or None, row blocks, row blocks, line): a kernel whose rows read
        #: different groups at different sites (pinned by :func:`pin_shared`)
        self.conflicts: list = []
        #: (consumer leaf, axis, slice or None) -> the row blocks ((group or -1, size), ...)
        #: along that axis (of the leaf, or of its slice; merged by close_stacks)
        self.layouts: dict[tuple[int, int, int | None], tuple[tuple[int, int], ...]] = {}
        #: union-find over groups (0-based): groups tied by elementwise products
        self._parent: list[int] = []

    # -- reading --------------------------------------------------------------------------------

    def val(self, operand) -> Val:
        if isinstance(operand, Const):
            return Val("const", value=operand.value)
        return self.vals[operand]

    def find(self, g: int) -> int:
        """The tied set (its representative group, 0-based) of group ``g``."""
        while self._parent[g] != g:
            self._parent[g] = self._parent[self._parent[g]]
            g = self._parent[g]
        return g

    def shape_of(self, v: Val) -> tuple[int, ...]:
        """The shape of a parameter value: its leaf's, or its slice's (``(1, ...)`` before the
        stack axis is squeezed away)."""
        shape = tuple(self.leaf_shapes[v.leaf])
        if v.index is None:
            return shape
        return ((1,) if v.lead else ()) + shape[1:]

    def sets_of(self, blocks) -> tuple:
        """A block structure with every group replaced by its tied set."""
        return tuple((self.find(g) if g >= 0 else -1, size) for g, size in blocks)

    # -- the rules' API -------------------------------------------------------------------------

    def new_group(self, *, width: int, kernel: int, kernel_axis: int, source,
                  stack: int | None = None, line: str = "", constant: bool = False) -> int:
        """The neuron group produced by the kernel leaf ``kernel`` along ``kernel_axis`` (its
        slice ``stack`` of a stacked leaf, axes counted in the whole leaf); its 0-based index.
        When that kernel already produced a group (the network called again: ``f(x) + f(-x)``,
        ``f(x) - f(x0)``), this is a new **site** of the same group: the same neurons computed
        on other data, sliced together and read by the same rows. ``constant``: this site's
        data does not depend on ``x``."""
        self.explain(kernel, stack)
        key = (kernel, kernel_axis, stack)
        if key in self.produced:
            g = self.produced[key]
            grp = self.groups[g]
            grp.sites.append(line)
            grp.constant = grp.constant and constant
            if grp.source != source:
                grp.source = "other"
            return g
        self.groups.append(Group(index=len(self.groups) + 1, width=width, kernel=kernel,
                                 kernel_axis=kernel_axis, source=source, stack=stack,
                                 sites=[line], constant=constant))
        self._parent.append(len(self.groups) - 1)
        self.produced[key] = len(self.groups) - 1
        return len(self.groups) - 1

    def explain(self, leaf: int, index: int | None) -> None:
        """One read of ``leaf`` (its slice ``index``) is a role a rule recorded."""
        self.explained[(leaf, index)] = self.explained.get((leaf, index), 0) + 1

    def pin(self, vals: Sequence[Val], reason: str, line: str) -> None:
        """Keep every group of ``vals`` whole, saying why and where."""
        for v in vals:
            for g in v.groups:
                self.groups[g].pin(reason, line)

    def pin_group(self, g: int, reason: str, line: str) -> None:
        self.groups[g].pin(reason, line)

    def tie(self, g: int, h: int) -> None:
        """Groups ``g`` and ``h`` (0-based) keep one index set of neurons."""
        rg, rh = self.find(g), self.find(h)
        if rg != rh:
            self._parent[max(rg, rh)] = min(rg, rh)

    def consume(self, eqn: Eqn, data: Val, operand: int, leaf: int, leaf_axis: int,
                axis: int, index: int | None = None) -> None:
        """The kernel ``leaf``'s rows along ``leaf_axis`` (of its slice ``index`` of a stacked
        leaf) read ``data``'s groups (the value ``operand`` of the program, neurons along
        ``axis``)."""
        g0 = data.single()
        if data.pre and g0 is not None and not self.groups[g0].program:
            # pinned by close_sets unless a stream ties it (a linear input projection)
            self.groups[g0].linear = self.groups[g0].linear or eqn.line
        key = (leaf, leaf_axis, index)
        if key in self.layouts and self.sets_of(self.layouts[key]) != self.sets_of(data.blocks):
            self.conflicts.append((leaf, index, self.layouts[key], data.blocks, eqn.line))
        self.layouts.setdefault(key, data.blocks)
        offset = 0
        for b, (g, size) in enumerate(data.blocks):
            if g >= 0:
                grp = self.groups[g]
                if not grp.consumers:
                    grp.consumed_node = data.node
                grp.consumers.append(Consumer(leaf, leaf_axis, b, operand, axis, offset,
                                              eqn.line, index))
            offset += size

    def consume_dual(self, eqn: Eqn, g: int, leaf: int, leaf_axis: int,
                     index: int | None = None) -> None:
        """The kernel ``leaf``'s rows along ``leaf_axis`` read group ``g`` only through a
        derivative: ``jax.grad`` inside ``fn`` computes ``c K^T`` (the cotangent of the rows'
        neurons) and never ``h K`` (:data:`~jaxcompress.graph.values.DUAL`)."""
        self.explain(leaf, index)
        self.derivative = True
        grp = self.groups[g]
        blocks = ((g, grp.width),)
        key = (leaf, leaf_axis, index)
        old = self.layouts.get(key)
        if (old is not None and len(old) == 1 and old[0][0] >= 0 and old[0][1] == grp.width
                and self.find(old[0][0]) != self.find(g)):
            # the rows read a product of the two groups (a gate h * U whose forward product
            # jax.grad never computes: only its cotangents, ct * U and ct * h): one index set
            self.tie(old[0][0], g)
        elif old is not None and self.sets_of(old) != self.sets_of(blocks):
            self.conflicts.append((leaf, index, old, blocks, eqn.line))
        self.layouts.setdefault(key, blocks)
        grp.consumers.append(Consumer(leaf, leaf_axis, 0, DUAL, -1, 0, eqn.line, index))

    def set_bias(self, g: int, leaf: int, axis: int | None = None) -> None:
        """Leaf ``leaf`` is group ``g``'s bias, its neurons along ``axis`` (``None``: the
        first axis of the leaf or of its slice)."""
        self.groups[g].bias, self.groups[g].bias_axis = leaf, axis

    def add_scale(self, g: int, leaf: int, index: int | None = None) -> None:
        """A per-neuron parameter of group ``g`` (sliced with its neurons; its slice ``index``
        of a stacked leaf), however often the activation reads it (Snake's ``a``)."""
        self.explain(leaf, index)
        grp = self.groups[g]
        if (leaf, index) not in zip(grp.scales, grp.scale_stacks, strict=True):
            grp.scales.append(leaf)
            grp.scale_stacks.append(index)

    def add_kink(self, g: int, primitive: str, line: str) -> None:
        if (primitive, line) not in self.groups[g].kinks:
            self.groups[g].kinks.append((primitive, line))

    def extend_activation(self, g: int, eqn: Eqn, operands) -> int:
        """The node of ``eqn`` in group ``g``'s activation program: an equal equation already
        there (the same op at another site of the group), else appended."""
        program = self.groups[g].program
        for i, (prim, params, ops) in enumerate(program):
            if prim is eqn.primitive and params == eqn.params and _same_operands(ops, operands):
                return i + 1
        program.append((eqn.primitive, eqn.params, operands))
        self.groups[g].calls.append(eqn.call)
        return len(program)


def _same_operands(a, b) -> bool:
    return len(a) == len(b) and all(
        ka == kb and (np.array_equal(ra, rb) if ka == "c" else ra == rb)
        for (ka, ra), (kb, rb) in zip(a, b, strict=True))


def _reads(counts: dict, leaf: int, index: int | None) -> int:
    """How many reads ``counts`` holds of ``leaf`` (its slice ``index``): a read of the whole
    leaf counts for every slice, a read of any slice for the whole leaf."""
    here = counts.get((leaf, index), 0)
    if index is not None:
        return here + counts.get((leaf, None), 0)
    return here + sum(n for (lf, i), n in counts.items() if lf == leaf and i is not None)


def _site(g: Group) -> str:
    """The user's line that computes the group's neurons (its first site), for a pin that
    concerns a leaf rather than one equation."""
    return g.sites[0] if g.sites else "params"


def pin_shared(a: Analysis, paths: Sequence[str]) -> None:
    """Pin a group one of whose leaves the program reads other than as the group's own
    kernel, bias or per-neuron parameter at one of its sites, or as the rows that read it:
    writing a smaller leaf back would change that other use (a slice of a stacked leaf is
    read once per layer). A leaf (slice) that produces several groups is shared too (a bias
    added to two layers), and so is a kernel whose rows read different groups at different
    sites (the same layer applied twice in a row: one set of rows cannot be re-weighted for
    both)."""
    producing: dict[tuple[int, int | None], list[Group]] = {}
    for g in a.groups:
        for leaf, _, index in dict.fromkeys(g.slots()):
            producing.setdefault((leaf, index), []).append(g)
    for (leaf, index), groups in producing.items():
        if len(groups) > 1:
            where = paths[leaf] + ("" if index is None else f"[{index}]")
            for g in groups:
                g.pin(f"the leaf {where} produces {len(groups)} groups (shared weights); "
                      "fix: call one network several times (f(x) + f(-x): one group at "
                      "several sites), or give each use a leaf of its own", _site(g))
    for leaf, index, first, other, line in a.conflicts:
        where = paths[leaf] + ("" if index is None else f"[{index}]")
        names = [("group " + ", ".join(str(g + 1) for g, _ in blocks if g >= 0))
                 if any(g >= 0 for g, _ in blocks) else "no group" for blocks in (first, other)]
        for g in {g for blocks in (first, other) for g, _ in blocks if g >= 0}:
            a.groups[g].pin(f"the rows of {where} read {names[0]} at one call and "
                            f"{names[1]} at another (one set of rows cannot be re-weighted "
                            "for both); fix: give each use a kernel leaf of its own", line)
    for g in a.groups:
        refs = [(leaf, index) for leaf, _, index in g.slots()] + [
            (c.leaf, c.index) for c in g.consumers]
        for leaf, index in dict.fromkeys(refs):
            n, known = _reads(a.uses, leaf, index), _reads(a.explained, leaf, index)
            if n > known:
                where = paths[leaf] + ("" if index is None else f"[{index}]")
                g.pin(f"the leaf {where} is read {n} times, {n - known} of them other than "
                      "as this network's weights (shared weights); fix: read it in fn only as "
                      "the network's weights (a penalty on the weights belongs in the loss, "
                      "outside fn)", _site(g))


def seed_candidates(a: Analysis) -> frozenset:
    """The kernels whose ``c K^T`` of a constant ``c`` starts a derivative, as a first
    interpretation (``a``, without seeds) sees them: a group all of whose sites are constant,
    linear (no activation, bias or per-neuron parameter) and multiplied elementwise with a
    group of the same width that depends on ``x``. That is ``jax.grad`` inside ``fn``: the
    cotangent of the last hidden layer, ``c K^T``, times its activation's derivative; the
    output ``h K`` itself is never computed. A second interpretation reads these kernels'
    free axis as rows that read the other group (:meth:`Analysis.consume_dual`)."""
    out = set()
    sets: dict[int, list[Group]] = {}
    for i, g in enumerate(a.groups):
        sets.setdefault(a.find(i), []).append(g)
    for members in sets.values():
        live = [g for g in members if not g.constant]
        for g in members:
            if (g.constant and not g.program and g.bias is None and not g.scales
                    and any(h.width == g.width for h in live)):
                out.add((g.kernel, g.kernel_axis, g.stack))
    return frozenset(out)


def close_duals(a: Analysis) -> None:
    """A group read only through a derivative (``jax.grad`` inside ``fn`` never computes the
    last hidden layer's ``h K``) has no consumed node of its own: its activation is taken to
    end where another group's whose program is the same equations ends (the network's layers
    share their activation), for the table and the activation's name only (its features are
    its rows' contribution to ``fn``'s output:
    :meth:`~jaxcompress.graph.plan.Plan.contribution`)."""
    for g in a.groups:
        if not g.consumers or g.consumed_node is not None or any(
                c.value != DUAL for c in g.consumers):
            continue
        for h in a.groups:
            end = h.consumed_node
            if h is not g and end and len(g.program) >= end and all(
                    p[0] is q[0] and p[1] == q[1] and _same_operands(p[2], q[2])
                    for p, q in zip(g.program[:end], h.program[:end], strict=True)):
                g.consumed_node = end
                break


def close_constants(a: Analysis, line: str = "params") -> None:
    """Pin every group none of whose sites depends on ``x``."""
    for g in a.groups:
        if g.constant:
            g.pin("does not depend on the input x (a function of constants and parameters "
                  "only, e.g. a DeepONet's branch on fixed input functions); fix: none "
                  "needed, it is one constant on the domain (compress it with the data it "
                  "reads, jc.data_matching, as a network of its own)", g.sites[0] or line)


def close_sets(a: Analysis) -> None:
    """Record every tied set on its groups; a pin of one group pins its whole set (the set
    shares one index set of neurons)."""
    sets: dict[int, list[Group]] = {}
    for i, g in enumerate(a.groups):
        sets.setdefault(a.find(i), []).append(g)
    for members in sets.values():
        if len(members) < 2:
            if members[0].linear:
                members[0].pin("no elementwise activation before the next kernel; fix: "
                               "none needed, a linear layer folds into the next kernel "
                               "(K1 K2: multiply them)", members[0].linear)
            continue
        indices = tuple(g.index for g in members)
        for g in members:
            g.tied = indices
        pinned = [g for g in members if g.pins]
        for g in members:
            for p in pinned:
                if p is not g:
                    g.pin(f"tied to group {p.index}, which is pinned (its fix frees "
                          "this one)", p.pins[0][1])


def close_stacks(a: Analysis, paths: Sequence[str],
                 links: Sequence[Sequence[Val]] = ()) -> dict[tuple[int, int], tuple]:
    """The layers of a ``scan`` keep one width: every group produced by a slice of a stacked
    leaf's axis, every group read by a block of its slices' rows, and every group of a block
    of one carry of a scan before and after each iteration (``links``: the carry keeps its
    shape) is width-tied to the others there (its tied set too); such a family is recorded on
    its groups
    (:attr:`Group.stacked`) and a pin of one pins it all. Returns the row layouts by whole
    leaf: a stacked leaf's slices must read values of one block structure (else their groups
    are pinned, with the reason)."""
    n = len(a.groups)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(group_ids) -> None:
        ids = list(group_ids)
        for i in ids[1:]:
            parent[find(i)] = find(ids[0])

    for i in range(n):
        union([i, a.find(i)])
    touched: set[int] = set()
    bad: list[tuple[list[int], str]] = []
    produced: dict[tuple[int, int], dict[int, list[int]]] = {}
    for i, g in enumerate(a.groups):
        for leaf, axis, index in g.slots():
            if index is not None:
                touched.add(i)
                produced.setdefault((leaf, axis), {}).setdefault(index, []).append(i)
    for (leaf, _), per in produced.items():
        members = [i for ids in per.values() for i in ids]
        union(members)
        layers = a.leaf_shapes[leaf][0]
        if len(per) != layers:
            bad.append((members, f"only slices {sorted(per)} of the stacked leaf {paths[leaf]} "
                        f"({layers} layers) produce neurons (its slices keep one width)"))
    merged: dict[tuple[int, int], tuple] = {}
    sliced: dict[tuple[int, int], dict[int, tuple]] = {}
    for (leaf, axis, index), blocks in a.layouts.items():
        if index is None:
            merged[(leaf, axis)] = blocks
        else:
            sliced.setdefault((leaf, axis), {})[index] = blocks
    for (leaf, axis), per in sliced.items():
        members = [g for blocks in per.values() for g, _ in blocks if g >= 0]
        touched.update(members)
        layers = a.leaf_shapes[leaf][0]
        first = per[min(per)]
        shapes = {tuple((g < 0, size) for g, size in blocks) for blocks in per.values()}
        if len(per) != layers or len(shapes) != 1 or (leaf, axis) in merged:
            bad.append((members, f"the slices of the stacked leaf {paths[leaf]} read values of "
                        "different neuron blocks (its layers stay stacked: one layout); fix: "
                        "read every slice alike (each layer of the scan, each member of the "
                        "ensemble), or keep the layers as leaves of their own"))
        else:
            for b in range(len(first)):
                union([blocks[b][0] for blocks in per.values() if blocks[b][0] >= 0])
        merged.setdefault((leaf, axis), first)
    for vals in links:
        hidden = [v for v in vals if v.kind == "hidden"]
        members = [g for v in hidden for g in v.groups]
        touched.update(members)
        shapes = {(v.axis, tuple((g < 0, size) for g, size in v.blocks)) for v in hidden}
        if hidden and (len(hidden) != len(vals) or len(shapes) != 1):
            bad.append((members, "the carry of a scan is not one structure of neuron blocks "
                        "in every iteration (it keeps its shape: one width); fix: give the "
                        "carry the same layer's neurons in every iteration (the first "
                        "layer before the scan)"))
        elif hidden:
            for b in range(len(hidden[0].blocks)):
                union([v.blocks[b][0] for v in hidden if v.blocks[b][0] >= 0])
    for members, why in bad:
        for i in members:
            a.groups[i].pin(why, "params")
    families: dict[int, list[int]] = {}
    for i in range(n):
        families.setdefault(find(i), []).append(i)
    for members in families.values():
        if not touched.intersection(members):
            continue
        indices = tuple(a.groups[i].index for i in members)
        pinned = [a.groups[i] for i in members if a.groups[i].pins]
        for i in members:
            g = a.groups[i]
            g.stacked = indices
            if pinned and not g.pins:
                g.pin(f"keeps the width of group {pinned[0].index} (the layers of a scan stay "
                      "stacked: one width), which is pinned (its fix frees this one)",
                      pinned[0].pins[0][1])
    return merged


def chain_of(groups: Sequence[Group], outputs: Sequence[Val]) -> tuple[list[Group], list[str]]:
    """The hidden groups of a chain ``x -> g_1 -> ... -> g_L -> output`` (dense layers, one
    activation: what the closed-form Taylor pass and the paper's certificate handle), or why the
    network is not one (it is then compressed through its own program)."""
    why = []
    if not groups:
        return [], ["no dot_general with a parameter kernel"]
    last = groups[-1]
    if len(outputs) != 1 or outputs[0].kind != "hidden" or not outputs[0].pre or (
            outputs[0].single() != last.index - 1):
        why.append("the output is not the last kernel's x K + b (one array)")
    if groups[0].source != "input":
        why.append("group 1 does not read the input x itself")
    for g, nxt in zip(groups[:-1], groups[1:], strict=True):
        why += _link(g, nxt)
    if any(g.stack is not None for g in groups):
        why.append("layers under scan (slices of stacked leaves, kept stacked)")
    for g in groups:
        if g.tied and g.index == g.tied[0]:
            why.append(f"groups {', '.join(map(str, g.tied))} are tied by products or sums "
                       "(gates, a residual stream)")
    hidden = list(groups[:-1])
    exprs = {g.expression() for g in hidden if not g.pins}
    if len(exprs) > 1:
        why.append("the hidden layers' activations differ (" + "; ".join(sorted(exprs)) + ")")
    return hidden, why


def _link(g: Group, nxt: Group) -> list[str]:
    """Why hidden group ``g`` followed by ``nxt`` is not a link of a chain (``[]``: it is)."""
    why = []
    if nxt.source != g.index:
        why.append(f"group {nxt.index} does not read group {g.index}'s activation")
    for reason, line in g.pins:
        why.append(f"group {g.index} is pinned: {reason} ({line})")
    if g.pins:
        return why
    if [(c.leaf, c.axis) for c in g.consumers] != [(nxt.kernel, 1 - nxt.kernel_axis)]:
        why.append(f"group {g.index} is not consumed by group {nxt.index}'s kernel alone")
    if g.consumed_node is None and g.program:
        why.append(f"group {g.index} is read through a concatenation (not one value of its "
                   "activation)")
    elif not g.consumed_node:
        why.append(f"group {g.index} has no activation")
    if g.scales or any(k == "p" for _, _, ops in g.program for k, _ in ops):
        why.append(f"group {g.index}'s activation has a parameter")
    return why
