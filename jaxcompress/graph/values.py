"""What the trace knows of a value, and the neuron groups it finds (:mod:`jaxcompress.graph`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DUAL", "OTHER", "Consumer", "Group", "Val"]


@dataclasses.dataclass(frozen=True)
class Val:
    """What the analysis knows of one value.

    kind: ``"const"`` (``value``), ``"param"`` (leaf ``leaf``: ``flip`` for a transposed 2-D
    leaf; ``laxis``, for a 1-D leaf, the axis of the broadcast value that runs along the leaf),
    ``"input"`` (``x`` itself), ``"hidden"`` (a value whose axis ``axis`` is made of neuron
    blocks), ``"fixed"`` (computed from parameters and constants only, of ``shape``: PirateNet's
    ``1 - alpha``; ``per``: when it is one number per neuron, an elementwise function of 1-D
    leaves ``((leaf, slice), ...)`` whose entries run along its axis ``laxis``, as BatchNorm's
    ``scale * rsqrt(var + eps)`` of its running statistics: sliced with the neurons, like the
    leaves), ``"seed"`` (``c K^T`` of a constant ``c`` and a kernel ``leaf`` whose axis
    ``laxis`` (of the whole leaf) is left free along the value's ``axis``: the start of a
    derivative taken inside ``fn``, ``jax.grad``'s cotangent of an output kernel's rows, until an
    elementwise product with a group's activation says whose rows they are; ``rows``: every
    ``(leaf, axis, slice)`` of such kernels, several when the cotangents of several output heads
    are summed) or ``"other"``
    (anything else: a fixed function of ``x``, or of pinned groups).

    A hidden value's ``blocks`` are ``((group, size), ...)`` along ``axis`` in order: group
    ``g``'s neurons (0-based), or ``-1`` for a block that is no group's (the input concatenated
    beside a layer). ``dual`` marks a **cotangent** of the groups (``jax.grad`` taken inside
    ``fn``): linear in their readers' rows, computed from them transposed, and read by their
    producers transposed (their kernel's neuron axis contracted) — the same neurons at another
    site, never an activation of its own. ``pre`` marks ``x K`` or ``x K + b`` itself;
    ``node`` is the node of the group's activation program the value is (single-block values
    only; ``None`` otherwise).
    ``scale`` marks a kernel computed as ``v * g`` (weight factorisation): ``(g's leaf, the axis
    of v it runs along)``, ``leaf`` being ``v``. ``index`` marks slice ``index`` of a stacked
    leaf (along its axis 0: layer ``index`` of a ``scan`` over stacked parameters), ``lead``
    that slice before its unit axis 0 is squeezed away; the other fields then describe the
    slice.
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
    shape: tuple[int, ...] | None = None
    index: int | None = None
    lead: bool = False
    per: tuple[tuple[int, int | None], ...] = ()
    dual: bool = False
    rows: tuple[tuple[int, int, int | None], ...] = ()

    @property
    def groups(self) -> list[int]:
        return [g for g, _ in self.blocks if g >= 0]

    def single(self) -> int | None:
        """The group when the value is exactly one group's neurons, else ``None``."""
        return self.blocks[0][0] if len(self.blocks) == 1 and self.blocks[0][0] >= 0 else None


#: Anything the analysis does not follow.
OTHER = Val("other")

#: The consumed value of rows read only through a derivative (:attr:`Consumer.value`).
DUAL = -1


@dataclasses.dataclass(frozen=True)
class Consumer:
    """A linear consumer of a group: rows of a kernel leaf (or of one slice of a stacked leaf).

    Attributes:
      leaf: the kernel's leaf index.
      axis: the leaf's axis that runs over the group's neurons (0 for an ``(in, out)`` kernel;
        1 for a slice of a stacked ``(L, in, out)`` kernel: axes count in the whole leaf).
      block: the group's block among the leaf's row blocks (:attr:`Network.layouts`).
      value: the id of the consumed value in the flat program (the ``dot_general`` operand);
        :data:`DUAL` (with ``value_axis`` ``-1``): rows that ``fn`` reads only through a
        derivative (an output kernel under ``jax.grad``: its ``x K`` is never computed), whose
        features are their contribution to ``fn``'s output, ``d fn / d K[j, :]`` per neuron.
      value_axis: that value's neuron axis.
      offset: where the group's block starts along it (original widths).
      line: the source line of the ``dot_general``.
      index: the slice of a stacked leaf (a layer under ``scan``), or ``None``: the whole leaf.
    """

    leaf: int
    axis: int
    block: int
    value: int
    value_axis: int
    offset: int
    line: str
    index: int | None = None


