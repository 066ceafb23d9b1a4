"""The traced front end: ``jc.trace(fn, params, x)`` reads a JAX program and finds its neurons.

:func:`trace` runs :func:`jax.make_jaxpr` on ``fn(params, x)`` (every parameter leaf an input),
inlines the sub-programs of ``jit`` / ``closed_call`` / ``custom_jvp_call`` / ``custom_vjp_call``
/ ``checkpoint`` and interprets the flat equation list with one rule per primitive (the
``jax/experimental/jet.py`` registry pattern, :data:`RULES`). A **neuron group** is the last axis
of the value

.. math::
   u = x K + b \\qquad (\\text{or } x K^T + b \\text{ for an } (out, in) \\text{ kernel}),
   \\qquad h = \\sigma(u),

where ``K`` and ``b`` are parameter leaves, and ``sigma`` is the elementwise program applied to
``u`` (``tanh``, the ``integer_pow`` / ``mul`` / ``tanh`` of ``jax.nn.gelu``, ``sin(30 u)``, ...:
a univariate function, since each primitive acts on the same position of ``u``). ``h`` feeds the
next ``dot_general`` with a parameter kernel, the group's **consumer**. A group is **pinned**
(left whole, with the reason and the source line of the op) when it reaches the output, feeds a
``concatenate``, a residual ``add`` with another group, a reduction, a slice, a per-neuron
parameter inside its activation, or a primitive without a rule: an unknown primitive pins what
it touches and is named, never guessed.

**Tied sets** (issue 23). A product of two groups of equal widths on one axis (a gate
``h * U``: jaxpi's modified MLP and PirateNet) ties them: neuron ``i`` of the product is a
function of neuron ``i`` of each, so they are kept and dropped together (union-find over the
groups, :attr:`Group.tied`); a pin of one group pins its set. A sum of two groups of different
sets stays pinned (a residual stream or skip). A kernel ``g * v`` (a 1-D ``g`` along the output
axis: weight factorisation) is read through ``v`` (``C (g * v) = g * (C v)``) with ``g`` sliced
with the neurons; any other kernel computed from parameters (``v / ||v||``, ``W + low-rank``)
pins the group it reads (no leaf is linear in its rows). ``t . b`` of a hidden value ``t`` and
``b = h K + c`` of one group contracted along their neurons (DeepONet's
``trunk(y) . branch(u)``) makes ``K``'s output axis and ``c`` the linear consumers of ``t``.
A group that does not depend on ``x`` (the branch on fixed input functions) is pinned.

Phase 1 compresses **chains**: groups ``1..L`` where group 1 reads the input ``x`` itself, group
``l + 1`` reads group ``l``'s activation and the last group is the (linear) output layer. Such a
network lowers to the params convention ``[{"kernel": (in, out), "bias": (out,)}, ...]`` with one
activation (a registered one when the traced program matches it numerically on a grid, else one
registered from the program, whose Taylor series :mod:`jax.experimental.jet` computes), goes
through :func:`jaxcompress.compress` (the one driver) and the compressed layers are written back
into the user's pytree: kept kernel columns (rows for ``(out, in)`` kernels) and bias entries,
the next kernel replaced.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import get_activation, register_activation, registered_activations
from jaxcompress.compression import CompressedNetwork, CompressInfo, FrontEnd, compress
from jaxcompress.domains import Ball, check_domain
from jaxcompress.evaluate import error_points
from jaxcompress.features import DerivativeFeatures
from jaxcompress.graph_compress import GraphPlan, GroupPlan, compress_graph, run_method
from jaxcompress.methods import BestOf, Method
from jaxcompress.mlp import apply, leaf_count
from jaxcompress.program import Const, Eqn, flatten, trace_program

__all__ = ["RULES", "Compressed", "Group", "Network", "trace"]

# ------------------------------------------------------------------------------------------------
# Abstract values and neuron groups
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Val:
    """What the analysis knows of one value.

    kind: ``"const"`` (``value``), ``"param"`` (leaf ``leaf``: ``flip`` for a transposed 2-D
    leaf; ``laxis``, for a 1-D leaf, the axis of the broadcast value that runs along the leaf),
    ``"input"`` (``x`` itself), ``"hidden"`` (a value whose axis ``axis`` is made of neuron
    blocks) or ``"other"`` (anything else: a fixed function of ``x``, or of pinned groups).

    A hidden value's ``blocks`` are ``((group, size), ...)`` along ``axis`` in order: group
    ``g``'s neurons (0-based), or ``-1`` for a block that is no group's (the input concatenated
    beside a layer). ``pre`` marks ``x K`` or ``x K + b`` itself; ``node`` is the node of the
    group's activation program the value is (single-block values only; ``None`` otherwise).
    ``scale`` marks a kernel computed as ``v * g`` (weight factorisation): ``(g's leaf, the axis
    of v it runs along)``, ``leaf`` being ``v``.
    """

    kind: str
    value: np.ndarray | None = None
    leaf: int = -1
    flip: bool = False
    laxis: int | None = None
    axis: int = -1
    blocks: tuple[tuple[int, int], ...] = ()
    pre: bool = False
    node: int | None = None
    scale: tuple[int, int] | None = None

    @property
    def groups(self) -> list[int]:
        return [g for g, _ in self.blocks if g >= 0]

    def single(self) -> int | None:
        """The group when the value is exactly one group's neurons, else ``None``."""
        return self.blocks[0][0] if len(self.blocks) == 1 and self.blocks[0][0] >= 0 else None


_OTHER = _Val("other")


@dataclasses.dataclass(frozen=True)
class Consumer:
    """A linear consumer of a group: rows of a kernel leaf.

    Attributes:
      leaf: the kernel's leaf index.
      axis: the leaf's axis that runs over the group's neurons (0 for an ``(in, out)`` kernel).
      block: the group's block among the leaf's row blocks (:attr:`Network.layouts`).
      value: the id of the consumed value in the flat program (the ``dot_general`` operand).
      value_axis: that value's neuron axis.
      offset: where the group's block starts along it (original widths).
      line: the source line of the ``dot_general``.
    """

    leaf: int
    axis: int
    block: int
    value: int
    value_axis: int
    offset: int
    line: str


