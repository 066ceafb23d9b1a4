"""The table ``print(net)`` shows: every group, its producers and readers, its activation and
whether it is compressible, pinned (and why, at which line of your code) or tied."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxcompress.graph.match import match_activation
from jaxcompress.graph.values import DUAL, Consumer, Group

#: A :class:`~jaxcompress.graph.Network` (which imports this module to print itself).
Network = Any

__all__ = ["format_table"]


def _leaf_text(net: Network, leaf: int, axis: int | None = None,
               index: int | None = None) -> str:
    """A leaf's path (``[i]``: its slice ``i`` of a stacked leaf, a layer under scan); a 2-D
    kernel whose neurons (outputs) run along its first axis is marked."""
    lead = 0 if index is None else 1
    path = net.paths[leaf] + ("" if index is None else f"[{index}]")
    if axis is None or len(np.shape(net.leaves[leaf])) != 2 + lead:
        return path
    return f"{path}{' (out,in)' if axis == lead else ''}"


def _status(net: Network, g: Group) -> str:
    stack = (f" (one width with groups {', '.join(map(str, g.stacked))}: a stack under scan "
             "or vmap)"
             if g.stacked and len(g.stacked) > 1 else "")
    if not g.consumers and g.tied and g in net.compressible:
        return f"compressible (tied: groups {', '.join(map(str, g.tied))}){stack}"
    if g.pins:
        return "pinned: " + "; ".join(f"{r} [{line}]" for r, line in g.pins)
    if not g.consumers:
        return "not read by a kernel"
    sites = f" (computed at {len(g.sites)} sites)" if len(g.sites) > 1 else ""
    if g in net.compressible:
        return "compressible" + (f" (tied: groups {', '.join(map(str, g.tied))})" if g.tied
                                 else "") + stack + sites
    return "not compressed"


def _activation_text(net: Network, g: Group) -> str:
    if net.kind == "params":      # a params list: the activation it was given, not traced
        return net.activation.name if g.consumers else "-"
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
    source = "jc.trace" if net.kind == "traced" else "params list"
    head = (f"{source}: {len(net.groups)} neuron groups ({len(net.compressible)} compressible) "
            f"of fn(params, x: {net.x.dtype}{list(net.x.shape)})")
    rows = [("group", "width", "produced by", "consumed by", "activation", "status")]
    for g in net.groups:
        prod = [_leaf_text(net, leaf, axis if i == 0 else None, index)
                for i, (leaf, axis, index) in enumerate(g.slots())]
        cons = ", ".join(dict.fromkeys(_consumer_text(net, c) for c in g.consumers)) or "-"
        rows.append((str(g.index), str(g.width), ", ".join(prod), cons, _activation_text(net, g),
                     _status(net, g)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  "
                      + r[5] for r in rows]
    for prim, line in dict.fromkeys(net.unknown):
        lines.append(f"unknown primitive `{prim}` at {line}: no rule, what it touches is pinned")
    if net.chain:
        sizes = [net.x.shape[-1]] + [g.width for g in net.groups]
        lines.append(f"chain of dense layers {sizes}: closed-form features (the Taylor pass), "
                     "the paper's certificate")
    else:
        lines.append("not a chain (features through the program, group by group):")
        lines += [f"  {w}" for w in net.why_not]
    if net.derivative:
        lines.append("fn differentiates the network (jax.grad inside fn): every group is read "
                     "through its cotangent too; collocation and data matching also match "
                     "first derivatives at their points")
    return "\n".join(lines)


def _consumer_text(net: Network, c: Consumer) -> str:
    blocks = next(b for leaf, ax, b in net.layouts if (leaf, ax) == (c.leaf, c.axis))
    lead = 0 if c.index is None else 1
    text = _leaf_text(net, c.leaf, 1 - (c.axis - lead) + lead, c.index) if len(blocks) == 1 else (
        f"{_leaf_text(net, c.leaf, None, c.index)} rows {c.offset}:"
        f"{c.offset + blocks[c.block][1]} of {sum(s for _, s in blocks)}")
    return text + (" (through jax.grad)" if c.value == DUAL else "")