@dataclasses.dataclass(eq=False)
class Group:
    """One neuron group: an axis of ``sigma(x K + b)`` (see the module docstring).

    Attributes:
      index: 1-based, in program order.
      width: the number of neurons.
      kernel: the producing kernel's leaf index; ``kernel_axis`` its axis along the neurons
        (``out_in``: the kernel is laid out ``(out, in)``), an axis of the whole leaf.
      bias: the bias leaf's index, or ``None``; ``bias_axis`` its axis along the neurons when
        that is not the first (a ``(1, n)`` bias), else ``None``.
      scales: leaves of per-neuron parameters inside the activation (a FiLM scale, a learnt
        frequency per neuron), sliced with the neurons; ``scale_stacks`` the slice of each
        (``None``: the whole leaf; a stacked leaf's slice: a parameter of a layer under scan).
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
        set is compressed jointly (:mod:`jaxcompress.graph`, :mod:`jaxcompress.driver`).
      constant: whether it does not depend on ``x`` (pinned: nothing to match on the domain).
      linear: the line of a kernel that reads ``x K + b`` itself (no activation between): such
        a group is pinned unless a residual stream ties it (a linear input projection).
      stack: its position along axis 0 of stacked producer leaves (a layer under ``scan``:
        its kernel, bias and scales are slice ``stack`` of their leaves), or ``None``.
      sites: the source line of every ``dot_general`` that computes its neurons: one per call
        of the network in ``fn`` (``f(x) + f(-x)`` computes each group at two sites; every site
        is sliced with the kept neurons and every reader re-weighted to fit all its sites).
      stacked: the 1-based indices of every group that must keep its width (itself included),
        when it touches a stacked leaf: the layers of a ``scan`` keep one width, since their
        leaves stay stacked; each of its tied sets keeps its own neurons
        (:mod:`jaxcompress.graph`); ``()`` otherwise.
    """

    index: int
    width: int
    kernel: int
    kernel_axis: int
    bias: int | None = None
    bias_axis: int | None = None
    scales: list = dataclasses.field(default_factory=list)
    scale_stacks: list = dataclasses.field(default_factory=list)
    source: Any = "other"
    program: list = dataclasses.field(default_factory=list)
    calls: list = dataclasses.field(default_factory=list)
    consumers: list = dataclasses.field(default_factory=list)
    consumed_node: int | None = None
    pins: list = dataclasses.field(default_factory=list)
    kinks: list = dataclasses.field(default_factory=list)
    tied: tuple[int, ...] = ()
    constant: bool = False
    linear: str = ""
    stack: int | None = None
    stacked: tuple[int, ...] = ()
    sites: list = dataclasses.field(default_factory=list)

    @property
    def out_in(self) -> bool:
        """Whether the producing kernel is laid out ``(out, in)`` (neurons along its first
        axis, after the stack axis of a stacked kernel)."""
        return self.kernel_axis == (0 if self.stack is None else 1)

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
        """``(leaf, axis)`` of every leaf sliced with the neurons: kernel, bias, scales (of a
        stacked group: their slice :attr:`stack`, axes counted in the whole leaf)."""
        return [(leaf, axis) for leaf, axis, _ in self.slots()]

    def slots(self) -> list[tuple[int, int, int | None]]:
        """``(leaf, axis, slice)`` of every leaf sliced with the neurons: kernel, bias, scales
        (``slice``: the position along a stacked leaf's axis 0, or ``None``)."""
        lead = 0 if self.stack is None else 1
        out = [(self.kernel, self.kernel_axis, self.stack)]
        bias_axis = lead if self.bias_axis is None else self.bias_axis
        out += [] if self.bias is None else [(self.bias, bias_axis, self.stack)]
        stacks = list(self.scale_stacks) + [None] * (len(self.scales) - len(self.scale_stacks))
        return out + [(leaf, 0 if i is None else 1, i)
                      for leaf, i in zip(self.scales, stacks, strict=True)]

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