@dataclasses.dataclass(eq=False)
class Group:
    """One neuron group: an axis of ``sigma(x K + b)`` (see the module docstring).

    Attributes:
      index: 1-based, in program order.
      width: the number of neurons.
      kernel: the producing kernel's leaf index; ``kernel_axis`` its axis along the neurons
        (``out_in``: the kernel is laid out ``(out, in)``).
      bias: the bias leaf's index, or ``None``.
      scales: leaves of per-neuron parameters inside the activation (a FiLM scale, a learnt
        frequency per neuron), sliced with the neurons.
      source: ``"input"`` (reads ``x``), the index of the group whose activation it reads, or
        ``"other"``.
      program: the activation as elementwise equations on node 0 (``u``): ``(primitive, params,
        operands)`` with operands ``("n", node)``, ``("c", value)`` or ``("p", leaf)``; node
        ``i + 1`` is equation ``i``'s result.
      calls: per program equation, the analytic call it came from (``"softplus#12"``) or
        ``""`` (:func:`_analytic_call`; the expression shows the call by its name).
      consumers: the :class:`Consumer` records: kernels that read the activation.
      consumed_node: the program node the first consumer reads (``None`` when that value is
        not one node of the program, e.g. a concatenation).
      pins: ``(reason, source line)`` of everything that keeps the group whole.
      kinks: ``(primitive, source line)`` of the non-analytic primitives of the activation.
      tied: the 1-based indices of every group of its **tied set** (itself included) when
        elementwise products tie it to other groups (a gate ``h * U``), else ``()``; a tied
        set is compressed jointly (:mod:`jaxcompress.graph_compress`).
      constant: whether it does not depend on ``x`` (pinned: nothing to match on the domain).
    """

    index: int
    width: int
    kernel: int
    kernel_axis: int
    bias: int | None = None
    scales: list = dataclasses.field(default_factory=list)
    source: Any = "other"
    program: list = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)
    consumers: list = dataclasses.field(default_factory=list)
    consumed_node: int | None = None
    pins: list = dataclasses.field(default_factory=list)
    kinks: list = dataclasses.field(default_factory=list)
    tied: tuple[int, ...] = ()
    constant: bool = False

    @property
    def out_in(self) -> bool:
        """Whether the producing kernel is laid out ``(out, in)`` (neurons along axis 0)."""
        return self.kernel_axis == 0

    @property
    def pinned(self) -> bool:
        return bool(self.pins)

    @property
    def compressible(self) -> bool:
        """Not pinned and read by at least one kernel (a group of a tied set read only
        through the set, such as a gate ``U``, is compressible with its set:
        :attr:`Network.compressible`)."""
        return not self.pins and bool(self.consumers)

    def pin(self, reason: str, line: str) -> None:
        if (reason, line) not in self.pins:
            self.pins.append((reason, line))

    def producers(self) -> list[tuple[int, int]]:
        """``(leaf, axis)`` of every leaf sliced with the neurons: kernel, bias, scales."""
        out = [(self.kernel, self.kernel_axis)]
        out += [] if self.bias is None else [(self.bias, 0)]
        return out + [(leaf, 0) for leaf in self.scales]

    def activation_fn(self) -> Callable[[jax.Array], jax.Array]:
        """The elementwise function ``u -> sigma(u)`` of the program (ending at the consumed
        node), built from the traced primitives (no per-neuron parameters)."""
        program, end = list(self.program), self.consumed_node or 0

        def sigma(u):
            nodes = [u]
            for prim, params, operands in program[:end]:
                args = [nodes[r] if kind == "n" else jnp.asarray(r, u.dtype)
                        for kind, r in operands]
                nodes.append(prim.bind(*args, **params))
            return nodes[end]

        return sigma

    def expression(self, *, digits: int | None = None, paths: Sequence[str] = ()) -> str:
        """The activation as text, e.g. ``sin(mul(30.0, u))`` (constants in full, or to
        ``digits`` significant digits; up to the consumed node, or the last one when nothing
        consumes it; a per-neuron parameter by its path)."""
        end = len(self.program) if self.consumed_node is None else self.consumed_node
        texts, first = ["u"], {}
        for i, (prim, params, operands) in enumerate(self.program[:end]):
            call = self.calls[i] if i < len(self.calls) else ""
            args = [texts[r] if kind == "n" else
                    (paths[r] if r < len(paths) else f"leaf{r}") if kind == "p" else
                    _const_text(r, digits) for kind, r in operands]
            if call:      # a recognised analytic call, shown by its name and its input
                start = first.setdefault(call, (i + 1, next(
                    (texts[r] for kind, r in operands if kind == "n" and r <= i), "u")))
                texts.append(f"{call.split('#')[0]}({start[1]})")
                continue
            shown = {k: v for k, v in params.items() if k in ("y", "new_dtype")}
            args += [f"{k}={v}" for k, v in shown.items()]
            texts.append(f"{prim.name}({', '.join(args)})")
        return texts[end]


def _const_text(value, digits: int | None = None) -> str:
    arr = np.asarray(value)
    if arr.size != 1:
        return f"const{arr.shape}"
    return repr(arr.item()) if digits is None else f"{arr.item():.{digits}g}"


# ------------------------------------------------------------------------------------------------
# The analysis: one rule per primitive
# ------------------------------------------------------------------------------------------------


class _Analysis:
    """The state of one interpretation of the flat program."""

    def __init__(self, leaf_shapes: Sequence[tuple[int, ...]]):
        self.leaf_shapes = list(leaf_shapes)
        self.vals: dict[int, _Val] = {}
        self.groups: list[Group] = []
        self.unknown: list[tuple[str, str]] = []
        self.uses: dict[int, int] = {}
        #: (consumer leaf, axis) -> the row blocks ((group or -1, size), ...) along that axis
        self.layouts: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
        #: union-find over groups (0-based): groups tied by elementwise products
        self.parent: list[int] = []

    def find(self, g: int) -> int:
        while self.parent[g] != g:
            self.parent[g] = self.parent[self.parent[g]]
            g = self.parent[g]
        return g

    def tie(self, g: int, h: int) -> None:
        rg, rh = self.find(g), self.find(h)
        if rg != rh:
            self.parent[max(rg, rh)] = min(rg, rh)

    def sets_of(self, blocks) -> tuple:
        """A block structure with every group replaced by its tied set."""
        return tuple((self.find(g) if g >= 0 else -1, size) for g, size in blocks)

    def val(self, operand) -> _Val:
        if isinstance(operand, Const):
            return _Val("const", value=operand.value)
        return self.vals[operand]

    def pin_all(self, vals: Sequence[_Val], reason: str, line: str) -> None:
        for v in vals:
            for g in v.groups:
                self.groups[g].pin(reason, line)


Rule = Callable[[_Analysis, Eqn, list], list]

#: The registry: primitive name -> rule ``(analysis, eqn, operand values) -> output values``.
RULES: dict[str, Rule] = {}

#: Elementwise primitives that are not analytic everywhere (kinks, jumps, comparisons).
NON_ANALYTIC = frozenset({"max", "min", "abs", "sign", "select_n", "ne", "eq", "lt", "le", "gt",
                          "ge", "floor", "ceil", "round", "clamp", "and", "or", "not", "is_finite",
                          "rem"})

#: Elementwise primitives that are entire functions (a composition of them is entire).
ENTIRE = frozenset({"sin", "cos", "exp", "exp2", "mul", "add", "sub", "neg", "integer_pow",
                    "erf", "erfc", "sinh", "cosh", "square", "convert_element_type", "copy",
                    "copy_p"})


def _const_eval(eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    res = eqn.primitive.bind(*[v.value for v in vals], **eqn.params)
    res = res if eqn.primitive.multiple_results else [res]
    return [_Val("const", value=np.asarray(r)) for r in res]


def _scalar(value) -> np.ndarray | None:
    """A constant that is one number (any shape, all entries equal), else ``None``."""
    arr = np.asarray(value)
    if arr.size == 0:
        return None
    first = arr.reshape(-1)[0]
    return np.asarray(first) if np.all(arr == first) else None


def _operand(a: _Analysis, eqn: Eqn, ref: _Val, v: _Val):
    """A non-hidden operand of an elementwise op on the hidden value ``ref``: its program
    operand, or the reason it pins ``ref``'s groups."""
    if v.kind == "const":
        s = _scalar(v.value)
        # (a per-neuron constant would have to be sliced inside the program)
        return ("c", s) if s is not None else ("a non-scalar constant (not one function of "
                                               "each neuron)")
    if v.kind == "param":
        shape = a.leaf_shapes[v.leaf]
        g = ref.single()
        if (len(shape) == 1 and (v.laxis or 0) == ref.axis and g is not None
                and shape[0] == a.groups[g].width):
            return ("p", v.leaf)
        if int(np.prod(shape)) == 1:
            return ("s", v.leaf)                     # one shared scalar parameter
        return "a parameter that is not one number per neuron"
    return ("the input" if v.kind == "input" else "a value the analysis does not follow "
            "(another branch of the program, e.g. a residual stream scaled by a parameter)")


def _elementwise(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    """Elementwise primitives: constants fold; on hidden values with one block structure the
    op is a function of each neuron (extending a single group's activation program); a
    parameter added to ``x K`` is its bias, any other per-neuron parameter a scale."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    hidden = [v for v in vals if v.kind == "hidden"]
    if not hidden:
        return [_factorised(a, eqn, vals)] + [_OTHER] * (len(eqn.outs) - 1)
    ref = hidden[0]
    if any(h.axis != ref.axis or h.blocks != ref.blocks for h in hidden[1:]):
        _tie(a, eqn, ref, hidden)
    if any(h.axis != ref.axis or a.sets_of(h.blocks) != a.sets_of(ref.blocks)
           for h in hidden[1:]):
        groups = sorted({g for h in hidden for g in h.groups})
        for g in groups:
            others = ", ".join(str(h + 1) for h in groups if h != g) or "itself, elsewhere"
            a.groups[g].pin(f"`{eqn.name}` with group {others} (residual / skip)", eqn.line)
        return [_OTHER] * len(eqn.outs)
    operands = []
    for v in vals:
        if v.kind == "hidden":
            operands.append(("n", v.node))
            continue
        op = _operand(a, eqn, ref, v)
        if isinstance(op, str):
            a.pin_all([ref], f"`{eqn.name}` of its activation with {op}", eqn.line)
            return [_OTHER] * len(eqn.outs)
        operands.append(op)
    g = ref.single()
    tied = any(h.blocks != ref.blocks for h in hidden[1:])
    params = [r for kind, r in operands if kind == "p"]
    if (g is not None and eqn.name == "add" and ref.pre and len(params) == 1 and len(hidden) == 1
            and a.groups[g].bias is None and not a.groups[g].program):
        a.groups[g].bias = params[0]
        return [dataclasses.replace(ref, pre=True)]
    for leaf in params:
        a.groups[g].scales.append(leaf)
    if eqn.name in NON_ANALYTIC and not eqn.benign:
        for h in ref.groups:
            a.groups[h].kinks.append((eqn.name, eqn.line))
    node = None
    if g is not None and not tied and all(v.node is not None for v in hidden):
        prog = a.groups[g].program
        # a parameter operand ("p": per neuron, or one shared number) is shown by its path;
        # a program with one is not lowered to a registered activation
        prog.append((eqn.primitive, eqn.params, [("p", r) if kind == "s" else (kind, r)
                                                 for kind, r in operands]))
        a.groups[g].calls.append(eqn.call)
        node = len(prog)
    return [dataclasses.replace(ref, pre=False, node=node)] * len(eqn.outs)


def _factorised(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> _Val:
    """``g * v`` of a 2-D leaf ``v`` and a 1-D leaf ``g`` broadcast along one of ``v``'s axes
    (jaxpi's random weight factorisation): a kernel whose rows along the other axis are
    linear in ``v`` (``C (g * v) = g * (C v)``); anything else computed from parameters is
    ``"other"`` (a ``dot_general`` with it pins its data, naming why)."""
    if eqn.name != "mul" or len(vals) != 2 or any(v.kind != "param" for v in vals):
        return _OTHER
    dims = [len(a.leaf_shapes[v.leaf]) for v in vals]
    if sorted(dims) != [1, 2]:
        return _OTHER
    v, g = (vals[0], vals[1]) if dims[0] == 2 else (vals[1], vals[0])
    if v.scale is not None or v.laxis is not None or g.laxis is None or len(eqn.out_shapes[0]) != 2:
        return _OTHER
    axis = (1 - g.laxis) if v.flip else g.laxis
    return dataclasses.replace(v, scale=(g.leaf, axis))


#: Elementwise primitives that tie the neurons of two groups into one set (a gate ``h * U``).
TYING = frozenset({"mul"})


def _tie(a: _Analysis, eqn: Eqn, ref: _Val, hidden: Sequence[_Val]) -> None:
    """``h * U`` of two groups of equal widths on one axis (a gate): neuron ``i`` of the
    product is a function of neuron ``i`` of each, so the groups are tied into one set, kept
    and dropped together. Only products tie: a sum of two groups is a residual stream or a
    skip, whose set would span every layer it runs through (pinned instead, see
    :func:`_elementwise`)."""
    if eqn.name not in TYING:
        return
    sizes = [s for _, s in ref.blocks]
    for h in hidden[1:]:
        if h.axis != ref.axis or [s for _, s in h.blocks] != sizes or any(
                (g < 0) != (r < 0) for (g, _), (r, _) in zip(h.blocks, ref.blocks, strict=True)):
            return
    for h in hidden[1:]:
        for (g, _), (r, _) in zip(h.blocks, ref.blocks, strict=True):
            if g >= 0:
                a.tie(g, r)


def _unit_free(shape) -> list[int]:
    return [i for i, s in enumerate(shape) if s != 1]


def _view(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    """``reshape`` / ``broadcast_in_dim`` / ``transpose`` / ``squeeze`` / ``expand_dims``:
    parameter views (a 1-D leaf broadcast along an axis, a transposed kernel) are followed; a
    hidden value is followed through a transpose and through views that only add or remove
    unit axes, and pinned by any other."""
    v = vals[0]
    if all(w.kind == "const" for w in vals):
        return _const_eval(eqn, vals)
    old, new = eqn.in_shapes[0], eqn.out_shapes[0]
    if v.kind == "param":
        return [_param_view(a, eqn, v, old, new) if v.scale is None else _OTHER]
    if v.kind != "hidden":
        return [v] if v.kind == "input" and tuple(old) == tuple(new) else [_OTHER]
    if eqn.name == "transpose":
        return [dataclasses.replace(v, axis=list(eqn.params["permutation"]).index(v.axis))]
    free_old, free_new = _unit_free(old), _unit_free(new)
    if [old[i] for i in free_old] == [new[i] for i in free_new] and v.axis in free_old:
        return [dataclasses.replace(v, axis=free_new[free_old.index(v.axis)])]
    a.pin_all(vals, f"reshaped by `{eqn.name}`", eqn.line)
    return [_OTHER]


def _param_view(a: _Analysis, eqn: Eqn, v: _Val, old, new) -> _Val:
    """A view of a parameter leaf: a transposed 2-D kernel, or a 1-D leaf whose entries run
    along one axis (``laxis``) of the viewed value."""
    shape = a.leaf_shapes[v.leaf]
    if len(shape) == 2 and eqn.name == "transpose" and v.laxis is None:
        return dataclasses.replace(v, flip=not v.flip) if tuple(
            eqn.params["permutation"]) == (1, 0) else _OTHER
    if len(shape) != 1:
        return _OTHER
    cur = 0 if v.laxis is None else v.laxis
    if eqn.name == "transpose":
        return dataclasses.replace(v, laxis=list(eqn.params["permutation"]).index(cur))
    if eqn.name == "broadcast_in_dim":
        dims = tuple(eqn.params["broadcast_dimensions"])
        ok = old[cur] == shape[0] and new[dims[cur]] == shape[0]
        return dataclasses.replace(v, laxis=dims[cur]) if ok else _OTHER
    free_old, free_new = _unit_free(old), _unit_free(new)
    if [old[i] for i in free_old] == [new[i] for i in free_new] and cur in free_old:
        return dataclasses.replace(v, laxis=free_new[free_old.index(cur)])
    if shape[0] == 1 and int(np.prod(new)) == 1:   # one entry: it runs along the last axis
        return dataclasses.replace(v, laxis=len(new) - 1)
    return _OTHER


def _same(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    """``convert_element_type`` / ``copy``: parameters and the input pass through, hidden
    values get the op in their activation program."""
    v = vals[0]
    if v.kind in ("param", "input"):
        return [v]
    return _elementwise(a, eqn, vals)


def _kernel_side(a: _Analysis, vals: list[_Val]) -> int | None:
    """Which operand of a ``dot_general`` is a 2-D parameter kernel (0 or 1), if exactly one."""
    sides = [i for i, v in enumerate(vals)
             if v.kind == "param" and len(a.leaf_shapes[v.leaf]) == 2]
    return sides[0] if len(sides) == 1 else None


def _consume(a: _Analysis, eqn: Eqn, data: _Val, operand: int, leaf: int, leaf_axis: int,
             axis: int) -> None:
    """Record the kernel ``leaf``'s rows as the linear consumer of ``data``'s groups."""
    if data.pre and data.single() is not None and not a.groups[data.single()].program:
        a.groups[data.single()].pin("no elementwise activation before the next kernel",
                                    eqn.line)
    a.layouts[(leaf, leaf_axis)] = data.blocks
    offset = 0
    for b, (g, size) in enumerate(data.blocks):
        if g >= 0:
            grp = a.groups[g]
            if not grp.consumers:
                grp.consumed_node = data.node
            grp.consumers.append(Consumer(leaf, leaf_axis, b, operand, axis, offset, eqn.line))
        offset += size


def _dot_general(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    """``h K`` (or ``K h`` under ``vmap``): a new group whose kernel is the 2-D parameter ``K``;
    the data operand's groups, when it contracts their neuron axis, are consumed by ``K``'s
    rows (one block of rows per group after a ``concatenate``)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    side = _kernel_side(a, vals)
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    if side is None and not (lb or rb) and len(lc) == 1 and all(v.kind == "hidden"
                                                             for v in vals):
        return _latent(a, eqn, vals)
    if side is None or lb or rb or len(lc) != 1:
        what = ("a batch dimension" if lb or rb else
                "a constant matrix" if any(v.kind == "const" for v in vals) else
                "a kernel computed from parameters that is not leaf * per-output scale (e.g. "
                "v / ||v||, W + low-rank: no leaf is linear in its rows)"
                if any(v.kind == "other" for v in vals) else
                "operands other than (value, parameter kernel)")
        a.pin_all(vals, f"`dot_general` with {what}", eqn.line)
        return [_OTHER]
    kern, data = vals[side], vals[1 - side]
    kc, dc = (lc[0], rc[0]) if side == 0 else (rc[0], lc[0])
    leaf_axis = (1 - kc) if kern.flip else kc
    free = 1 - leaf_axis
    data_ndim = len(eqn.in_shapes[1 - side])
    if data.kind == "hidden":
        if data.axis != dc:
            a.pin_all([data], "`dot_general` contracts an axis other than its neurons", eqn.line)
        elif kern.scale is not None and kern.scale[1] == leaf_axis:
            a.pin_all([data], "its kernel is v * (a scale per row): no leaf is linear in its "
                      "rows", eqn.line)
        else:
            _consume(a, eqn, data, eqn.ins[1 - side], kern.leaf, leaf_axis, dc)
    source = ("input" if data.kind == "input" else
              data.single() + 1 if data.kind == "hidden" and data.single() is not None
              else "other")
    width = int(a.leaf_shapes[kern.leaf][free])
    a.groups.append(Group(index=len(a.groups) + 1, width=width, kernel=kern.leaf,
                          kernel_axis=free, source=source))
    a.parent.append(len(a.groups) - 1)
    if data.kind == "const" or (data.kind == "hidden" and data.groups and all(
            a.groups[g].constant for g in data.groups)):
        # its features would be taken on the domain of x, on which it does not depend
        a.groups[-1].constant = True
        a.groups[-1].pin("does not depend on the input x (a function of constants and "
                         "parameters only, e.g. a DeepONet's branch on fixed input functions)",
                         eqn.line)
    if kern.scale is not None and kern.scale[1] == free:
        a.groups[-1].scales.append(kern.scale[0])     # g: one per neuron, sliced with them
    elif kern.scale is not None:
        a.groups[-1].pin("its kernel is v * (a scale per input): kept whole", eqn.line)
    axis = 0 if side == 0 else data_ndim - 1
    return [_Val("hidden", axis=axis, blocks=((len(a.groups) - 1, width),), pre=True, node=0)]


def _latent(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    """``t . b`` of two hidden values contracted along their neurons (DeepONet's
    ``trunk(x) . branch(u)``): when one operand ``b`` is ``h K + c`` of one group (no
    activation), ``t``'s neurons are read linearly through ``b``'s producers, ``K`` along its
    output axis and ``c``: ``t^T b = t^T (K^T h + c)``, and ``t = t[S] C`` gives
    ``K <- K C^T``, ``c <- C c`` (both rows of the latent axis re-weighted). ``b``'s group is
    then those rows, not a group of its own (pinned, named)."""
    (lc, rc), _ = eqn.params["dimension_numbers"]
    dims = (lc[0], rc[0])
    for side in (1, 0):
        t, b = vals[1 - side], vals[side]
        gb = b.single()
        # (a per-neuron scale g of b's group, as in g * v, is not linear in the latent rows)
        if (gb is None or not b.pre or a.groups[gb].program or a.groups[gb].scales
                or t.axis != dims[1 - side]
                or b.axis != dims[side] or a.sets_of(t.blocks) == a.sets_of(b.blocks)):
            continue
        grp = a.groups[gb]
        if sum(s for _, s in t.blocks) != grp.width:
            continue
        _consume(a, eqn, t, eqn.ins[1 - side], grp.kernel, grp.kernel_axis, t.axis)
        if grp.bias is not None:
            _consume(a, eqn, t, eqn.ins[1 - side], grp.bias, 0, t.axis)
        grp.pin(f"its neurons are the latent rows read by group(s) "
                f"{', '.join(str(g + 1) for g in t.groups)} (re-weighted there)", eqn.line)
        return [_OTHER]
    a.pin_all(vals, "`dot_general` of two hidden values (neither is x K + b of one group)",
              eqn.line)
    return [_OTHER]


def _concatenate(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
    """Hidden values joined along their neuron axis: the blocks in order (a non-hidden operand,
    e.g. the input of a skip connection, is a block of no group)."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    dim = eqn.params["dimension"]
    if not any(v.kind == "hidden" for v in vals):
        return [_OTHER]
    if any(v.kind == "hidden" and v.axis != dim for v in vals):
        a.pin_all(vals, "concatenated along an axis other than its neurons", eqn.line)
        return [_OTHER]
    blocks: list[tuple[int, int]] = []
    for v, shape in zip(vals, eqn.in_shapes, strict=True):
        blocks += list(v.blocks) if v.kind == "hidden" else [(-1, int(shape[dim]))]
    return [_Val("hidden", axis=dim, blocks=tuple(blocks))]


def _pinning(reason: str) -> Rule:
    def rule(a: _Analysis, eqn: Eqn, vals: list[_Val]) -> list[_Val]:
        a.pin_all(vals, reason.format(name=eqn.name), eqn.line)
        return [_OTHER] * len(eqn.outs)
    return rule


def _defelementwise(*names: str) -> None:
    for n in names:
        RULES[n] = _elementwise


_defelementwise("tanh", "logistic", "sin", "cos", "tan", "exp", "exp2", "log", "log1p", "expm1",
                "erf", "erfc", "erf_inv", "sqrt", "rsqrt", "cbrt", "neg", "integer_pow", "square",
                "sinh", "cosh", "asinh", "atan", "atanh", "asin", "acos", "acosh", "add", "sub",
                "mul", "div", "pow", "atan2", "logaddexp", *sorted(NON_ANALYTIC))
for _n in ("reshape", "broadcast_in_dim", "transpose", "squeeze", "expand_dims"):
    RULES[_n] = _view
RULES["convert_element_type"] = _same
RULES["copy"] = _same
RULES["copy_p"] = _same
RULES["dot_general"] = _dot_general
RULES["concatenate"] = _concatenate
for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
           "cumsum", "reduce_and", "reduce_or"):
    RULES[_n] = _pinning("feeds a reduction `{name}`")
for _n in ("slice", "dynamic_slice", "gather", "dynamic_update_slice", "scatter", "scatter-add",
           "split", "pad", "rev"):
    RULES[_n] = _pinning("is sliced or indexed by `{name}`")


def _interpret(flat: list[Eqn], a: _Analysis) -> None:
    """Run every equation's rule; an unknown primitive pins what it touches and is recorded."""
    for eqn in flat:
        for o in eqn.ins:
            if isinstance(o, int) and o < len(a.leaf_shapes):
                a.uses[o] = a.uses.get(o, 0) + 1
        vals = [a.val(o) for o in eqn.ins]
        rule = RULES.get(eqn.name)
        if rule is None:
            a.unknown.append((eqn.name, eqn.line))
            if all(v.kind == "const" for v in vals) and vals:
                outs = _const_eval(eqn, vals)
            else:
                a.pin_all(vals, f"feeds `{eqn.name}`, a primitive without a rule", eqn.line)
                outs = [_OTHER] * len(eqn.outs)
        else:
            outs = rule(a, eqn, vals)
        for o, v in zip(eqn.outs, outs, strict=True):
            a.vals[o] = v


def _pin_shared(a: _Analysis, paths: Sequence[str]) -> None:
    """A group none of whose leaves the program reads elsewhere: writing a smaller one back
    would change that other use."""
    for g in a.groups:
        leaves = [leaf for leaf, _ in g.producers()] + [c.leaf for c in g.consumers]
        for leaf in dict.fromkeys(leaves):
            if a.uses.get(leaf, 0) > 1:
                g.pin(f"the leaf {paths[leaf]} is read {a.uses[leaf]} times (shared weights)",
                      "params")


def _close_sets(a: _Analysis) -> None:
    """Record every tied set on its groups; a pin of one group pins its whole set (the set
    shares one index set of neurons)."""
    sets: dict[int, list[Group]] = {}
    for i, g in enumerate(a.groups):
        sets.setdefault(a.find(i), []).append(g)
    for members in sets.values():
        if len(members) < 2:
            continue
        indices = tuple(g.index for g in members)
        for g in members:
            g.tied = indices
        pinned = [g for g in members if g.pins]
        for g in members:
            for p in pinned:
                if p is not g:
                    g.pin(f"tied to group {p.index}, which is pinned", p.pins[0][1])


# ------------------------------------------------------------------------------------------------
# The activation of a chain: a registered one, or one registered from the traced program
# ------------------------------------------------------------------------------------------------

#: Where the traced activation is compared with the registered ones.
MATCH_GRID = np.concatenate([np.linspace(-6.0, 6.0, 241), [-20.0, -11.0, 11.0, 20.0]])


def _primitive_names(fn: Callable, u: jax.Array) -> list[str]:
    flat: list[Eqn] = []
    closed = jax.make_jaxpr(fn)(u)
    flatten(closed.jaxpr, closed.consts, [0], flat, [0])
    return sorted(e.name for e in flat if e.name not in ("copy", "copy_p"))


def match_activation(group: Group, dtype) -> tuple[str | None, str]:
    """The registered activation equal to ``group``'s traced program, and how it was matched.

    Equal means: within ``64 eps (1 + |sigma|)`` at every point of :data:`MATCH_GRID` (so
    ``jax.nn.gelu``'s tanh form is not taken for the exact GELU: they differ by 5e-4);
    "structurally" is added when the registered function traces to the same primitives.
    Returns ``(None, "")`` when none matches.
    """
    prims = sorted(p.name for p, _, _ in group.program[: group.consumed_node or 0]
                   if p.name not in ("copy", "copy_p"))
    return _match_fn(group.activation_fn(), prims, dtype)


def _match_fn(sigma: Callable, prims: Sequence[str] | None, dtype) -> tuple[str | None, str]:
    u = jnp.asarray(MATCH_GRID, dtype)
    mine = np.asarray(sigma(u), np.float64)
    if mine.shape != u.shape or not np.all(np.isfinite(mine)):
        return None, ""
    tol = 64 * float(jnp.finfo(dtype).eps)
    for name in registered_activations():
        act = get_activation(name)
        ref = np.asarray(act.fn(u), np.float64)
        if ref.shape == mine.shape and np.all(np.abs(mine - ref) <= tol * (1 + np.abs(ref))):
            same = prims is not None and _primitive_names(act.fn, u) == list(prims)
            return name, "numerically and structurally" if same else "numerically"
    return None, ""


def _analytic_call(jaxpr, consts, operands) -> str | None:
    """The registered analytic activation a ``custom_jvp_call`` of one traced operand (the
    others constants) computes, or ``None`` (``jax.nn.softplus``: ``logaddexp(u, 0)``, written with
    ``max`` / ``abs`` / ``select_n`` whose kinks cancel), compared on :data:`MATCH_GRID`."""
    traced = [i for i, o in enumerate(operands) if not isinstance(o, Const)]
    if len(traced) != 1 or len(jaxpr.outvars) != 1 or any(
            np.size(o.value) != 1 for o in operands if isinstance(o, Const)):
        return None
    aval = jaxpr.invars[traced[0]].aval
    if jaxpr.outvars[0].aval.shape != aval.shape:
        return None
    size = max(int(np.prod(aval.shape)), 1)

    def sigma(t):   # elementwise: the grid in chunks of the operand's shape
        n = t.shape[0]
        chunks = jnp.pad(t, (0, -n % size)).reshape((-1,) + tuple(aval.shape))

        def one(ti):
            args = [ti if i == traced[0] else jnp.asarray(o.value).reshape(())
                    for i, o in enumerate(operands)]
            return jax.core.eval_jaxpr(jaxpr, consts, *args)[0]
        return jax.vmap(one)(chunks).reshape(-1)[:n]

    try:
        name, _ = _match_fn(sigma, None, aval.dtype)
    except Exception:  # noqa: BLE001 - an exotic call is simply not recognised
        return None
    # a "traced:" registration (e.g. of relu's max(u, 0), by an earlier compression) proves
    # nothing about analyticity; only the library's activations do
    return None if name is None or name.startswith("traced:") else name


def _kink_name(expr: str) -> str:
    return " (relu)" if expr in ("max(u, 0.0)", "max(0.0, u)") else ""


def _refusing_series(expr: str, kinks: Sequence[tuple[str, str]]):
    def series(u0, k):
        prim, line = kinks[0]
        raise ValueError(f"the traced activation {expr} uses `{prim}` (at {line}), which is not "
                         "analytic: it has no Taylor series; use jc.collocation(k) or "
                         "jc.data_matching(x, order=k)")
    return series


def _check_widths(sets, methods: Sequence[Method], where: str) -> None:
    """A method's ``widths=`` gives one width per compressible set (a tied set counts once),
    each in ``1 .. the set's width``; else a ``ValueError`` naming the sets."""
    names = ["group " + str(members[0].index) if len(members) == 1 else
             "groups " + ", ".join(str(g.index) for g in members) for members in sets]
    for m in methods:
        if m.widths is None:
            continue
        if len(m.widths) != len(sets):
            raise ValueError(f"{where}: widths={tuple(m.widths)} gives {len(m.widths)} widths; "
                             f"this traced network has {len(sets)} compressible sets (a tied "
                             f"set counts once): {'; '.join(names)}")
        for w, members, name in zip(m.widths, sets, names, strict=True):
            if not 1 <= w <= members[0].width:
                raise ValueError(f"{where}: widths={tuple(m.widths)}: {w} for {name} (width "
                                 f"{members[0].width}); expected 1 .. {members[0].width}")


def _refuse_kinks(groups: Sequence[Group], methods: Sequence[Method], where: str, dtype
                  ) -> None:
    """Derivative features need Taylor series: a group whose activation uses a non-analytic
    primitive (``max``, ``abs``, ...) is refused for them, naming the primitive and its line."""
    for m in methods:
        if not isinstance(m.features, DerivativeFeatures):
            continue
        for g in groups:
            # a "traced:" registration of a kinked program (an earlier compression of the
            # same activation) is not analytic: only a library activation excuses the kinks
            name = None if g.consumed_node is None else match_activation(g, dtype)[0]
            if g.kinks and (name is None or name.startswith("traced:")):
                prim, line = g.kinks[0]
                expr = g.expression()
                raise ValueError(
                    f"{where}: hidden layer {g.index}'s activation {expr}{_kink_name(expr)} "
                    f"uses `{prim}` at {line}, which is not analytic; {m.describe()} needs its "
                    "Taylor series. Use jc.collocation(k) or jc.data_matching(x, order=k) "
                    "(values only), or an analytic activation (jax.nn.softplus, jax.nn.gelu)")


def activation_for(group: Group, dtype, methods: Sequence[Method], where: str) -> str:
    """A registered activation name for ``group``'s program (matched, or registered as
    ``"traced:<expression>"``), checked against what ``methods`` need.

    A program with a non-analytic primitive (``max``, ``abs``, ...) that matches no registered
    (analytic) activation is refused for derivative features, naming the primitive and its
    line; point features (collocation, data) need only its values.
    """
    name, _ = match_activation(group, dtype)
    if name is not None:
        return name
    expr = group.expression()
    name = f"traced:{expr}"
    _refuse_kinks([group], methods, where, dtype)
    if name in registered_activations():
        return name
    if group.kinks:
        register_activation(name, group.activation_fn(),
                            series=_refusing_series(expr, group.kinks),
                            description=f"traced, not analytic: {expr}")
        return name
    prims = {p.name for p, _, _ in group.program[: group.consumed_node or 0]}
    entire = prims <= ENTIRE
    try:
        register_activation(name, group.activation_fn(),
                            rho_sigma=math.inf if entire else float(jnp.finfo(dtype).tiny),
                            description=f"traced: {expr}" + (
                                "" if entire else " (strip width not derived; no bound rule)"))
    except ValueError as e:
        raise ValueError(f"{where}: hidden layer {group.index}'s activation {expr}: "
                         f"{e}") from None
    return name


# ------------------------------------------------------------------------------------------------
# The network and its table
# ------------------------------------------------------------------------------------------------


def _chain(groups: Sequence[Group], outputs: Sequence[_Val]) -> tuple[list[Group], list[str]]:
    """The hidden groups of a chain ``x -> g_1 -> ... -> g_L -> output`` that lowers to the
    params convention with one activation, or why the network is not one (it is then
    compressed group by group: :mod:`jaxcompress.graph_compress`)."""
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
        if nxt.source != g.index:
            why.append(f"group {nxt.index} does not read group {g.index}'s activation")
        for reason, line in g.pins:
            why.append(f"group {g.index} is pinned: {reason} ({line})")
        if g.pins:
            continue
        if [(c.leaf, c.axis) for c in g.consumers] != [(nxt.kernel, 1 - nxt.kernel_axis)]:
            why.append(f"group {g.index} is not consumed by group {nxt.index}'s kernel alone")
        if g.consumed_node is None and g.program:
            why.append(f"group {g.index} is read through a concatenation (not one value of its "
                       "activation)")
        elif not g.consumed_node:
            why.append(f"group {g.index} has no activation")
        if g.scales or any(k == "p" for _, _, ops in g.program for k, _ in ops):
            why.append(f"group {g.index}'s activation has a parameter")
    for g in groups:
        if g.tied and g.index == g.tied[0]:
            why.append(f"groups {', '.join(map(str, g.tied))} are tied by products (gates)")
    hidden = list(groups[:-1])
    exprs = {g.expression() for g in hidden if not g.pins}
    if len(exprs) > 1:
        why.append("the hidden layers' activations differ (" + "; ".join(sorted(exprs)) + ")")
    return hidden, why


@dataclasses.dataclass(frozen=True, eq=False)
class Compressed(CompressedNetwork):
    """The result of compressing a traced :class:`Network`.

    Attributes:
      params: the user's pytree, same structure, smaller leaves.
      fn: the user's function ``fn(params, x)``.
      lowered: the compressed chain in the params convention (what the driver returned), or
        ``None`` for a network compressed group by group.
      activation: the registered activation name the driver used (``"traced"`` for a network
        compressed group by group: the activations are the program's own).
      polymorphic: whether ``fn`` runs on the smaller ``params`` (checked on the domain's error
        points); else ``why`` says what ``fn`` raised, and ``small(x)`` runs the lowered chain.
      network: the traced :class:`Network` it was compressed from.
    """

    params: Any
    fn: Callable
    lowered: list | None
    activation: str
    polymorphic: bool
    why: str = ""
    lower: Callable | None = None
    network: Network | None = None

    def layer_sizes(self) -> list[int]:
        """``[d_in]`` and every neuron group's width after compression, in program order."""
        leaves = jax.tree_util.tree_leaves(self.params)
        return [int(self.network.x.shape[-1])] + [
            int(np.shape(leaves[g.kernel])[g.kernel_axis]) for g in self.network.groups]

    def num_params(self) -> int:
        return leaf_count(self.params)

    @property
    def module(self) -> Any:
        """The module of the new sizes: only for a network from :func:`jaxcompress.trace_module`
        (its :class:`~jaxcompress.CompressedModule`); a function from :func:`trace` has none."""
        raise AttributeError("module: this network was traced from a function (jc.trace), which "
                             "has no module to rebuild; use fn(small.params, x) or small(x), or "
                             "trace the module itself with jc.trace_module(model, x)")

    def __call__(self, x: jax.Array) -> jax.Array:
        """The compressed function: ``fn(params, x)`` when ``fn`` accepts the smaller leaves,
        else the lowered chain (the same function, checked at compression)."""
        return self.apply(self.params, x)

    def apply(self, params: Any, x: jax.Array) -> jax.Array:
        """The compressed function of its parameters (``params`` shaped like
        :attr:`params`): what :func:`jaxcompress.polish` trains."""
        if self.polymorphic:
            return self.fn(params, x)
        return apply(self.lower(params), x, activation=self.activation)

    def replace(self, params: Any) -> Compressed:
        """The same compressed network with other parameters (e.g. polished ones)."""
        return dataclasses.replace(self, params=params,
                                   lowered=None if self.lowered is None else self.lower(params))


def _tol(y: np.ndarray, dtype) -> float:
    return 256 * float(jnp.finfo(dtype).eps) * (1.0 + float(np.max(np.abs(y), initial=0.0)))


@dataclasses.dataclass(frozen=True, eq=False)
class Network(FrontEnd):
    """A traced program and its neuron groups (build with :func:`trace`; print it for a table).

    Attributes:
      fn, params: the user's function and parameter pytree.
      x: the example input's shape and dtype.
      paths: :func:`jax.tree_util.keystr` of every parameter leaf (flatten order).
      groups: the :class:`Group` records, in program order.
      unknown: ``(primitive, line)`` of every primitive without a rule.
      hidden: the hidden groups of the chain (empty when ``why_not``).
      why_not: why the network is not a chain that lowers to :func:`jaxcompress.compress`'s
        params convention (it is then compressed group by group).
      layouts: per consumer leaf, ``(leaf, axis, row blocks)`` (see
        :class:`~jaxcompress.graph_compress.GraphPlan`).
      signature: the program's primitives in order.
    """

    fn: Callable
    params: Any
    x: jax.ShapeDtypeStruct
    paths: tuple[str, ...]
    groups: tuple[Group, ...]
    unknown: tuple[tuple[str, str], ...]
    hidden: tuple[Group, ...]
    why_not: tuple[str, ...]
    layouts: tuple = ()
    signature: tuple[str, ...] = ()

    @property
    def chain(self) -> bool:
        """Whether the network lowers to the params convention (one activation)."""
        return not self.why_not

    def layer_sizes(self) -> list[int]:
        """``[d_in]`` and every neuron group's width, in program order."""
        return [int(self.x.shape[-1])] + [g.width for g in self.groups]

    def num_params(self) -> int:
        return leaf_count(self.params)

    @property
    def compressible(self) -> tuple[Group, ...]:
        """The groups :func:`jaxcompress.compress` compresses: the chain's hidden groups, or
        every group that is not pinned and is read by a kernel."""
        if self.chain:
            return self.hidden
        read = {i for g in self.groups if g.consumers for i in (g.tied or (g.index,))}
        return tuple(g for g in self.groups if not g.pins and g.index in read)

    def sets(self) -> tuple[tuple[Group, ...], ...]:
        """The compressible groups by tied set (a set of one for an untied group), in
        program order of each set's first group."""
        out: dict[tuple[int, ...], list[Group]] = {}
        for g in self.compressible:
            out.setdefault(g.tied or (g.index,), []).append(g)
        return tuple(tuple(v) for v in out.values())

    def _leaves(self) -> list:
        return jax.tree_util.tree_leaves(self.params)

    def lower(self, params: Any = None) -> list[dict[str, jax.Array]]:
        """The chain in the params convention ``[{"kernel": (in, out), "bias": (out,)}]`` (of
        ``params``, shaped like :attr:`params` up to widths; default :attr:`params`)."""
        if not self.chain:
            raise ValueError("lower: the traced network is not a chain:\n  "
                             + "\n  ".join(self.why_not))
        leaves = jax.tree_util.tree_leaves(self.params if params is None else params)
        out = []
        for g in self.groups:
            kernel = jnp.asarray(leaves[g.kernel])
            kernel = kernel.T if g.out_in else kernel
            bias = (jnp.zeros((kernel.shape[1],), kernel.dtype) if g.bias is None
                    else jnp.asarray(leaves[g.bias]))
            out.append({"kernel": kernel, "bias": bias})
        return out

    def raise_back(self, lowered: Sequence[dict]) -> Any:
        """The user's pytree with the chain's leaves replaced by ``lowered``'s (transposed back
        for ``(out, in)`` kernels)."""
        leaves = list(self._leaves())
        for g, layer in zip(self.groups, lowered, strict=True):
            old = leaves[g.kernel]
            leaves[g.kernel] = jnp.asarray(layer["kernel"].T if g.out_in else layer["kernel"],
                                           old.dtype)
            if g.bias is not None:
                leaves[g.bias] = jnp.asarray(layer["bias"], leaves[g.bias].dtype)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(self.params), leaves)

    def plan(self) -> GraphPlan:
        """The static plan of the group-by-group compression."""
        groups = tuple(GroupPlan(members[0].index, members[0].width,
                                 tuple(p for g in members for p in g.producers()),
                                 tuple((c.leaf, c.axis, c.block, c.value, c.value_axis)
                                       for g in members for c in g.consumers),
                                 tuple(g.index - 1 for g in members))
                       for members in self.sets())
        return GraphPlan(self.fn, jax.tree_util.tree_structure(self.params), self.signature,
                         groups, self.layouts, tuple(g.width for g in self.groups))

    def compress(self, method, *, domain=None) -> tuple[Compressed, CompressInfo]:
        """Compress the network: a chain through :func:`jaxcompress.compress` (the one
        driver), anything else group by group (:mod:`jaxcompress.graph_compress`), with the
        one per-layer step either way."""
        where = "compress"
        if not isinstance(method, (Method, BestOf)):
            raise TypeError(f"{where}: a traced network needs a method (e.g. "
                            f"jc.collocation(k)), got {type(method).__name__} {method!r:.60}")
        if not self.compressible:
            raise ValueError(f"{where}: the traced network has no compressible group:\n"
                             + format_table(self))
        dtype = self.x.dtype
        domain = Ball(self.x.shape[-1], 1.0) if domain is None else domain
        check_domain(domain, self.x.shape[-1], where, dtype)
        methods = method.methods if isinstance(method, BestOf) else (method,)
        if self.chain:
            (name,) = {activation_for(g, dtype, methods, where) for g in self.compressible}
            return self._compress_chain(method, domain, name)
        _refuse_kinks(self.compressible, methods, where, dtype)
        _check_widths(self.sets(), methods, where)
        for m in methods:
            if m.features.coordinates != "input":
                raise ValueError(f"{where}: coordinates={m.features.coordinates!r} needs a "
                                 "chain; this traced network is compressed in input coordinates")
        small, info = compress_graph(self.plan(), method, self._leaves(), domain)
        params = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(self.params), small)
        return Compressed(params, self.fn, None, "traced", True, network=self), info

    def compressor(self, method: Method, *, domain=None) -> Callable[[Any], tuple[Any, Any]]:
        """A pure function ``params -> (small_params, info)`` of this network's structure:
        the group-by-group path (equal to the driver on a chain, see the tests), checked
        once here, for ``jax.vmap`` over a stack of teachers or ``jax.jit``.

        Example: ``jax.vmap(net.compressor(jc.collocation(3)))(stacked_params)``.
        """
        where = "compressor"
        if not isinstance(method, Method):
            raise TypeError(f"{where}: one method (jc.collocation(k), ...; best_of picks on "
                            f"the host), got {type(method).__name__}")
        domain = Ball(self.x.shape[-1], 1.0) if domain is None else domain
        check_domain(domain, self.x.shape[-1], where, self.x.dtype)
        if not self.compressible:
            raise ValueError(f"{where}: no compressible group:\n" + format_table(self))
        _refuse_kinks(self.compressible, [method], where, self.x.dtype)
        _check_widths(self.sets(), [method], where)
        plan, treedef = self.plan(), jax.tree_util.tree_structure(self.params)

        def run(params):
            small, info = run_method(plan, method, jax.tree_util.tree_leaves(params), domain)
            return jax.tree_util.tree_unflatten(treedef, small), info

        return run

    def _compress_chain(self, method, domain, name: str) -> tuple[Compressed, CompressInfo]:
        where = "compress"
        lowered = self.lower()
        dtype = jnp.result_type(lowered[0]["kernel"])
        pts = error_points(domain, dtype=dtype)
        user = jax.jit(self.fn)    # traceable (it was traced): one compilation, not one per op
        with jax.default_matmul_precision("highest"):   # as the driver's matmuls (no TF32)
            y_fn = np.asarray(user(self.params, pts))
        y_low = np.asarray(apply(lowered, pts, activation=name))
        gap = float(np.max(np.abs(y_fn - y_low)))
        if y_fn.shape != y_low.shape or not gap <= _tol(y_fn, dtype):
            raise ValueError(f"{where}: the lowered chain (activation {name!r}) differs from fn "
                             f"on the domain by {gap:.3g} (shapes {y_fn.shape} vs "
                             f"{y_low.shape}); the trace missed part of the program")
        small, info = compress(lowered, method, activation=name, domain=domain)
        params = self.raise_back(small)
        y_small = np.asarray(apply(small, pts, activation=name))
        try:
            with jax.default_matmul_precision("highest"):
                y_user = np.asarray(user(params, pts))
        except Exception as e:  # noqa: BLE001 - the user's code refusing smaller leaves
            return Compressed(params, self.fn, small, name, False,
                              f"{type(e).__name__}: {str(e).splitlines()[0]:.200}",
                              lower=self.lower, network=self), info
        gap = float(np.max(np.abs(y_user - y_small)))
        if not gap <= _tol(y_small, dtype):
            raise RuntimeError(f"{where}: fn on the compressed params differs from the "
                               f"compressed chain by {gap:.3g}; the write-back is wrong")
        return Compressed(params, self.fn, small, name, True, lower=self.lower,
                          network=self), info

    def __str__(self) -> str:
        return format_table(self)


def _leaf_text(net: Network, leaf: int, axis: int | None = None) -> str:
    """A leaf's path; a 2-D kernel whose neurons (outputs) run along ``axis`` 0 is marked."""
    if axis is None or len(np.shape(net._leaves()[leaf])) != 2:
        return net.paths[leaf]
    return f"{net.paths[leaf]}{' (out,in)' if axis == 0 else ''}"


def _status(net: Network, g: Group) -> str:
    if not g.consumers and g.tied and g in net.compressible:
        return f"compressible (tied: groups {', '.join(map(str, g.tied))})"
    if g.pins:
        return "pinned: " + "; ".join(f"{r} [{line}]" for r, line in g.pins)
    if not g.consumers:
        return "not read by a kernel"
    if g in net.compressible:
        return "compressible" + (f" (tied: groups {', '.join(map(str, g.tied))})" if g.tied
                                 else "")
    return "not compressed"


def _activation_text(net: Network, g: Group) -> str:
    act = g.expression(digits=6, paths=net.paths) if g.program else "-"
    if g.consumed_node and not g.pins and not any(k == "p" for _, _, ops in g.program
                                                  for k, _ in ops):
        name, how = match_activation(g, net.x.dtype)
        act = f"{name} (matches {how})" if name else act
        if g.kinks and not name:
            act += (f" (not analytic: `{g.kinks[0][0]}` at {g.kinks[0][1]}; collocation or "
                    "data matching only)")
    elif g.kinks:
        act += f" (not analytic: `{g.kinks[0][0]}`)"
    return act


def format_table(net: Network) -> str:
    """The readable table of :meth:`Network.__str__`."""
    head = (f"jc.trace: {len(net.groups)} neuron groups ({len(net.compressible)} compressible) "
            f"of fn(params, x: {net.x.dtype}{list(net.x.shape)})")
    rows = [("group", "width", "produced by", "consumed by", "activation", "status")]
    for g in net.groups:
        prod = [_leaf_text(net, g.kernel, g.kernel_axis)]
        prod += [net.paths[leaf] for leaf, _ in g.producers()[1:]]
        cons = ", ".join(_consumer_text(net, c) for c in g.consumers) or "-"
        rows.append((str(g.index), str(g.width), ", ".join(prod), cons, _activation_text(net, g),
                     _status(net, g)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  "
                      + r[5] for r in rows]
    for prim, line in dict.fromkeys(net.unknown):
        lines.append(f"unknown primitive `{prim}` at {line}: no rule, what it touches is pinned")
    if net.chain:
        sizes = [net.x.shape[-1]] + [g.width for g in net.groups]
        lines.append(f"chain: lowers to the driver as {sizes}")
    else:
        lines.append("not a chain (compressed group by group):")
        lines += [f"  {w}" for w in net.why_not]
    return "\n".join(lines)


def _consumer_text(net: Network, c: Consumer) -> str:
    blocks = next(b for leaf, ax, b in net.layouts if (leaf, ax) == (c.leaf, c.axis))
    text = _leaf_text(net, c.leaf, 1 - c.axis) if len(blocks) == 1 else (
        f"{net.paths[c.leaf]} rows {c.offset}:{c.offset + blocks[c.block][1]} of "
        f"{sum(s for _, s in blocks)}")
    return text


def trace(fn: Callable[[Any, jax.Array], jax.Array], params: Any, x: jax.Array) -> Network:
    """Trace ``fn(params, x)`` and find its neuron groups (see the module docstring).

    Args:
      fn: ``fn(params, x) -> y``, any JAX function of a parameter pytree and inputs.
      params: the parameter pytree (its leaves are traced as inputs, never as constants).
      x: example inputs ``(n, d_in)`` (only the shape and dtype are used).

    Returns:
      A :class:`Network`; ``print(net)`` shows every group, its producers and consumers
      (paths in ``params``), its activation and whether it is compressible or pinned and why.

    Example:
      >>> params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
      >>> net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), params,
      ...                jnp.zeros((4, 2)))
      >>> [g.width for g in net.compressible]
      [16, 16]
    """
    shape = jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x))
    if len(shape.shape) != 2:
        raise ValueError(f"trace: x must be example inputs of shape (n, d_in), got shape "
                         f"{shape.shape}")
    pairs, _ = jax.tree_util.tree_flatten_with_path(params)
    if not pairs:
        raise ValueError("trace: params has no array leaves; expected the parameter pytree")
    prog = trace_program(fn, params, shape, analytic_call=_analytic_call)
    leaf_shapes = [tuple(np.shape(leaf)) for _, leaf in pairs]
    n = len(leaf_shapes)
    a = _Analysis(leaf_shapes)
    a.vals = {i: _Val("param", leaf=i) for i in range(n)}
    a.vals[n] = _Val("input")
    _interpret(list(prog.eqns), a)
    out_vals = [a.val(o) for o in prog.outs]
    lines = {o: e.line for e in prog.eqns for o in e.outs}
    for o, v in zip(prog.outs, out_vals, strict=True):
        a.pin_all([v], "reaches the output", lines.get(o, "output") if isinstance(o, int)
                  else "output")
    paths = tuple(jax.tree_util.keystr(p) for p, _ in pairs)
    _pin_shared(a, paths)
    _close_sets(a)
    hidden, why = _chain(a.groups, out_vals)
    layouts = tuple((leaf, ax, blocks) for (leaf, ax), blocks in a.layouts.items())
    return Network(fn=fn, params=params, x=shape, paths=paths, groups=tuple(a.groups),
                   unknown=tuple(a.unknown), hidden=tuple(hidden), why_not=tuple(why),
                   layouts=layouts, signature=prog.signature())
