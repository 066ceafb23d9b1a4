"""Per-primitive rules of the trace (the ``jax/experimental/jet.py`` registry pattern).

:data:`RULES` maps a primitive's name to a rule ``(analysis, eqn, operand values) -> output
values``; :func:`register_rule` adds one. Families are registered by helpers
(:func:`_defelementwise`, :func:`_pinning`) as ``jet.py``'s ``deflinear`` does. A rule answers
only through the analysis's narrow API (:mod:`jaxcompress.graph.analysis`): a new group, a
consumer, a pin with its reason and line, a tie, the activation program. A primitive without a
rule pins every group it touches and is named in the table, never guessed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from jaxcompress.graph.analysis import Analysis
from jaxcompress.graph.values import OTHER, Val
from jaxcompress.program import Eqn, RuleTable

__all__ = ["ELEMENTWISE", "RULES", "Registered", "Rule", "analytic", "entire", "interpret",
           "register_rule", "ties"]


Rule = Callable[[Analysis, Eqn, list], list]

#: The fix offered where a derivative taken inside ``fn`` is read other than linearly.
DERIV_FIX = ("; fix: trace the network itself (fn without the derivative) and differentiate "
             "the compressed one")


@dataclasses.dataclass(frozen=True)
class Registered:
    """A primitive's entry in :data:`RULES`: its rule and what is known of it.

    Attributes:
      rule: ``(analysis, eqn, operand values) -> output values``.
      analytic: ``False`` for an elementwise primitive with kinks, jumps or comparisons
        (``max``, ``abs``, ``floor``, ...): a group whose activation program uses it is not
        analytic (derivative matching refuses it; collocation and data matching take it).
      entire: an entire function (a composition of them is entire: ``sin``, ``exp``, ``mul``,
        ...): a traced activation built only of such primitives has no finite strip of
        analyticity to derive.
      ties: a product or sum of two groups whose neuron blocks line up ties them into one set
        (a gate ``h * U``, a residual stream ``s + f(s)``).
    """

    rule: Rule
    analytic: bool = True
    entire: bool = False
    ties: bool = False


#: The registry: primitive -> :class:`Registered` (its rule and flags), the trace's table of
#: the library's one kind of rule table (:class:`jaxcompress.program.RuleTable`). The side
#: tables are derived from it (:func:`analytic`, :func:`entire`, :func:`ties`), never kept
#: apart.
RULES: RuleTable = RuleTable("trace")


def register_rule(primitive, rule: Rule, *, analytic: bool = True, entire: bool = False,
                  ties: bool = False) -> None:
    """Register (or replace) the rule of ``primitive``: a JAX primitive (``jax.lax.tanh_p``)
    or its name (JAX's primitive of that name, or a primitive of your own found by name).

    A rule is a pure function of the :class:`~jaxcompress.graph.analysis.Analysis` (through its
    narrow API: a new group, a consumer, a pin with its reason and line, a tie, the activation
    program), the equation and its operands' :class:`~jaxcompress.graph.values.Val` records,
    returning one :class:`Val` per output. A primitive without a rule pins what it touches and
    is named in the network's table. The flags (see :class:`Registered`) are recorded with it.

    Example: a user's own elementwise primitive, analytic, read as ``tanh`` is:
    ``register_rule("my_sigmoid", ELEMENTWISE)`` (:data:`ELEMENTWISE`, the rule of this module's
    elementwise primitives).
    """
    is_primitive = hasattr(primitive, "bind") and hasattr(primitive, "name")
    if not (isinstance(primitive, str) or is_primitive) or not callable(rule):
        raise TypeError(f"register_rule: expected a primitive (or its name) and a function, got "
                        f"{primitive!r}, {type(rule).__name__}")
    for name, flag in (("analytic", analytic), ("entire", entire), ("ties", ties)):
        if not isinstance(flag, bool):
            raise TypeError(f"register_rule: {name} must be a bool, got {flag!r}")
    RULES[RULES.key(primitive)] = Registered(rule, analytic=analytic, entire=entire, ties=ties)


def _define(rule: Rule, *names: str, **flags: bool) -> None:
    """Register ``rule`` for each of ``names`` with the same flags (``jet.py``'s ``deflinear``
    pattern: one line per family)."""
    for n in names:
        register_rule(n, rule, **flags)


def analytic(primitive: str) -> bool:
    """Whether a primitive is analytic where it is registered (an unknown one counts as
    analytic here: it pins what it touches anyway)."""
    entry = RULES.lookup(primitive)
    return entry is None or entry.analytic


def entire(primitive: str) -> bool:
    """Whether a primitive is registered as an entire function."""
    entry = RULES.lookup(primitive)
    return entry is not None and entry.entire


def elementwise(primitive: str) -> bool:
    """Whether a primitive is registered with the elementwise rule (:data:`ELEMENTWISE`, or
    its variant for operands of one group): an output entry reads the same entry of each
    operand (or a scalar)."""
    entry = RULES.lookup(primitive)
    return entry is not None and entry.rule in (_elementwise, _same)


def ties(primitive: str) -> bool:
    """Whether a primitive ties two groups whose neuron blocks line up into one set."""
    entry = RULES.lookup(primitive)
    return entry is not None and entry.ties


def _const_eval(eqn: Eqn, vals: list[Val]) -> list[Val]:
    res = eqn.primitive.bind(*[v.value for v in vals], **eqn.params)
    res = res if eqn.primitive.multiple_results else [res]
    return [Val("const", value=np.asarray(r)) for r in res]


def _scalar(value) -> np.ndarray | None:
    """A constant that is one number (any shape, all entries equal), else ``None``."""
    arr = np.asarray(value)
    if arr.size == 0:
        return None
    first = arr.reshape(-1)[0]
    return np.asarray(first) if np.all(arr == first) else None


def _operand(a: Analysis, eqn: Eqn, ref: Val, v: Val):
    """A non-hidden operand of an elementwise op on the hidden value ``ref``: its program
    operand, or the reason it pins ``ref``'s groups."""
    if v.kind == "const":
        s = _scalar(v.value)
        # (a per-neuron constant would have to be sliced inside the program)
        return ("c", s) if s is not None else ("a non-scalar constant (not one function of "
                                               "each neuron)")
    if v.kind == "param":
        shape = a.shape_of(v)
        g = ref.single()
        if v.lead or v.scale is not None:
            return "a parameter that is not one number per neuron"
        if (len(shape) == 1 and (v.laxis or 0) == ref.axis and g is not None
                and shape[0] == a.groups[g].width):
            return ("p", v.leaf)
        unit = _singleton_axis(shape)
        if unit is None and len(shape) >= 2 and int(np.prod(shape)) == 1:
            unit = ref.axis        # (1, 1): one number per neuron of a one-neuron group
        if (unit is not None and v.laxis is None and v.index is None and g is not None
                and len(shape) == len(eqn.out_shapes[0]) and unit == ref.axis
                and shape[unit] == a.groups[g].width):
            # a (1, n) or (n, 1) array (biases ported from TensorFlow): one number per neuron
            # along its axis ``unit``, the value's neuron axis
            return ("p", v.leaf, unit)
        if int(np.prod(shape)) == 1:
            # one shared scalar parameter (a slice of a stacked one: not a leaf of its own)
            return ("s", v.leaf) if v.index is None else ("f", None)
        return "a parameter that is not one number per neuron"
    if v.kind == "fixed":
        # one number computed from parameters (PirateNet's 1 - alpha): the same function of
        # every neuron, though not one the activation program can hold; one number per neuron
        # (BatchNorm's scale * rsqrt(var + eps)): its leaves are sliced with the neurons
        g = ref.single()
        if (v.per and g is not None and (v.laxis or 0) == ref.axis
                and v.shape[v.laxis or 0] == a.groups[g].width):
            return ("per", v.per)
        return ("f", None) if int(np.prod(v.shape)) == 1 else (
            "a value computed from parameters that is not one number (nor one per neuron)")
    return ("the input" if v.kind == "input" else "a value the analysis does not follow "
            "(another branch of the program, or a pinned group)")


#: The fix for each operand :func:`_operand` cannot read beside a group's activation.
_OPERAND_FIX = {
    "a non-scalar constant (not one function of each neuron)":
        "make it a parameter leaf of one number per neuron (shape (n,)), sliced with them",
    "the input": "read x through a kernel (x K) or join it beside the layer (a skip, "
                 "concatenate)",
    "a value the analysis does not follow (another branch of the program, or a pinned group)":
        "the other operand's own pin says why it is not followed: fix that one",
    "a parameter that is not one number per neuron": "make it one number per neuron (shape "
                                                     "(n,)) or one shared scalar",
    "a value computed from parameters that is not one number (nor one per neuron)":
        "compute one number per neuron (shape (n,)) or one shared scalar",
}


def _elementwise(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """Elementwise primitives: constants fold; on hidden values with one block structure the
    op is a function of each neuron (extending a single group's activation program); a
    parameter added to ``x K`` is its bias, any other per-neuron parameter a scale."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    if any(v.kind == "seed" for v in vals):
        return _seeded(a, eqn, vals)
    hidden = [v for v in vals if v.kind == "hidden"]
    dual = any(h.dual for h in hidden)
    if dual and not _linear_in_dual(eqn, vals):
        a.pin(hidden, f"`{eqn.name}` of a cotangent (a derivative taken inside fn) that is not "
                      "linear in it (only sums of cotangents and their products with "
                      f"activations are){DERIV_FIX}", eqn.line)
        return [OTHER] * len(eqn.outs)
    if not hidden:
        out = _factorised(a, eqn, vals)
        if out is OTHER and all(v.kind in ("param", "const", "fixed") for v in vals):
            out = _per_neuron(a, eqn, vals)
        return [out] + [OTHER] * (len(eqn.outs) - 1)
    ref = hidden[0]
    if any(h.axis != ref.axis or h.blocks != ref.blocks for h in hidden[1:]):
        _tie(a, eqn, ref, hidden)
    if any(h.axis != ref.axis or a.sets_of(h.blocks) != a.sets_of(ref.blocks)
           for h in hidden[1:]):
        groups = sorted({g for h in hidden for g in h.groups})
        blocks = " against ".join(dict.fromkeys(
            "+".join(str(w) for _, w in h.blocks) + f" on axis {h.axis}" for h in hidden))
        why = ("only products and sums tie groups into one set; fix: combine the two "
               "layers' neurons by a product or a sum, or read each through a kernel first"
               if _aligned(ref, hidden) else
               f"its operands' neuron blocks differ, {blocks}: neuron i is not one neuron of "
               "each; e.g. a Fourier embedding [cos(xB), sin(xB)], one group twice, added to "
               "one layer's neurons; fix: read each through a kernel (h K) before combining "
               "them")
        for g in groups:
            others = ", ".join(str(h + 1) for h in groups if h != g) or "itself, elsewhere"
            a.pin_group(g, f"`{eqn.name}` with group {others} ({why})", eqn.line)
        return [OTHER] * len(eqn.outs)
    operands, params, per = [], [], False
    unit_axes = {}   # a (1, n) / (n, 1) per-neuron leaf: its neuron axis
    for v in vals:
        if v.kind == "hidden":
            operands.append(("n", v.node))
            continue
        op = _operand(a, eqn, ref, v)
        if isinstance(op, str):
            a.pin([ref], f"`{eqn.name}` of its activation with {op}; fix: "
                         f"{_OPERAND_FIX.get(op, 'see the other operand')}", eqn.line)
            return [OTHER] * len(eqn.outs)
        if len(op) == 3:
            unit_axes[v.leaf], op = op[2], op[:2]
        if op[0] == "per":      # its leaves are per-neuron parameters, sliced with the neurons
            params += list(op[1])
            op, per = ("f", None), True
        operands.append(op)
        if op[0] == "p":
            params.append((v.leaf, v.index))
    g = ref.single()
    tied = any(h.blocks != ref.blocks for h in hidden[1:])
    if (g is not None and eqn.name == "add" and ref.pre and not dual and len(params) == 1
            and len(hidden) == 1 and not per and params[0][1] == a.groups[g].stack):
        grp, axis = a.groups[g], unit_axes.get(params[0][0])
        if grp.bias is None and not grp.program:
            a.set_bias(g, params[0][0], axis)
        if grp.bias == params[0][0] and grp.bias_axis == axis:   # again, at another site
            a.explain(*params[0])
            return [dataclasses.replace(ref, pre=True)]
    wide = [leaf for leaf in unit_axes if int(np.prod(a.leaf_shapes[leaf])) > 1]
    if wide:
        shape = tuple(a.leaf_shapes[wide[0]])
        a.pin([ref], f"`{eqn.name}` of its activation with a parameter of shape {shape} (one "
                     "number per neuron, which is sliced along its unit axis only as a bias "
                     "added to x K; reshape it to one axis where it is read, e.g. "
                     "b.reshape(-1))", eqn.line)
        return [OTHER] * len(eqn.outs)
    if unit_axes:   # a (1, 1) number read by a one-neuron group other than as its bias: shared
        operands = [("s", r) if k == "p" and r in unit_axes else (k, r) for k, r in operands]
        params = [(leaf, i) for leaf, i in params if leaf not in unit_axes]
    for leaf, index in params:
        a.add_scale(g, leaf, index)
    if not analytic(eqn.name) and not eqn.benign:
        for h in ref.groups:
            a.add_kink(h, eqn.name, eqn.line)
    node = None
    if (g is not None and not tied and not dual and all(v.node is not None for v in hidden)
            and all(kind != "f" for kind, _ in operands)):
        # a parameter operand ("p": per neuron, or one shared number) is shown by its path;
        # a program with one is not lowered to a registered activation
        node = a.extend_activation(g, eqn, [("p", r) if kind == "s" else (kind, r)
                                             for kind, r in operands])
    return [dataclasses.replace(ref, pre=False, node=node, dual=dual)] * len(eqn.outs)


def _linear_in_dual(eqn: Eqn, vals: Sequence[Val]) -> bool:
    """Whether an elementwise op with cotangents among its operands is linear in them: a sum
    of cotangents, a sign or cast, a product (or quotient) of one cotangent with anything else
    (its activation's derivative), a select whose predicate is no cotangent (ReLU's
    derivative). Linear is what ``jax.grad`` computes; a cotangent used otherwise is not one."""
    duals = [v.kind == "hidden" and v.dual for v in vals]
    if eqn.name in ("add", "sub", "add_any"):
        return all(duals)
    if eqn.name in ("neg", "convert_element_type", "copy", "copy_p", "reduce_precision"):
        return True
    if eqn.name == "mul":
        return sum(duals) == 1
    if eqn.name == "div":
        return duals[0] and not any(duals[1:])
    if eqn.name == "select_n":
        return not duals[0]
    return False


#: Elementwise primitives that keep a seed a seed (a constant factor, a sign, a cast).
_SEED_SCALINGS = ("mul", "neg", "convert_element_type", "copy", "copy_p", "div")


def _seeded(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """An elementwise op with a seed ``c K^T`` (:class:`~jaxcompress.graph.values.Val`): times
    a group's activation of the same width, the seed's rows are that group's readers (read
    through the derivative only) and the product its cotangent; times a constant it stays a
    seed; anything else pins the groups it meets."""
    seeds = [v for v in vals if v.kind == "seed"]
    hidden = [v for v in vals if v.kind == "hidden"]
    seed = seeds[0]
    if len(seeds) == 1 and not hidden and eqn.name in _SEED_SCALINGS and all(
            v.kind == "const" and _scalar(v.value) is not None for v in vals if v is not seed):
        return [seed] * len(eqn.outs)
    if (eqn.name in ("add", "add_any", "sub") and len(seeds) == len(vals)
            and len({(v.axis, v.shape) for v in seeds}) == 1):
        # the cotangents of several heads' rows, summed: one seed of all their rows
        rows = tuple(dict.fromkeys(r for v in seeds for r in v.rows))
        return [dataclasses.replace(seed, rows=rows)] * len(eqn.outs)
    if (eqn.name == "mul" and len(seeds) == 1 and len(hidden) == 1 and not hidden[0].dual
            and hidden[0].single() is not None and hidden[0].axis == seed.axis
            and a.groups[hidden[0].single()].width == seed.shape[0]):
        h = hidden[0]
        for leaf, axis, index in seed.rows:
            a.consume_dual(eqn, h.single(), leaf, axis, index)
        return [Val("hidden", axis=h.axis, blocks=h.blocks, dual=True)] * len(eqn.outs)
    a.pin(hidden, f"`{eqn.name}` with the cotangent of a kernel's rows (a derivative taken "
                  f"inside fn) that is not its product with one group's activation{DERIV_FIX}",
          eqn.line)
    return [OTHER] * len(eqn.outs)


def _per_neuron(a: Analysis, eqn: Eqn, vals: list[Val]) -> Val:
    """An elementwise function of parameters and constants: one number per neuron when every
    operand is a 1-D leaf, or such a value, running along one axis, or a scalar (``per``:
    its leaves), else just ``"fixed"``."""
    shape = tuple(eqn.out_shapes[0])
    per, axes = [], set()
    for v in vals:
        if v.kind == "const" and _scalar(v.value) is not None:
            continue
        if v.kind == "param" and not v.lead and v.scale is None and len(a.shape_of(v)) == 1:
            per.append((v.leaf, v.index))
            axes.add(v.laxis or 0)
        elif v.kind == "fixed" and v.per:
            per += list(v.per)
            axes.add(v.laxis or 0)
        else:
            return Val("fixed", shape=shape)
    if len(axes) != 1 or not per:
        return Val("fixed", shape=shape)
    axis = axes.pop()
    if axis >= len(shape) or any(n != 1 for i, n in enumerate(shape) if i != axis):
        return Val("fixed", shape=shape)
    return Val("fixed", shape=shape, per=tuple(dict.fromkeys(per)), laxis=axis)


def _factorised(a: Analysis, eqn: Eqn, vals: list[Val]) -> Val:
    """``g * v`` of a 2-D leaf ``v`` and a 1-D leaf ``g`` broadcast along one of ``v``'s axes
    (jaxpi's random weight factorisation): a kernel whose rows along the other axis are
    linear in ``v`` (``C (g * v) = g * (C v)``); anything else computed from parameters is
    ``"other"`` (a ``dot_general`` with it pins its data, naming why)."""
    if eqn.name != "mul" or len(vals) != 2 or any(v.kind != "param" or v.lead for v in vals):
        return OTHER
    if vals[0].index != vals[1].index:
        return OTHER
    dims = [len(a.shape_of(v)) for v in vals]
    if sorted(dims) != [1, 2]:
        return OTHER
    v, g = (vals[0], vals[1]) if dims[0] == 2 else (vals[1], vals[0])
    if v.scale is not None or v.laxis is not None or g.laxis is None or len(eqn.out_shapes[0]) != 2:
        return OTHER
    axis = (1 - g.laxis) if v.flip else g.laxis
    return dataclasses.replace(v, scale=(g.leaf, axis))


def _aligned(ref: Val, hidden: Sequence[Val]) -> bool:
    """Whether hidden values have blocks of equal widths on one axis (no-group blocks
    included), so that neuron ``i`` of each lines up."""
    sizes = [s for _, s in ref.blocks]
    return all(h.axis == ref.axis and [s for _, s in h.blocks] == sizes and not any(
        (g < 0) != (r < 0) for (g, _), (r, _) in zip(h.blocks, ref.blocks, strict=True))
        for h in hidden[1:])


def _tie(a: Analysis, eqn: Eqn, ref: Val, hidden: Sequence[Val]) -> None:
    """``h * U`` (a gate) or ``h + f(h)`` (a residual stream) of values whose blocks have equal
    widths on one axis: neuron ``i`` of the result is a function of neuron ``i`` of each, so
    the groups are tied block by block into one set, kept and dropped together. A stream's set
    spans every block that writes it (the input projection, each block's output kernel and
    bias) and every kernel that reads it (each block's first kernel, the head); any other
    elementwise op of two groups (``max``) pins them (:func:`_elementwise`)."""
    if not ties(eqn.name) or not _aligned(ref, hidden):
        return
    for h in hidden[1:]:
        for (g, _), (r, _) in zip(h.blocks, ref.blocks, strict=True):
            if g >= 0:
                a.tie(g, r)


def _unit_free(shape) -> list[int]:
    return [i for i, s in enumerate(shape) if s != 1]


def _singleton_axis(shape) -> int | None:
    """The one axis of a ``(1, n)`` or ``(n, 1)`` shape (two or more axes, all but one of
    length 1, ``n > 1``), else ``None``."""
    free = _unit_free(shape)
    return free[0] if len(shape) >= 2 and len(free) == 1 else None


def _view(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """``reshape`` / ``broadcast_in_dim`` / ``transpose`` / ``squeeze`` / ``expand_dims``:
    parameter views (a 1-D leaf broadcast along an axis, a transposed kernel) are followed; a
    hidden value is followed through a transpose and through views that only add or remove
    unit axes, and pinned by any other."""
    v = vals[0]
    if all(w.kind == "const" for w in vals):
        return _const_eval(eqn, vals)
    old, new = eqn.in_shapes[0], eqn.out_shapes[0]
    if v.kind == "param":
        return [_param_view(a, eqn, v, old, new) if v.scale is None else OTHER]
    if v.kind == "fixed":
        if not v.per:
            return [Val("fixed", shape=tuple(new))]
        moved = _param_view(a, eqn, dataclasses.replace(v, kind="param"), old, new,
                            shape=(v.shape[v.laxis or 0],))
        return [Val("fixed", shape=tuple(new)) if moved is OTHER else
                dataclasses.replace(v, shape=tuple(new), laxis=moved.laxis)]
    if v.kind not in ("hidden", "seed"):
        return [v] if v.kind == "input" and tuple(old) == tuple(new) else [OTHER]
    if eqn.name == "transpose":
        return [dataclasses.replace(v, axis=list(eqn.params["permutation"]).index(v.axis))]
    free_old, free_new = _unit_free(old), _unit_free(new)
    if [old[i] for i in free_old] == [new[i] for i in free_new] and v.axis in free_old:
        return [dataclasses.replace(v, axis=free_new[free_old.index(v.axis)])]
    if v.kind == "hidden":
        a.pin(vals, f"reshaped by `{eqn.name}` across its neurons' axis; fix: keep the "
                    "neurons on an axis of their own (reshape the other axes only), or "
                    "register a rule (jaxcompress.graph.register_rule)", eqn.line)
    return [OTHER]


def _param_view(a: Analysis, eqn: Eqn, v: Val, old, new, shape=None) -> Val:
    """A view of a parameter leaf (or of its slice): a transposed 2-D kernel, or a 1-D leaf
    whose entries run along one axis (``laxis``) of the viewed value; a slice of a stacked leaf
    once its unit stack axis is squeezed away. (``shape``: of a per-neuron value computed
    from leaves, ``(n,)``.)"""
    if v.lead:
        ok = tuple(old[:1]) == (1,) and tuple(new) == tuple(old[1:])
        return dataclasses.replace(v, lead=False) if ok else OTHER
    shape = a.shape_of(v) if shape is None else shape
    if len(shape) == 2 and eqn.name == "transpose" and v.laxis is None:
        return dataclasses.replace(v, flip=not v.flip) if tuple(
            eqn.params["permutation"]) == (1, 0) else OTHER
    if len(shape) != 1:
        return OTHER
    cur = 0 if v.laxis is None else v.laxis
    if eqn.name == "transpose":
        return dataclasses.replace(v, laxis=list(eqn.params["permutation"]).index(cur))
    if eqn.name == "broadcast_in_dim":
        dims = tuple(eqn.params["broadcast_dimensions"])
        ok = old[cur] == shape[0] and new[dims[cur]] == shape[0]
        return dataclasses.replace(v, laxis=dims[cur]) if ok else OTHER
    free_old, free_new = _unit_free(old), _unit_free(new)
    if [old[i] for i in free_old] == [new[i] for i in free_new] and cur in free_old:
        return dataclasses.replace(v, laxis=free_new[free_old.index(cur)])
    if shape[0] == 1 and int(np.prod(new)) == 1:   # one entry: it runs along the last axis
        return dataclasses.replace(v, laxis=len(new) - 1)
    return OTHER


def _same(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """``convert_element_type`` / ``copy``: parameters and the input pass through, hidden
    values get the op in their activation program."""
    v = vals[0]
    if v.kind in ("param", "input"):
        return [v]
    return _elementwise(a, eqn, vals)


def _kernel_side(a: Analysis, vals: list[Val]) -> int | None:
    """Which operand of a ``dot_general`` is a 2-D parameter kernel (0 or 1), if exactly one."""
    sides = [i for i, v in enumerate(vals)
             if v.kind == "param" and not v.lead and len(a.shape_of(v)) == 2]
    return sides[0] if len(sides) == 1 else None


def _dot_general(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
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
        what = ("a batch dimension that is no ensemble (the trace reads a batched matrix "
                "product member by member when its batch axis runs along axis 0 of the "
                "parameter leaves it reaches, whatever vmap made it: jax.vmap, nnx.vmap, "
                "eqx.filter_vmap; this one runs along x's coordinates, a layer's neurons or "
                "another axis of a leaf, as a KAN's per-edge einsum does); fix: stack an "
                "ensemble's members along axis 0 of every leaf and map that axis (in_axes=0); "
                "a per-edge function (a KAN's splines) has no neurons act(h K + b) to compress "
                "and is kept whole"
                if lb or rb else
                "a constant matrix" if any(v.kind == "const" for v in vals) else
                "a kernel computed from parameters that is not leaf * per-output scale (e.g. "
                "v / ||v||, W + low-rank: no leaf is linear in its rows)"
                if any(v.kind in ("other", "fixed") for v in vals) else
                "operands other than (value, parameter kernel)")
        a.pin(vals, f"`dot_general` with {what}", eqn.line)
        if not any(v.groups for v in vals):
            a.notes.append((f"`dot_general` with {what}", eqn.line))
        return [OTHER]
    kern, data = vals[side], vals[1 - side]
    kc, dc = (lc[0], rc[0]) if side == 0 else (rc[0], lc[0])
    leaf_axis = (1 - kc) if kern.flip else kc
    free = 1 - leaf_axis
    lead = 0 if kern.index is None else 1          # a slice: axes of the whole stacked leaf
    data_ndim = len(eqn.in_shapes[1 - side])
    axis = 0 if side == 0 else data_ndim - 1
    contracted = (kern.leaf, leaf_axis + lead, kern.index)
    left = (kern.leaf, free + lead, kern.index)
    if (data.kind == "hidden" and data.dual) or (data.kind == "const"
                                                   and contracted in a.produced):
        return _dual_dot(a, eqn, kern, data, dc, contracted, left, axis)
    if data.kind == "const" and left in a.seeds and left not in a.produced:
        return [Val("seed", axis=axis, shape=(int(a.shape_of(kern)[free]),),
                    rows=((kern.leaf, free + lead, kern.index),))]
    if data.kind == "seed":
        return [OTHER]
    if data.kind == "hidden":
        if data.axis != dc:
            a.pin([data], "`dot_general` contracts an axis other than its neurons; fix: "
                          "contract the neurons' axis (h @ K, the neurons last in h)",
                  eqn.line)
        elif kern.scale is not None and kern.scale[1] == leaf_axis:
            a.pin([data], "its kernel is v * (a scale per row): no leaf is linear in its "
                      "rows; fix: fold the scale into one kernel leaf (K = v * g) before "
                      "compressing", eqn.line)
        else:
            a.consume(eqn, data, eqn.ins[1 - side], kern.leaf, leaf_axis + lead, dc,
                      kern.index)
    source = ("input" if data.kind == "input" else
              data.single() + 1 if data.kind == "hidden" and data.single() is not None
              else "other")
    width = int(a.shape_of(kern)[free])
    # a constant site: its features would be taken on the domain of x, on which it does not
    # depend (the group is pinned when every site is: close_constants)
    constant = data.kind == "const" or (data.kind == "hidden" and bool(data.groups) and all(
        a.groups[h].constant for h in data.groups))
    g = a.new_group(width=width, kernel=kern.leaf, kernel_axis=free + lead, source=source,
                    stack=kern.index, line=eqn.line, constant=constant)
    if kern.scale is not None and kern.scale[1] == free:
        a.add_scale(g, kern.scale[0], kern.index)     # g: one per neuron, sliced with them
    elif kern.scale is not None:
        a.pin_group(g, "its kernel is v * (a scale per input): kept whole; fix: fold the "
                       "scale into one kernel leaf (K = v * g) before compressing", eqn.line)
    return [Val("hidden", axis=axis, blocks=((g, width),), pre=True, node=0)]


def _dual_dot(a: Analysis, eqn: Eqn, kern: Val, data: Val, dc: int, contracted, left,
              axis: int) -> list[Val]:
    """``c K^T``: a kernel applied transposed, its producing axis contracted with a
    cotangent of its own group (``jax.grad`` inside ``fn``; or a constant, the seed, when the
    kernel's ``h K`` is computed too). The same neurons at another site, nothing new: the
    result is the cotangent of the groups its rows read (a dual value of their blocks), or,
    for rows that read ``x``, the derivative by the input (a function of ``x``)."""
    g = a.produced.get(contracted)
    if data.kind == "hidden" and (g is None or data.single() is None or data.axis != dc
                                  or a.find(g) != a.find(data.single())):
        a.pin([data], "`dot_general` of a cotangent (a derivative taken inside fn) with a "
                      f"kernel that does not produce its neurons (or along another axis)"
                      f"{DERIV_FIX}", eqn.line)
        return [OTHER]
    if kern.scale is not None and kern.scale[1] != contracted[1] - (kern.index is not None):
        a.pin([data], "its kernel is v * (a scale per input), applied transposed; fix: "
                      "fold the scale into one kernel leaf (K = v * g) before compressing",
              eqn.line)
        return [OTHER]
    a.explain(kern.leaf, kern.index)
    a.derivative = True
    blocks = a.layouts.get(left)
    if blocks is None or not any(h >= 0 for h, _ in blocks):
        a.exits.append(eqn.outs[0])
        return [OTHER]
    return [Val("hidden", axis=axis, blocks=blocks, dual=True)]


def _latent(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
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
        a.consume(eqn, t, eqn.ins[1 - side], grp.kernel, grp.kernel_axis, t.axis, grp.stack)
        if grp.bias is not None:
            a.consume(eqn, t, eqn.ins[1 - side], grp.bias, 0 if grp.stack is None else 1,
                      t.axis, grp.stack)
        a.pin_group(gb, f"its neurons are the latent rows read by group(s) "
                f"{', '.join(str(g + 1) for g in t.groups)} (re-weighted there)", eqn.line)
        return [OTHER]
    a.pin(vals, "`dot_general` of two hidden values (neither is x K + b of one group); "
                "fix: end one of them with a linear layer, x K + b with no activation "
                "(DeepONet's branch), whose rows then take the other's neurons", eqn.line)
    return [OTHER]


def _concatenate(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """Hidden values joined along their neuron axis: the blocks in order (a non-hidden operand,
    e.g. the input of a skip connection, is a block of no group)."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    dim = eqn.params["dimension"]
    if not any(v.kind == "hidden" for v in vals):
        return [OTHER]
    if any(v.kind == "hidden" and v.axis != dim for v in vals):
        a.pin(vals, "concatenated along an axis other than its neurons (e.g. stacked as the "
                    "per-iteration outputs ys of a scan); fix: concatenate along the neurons' "
                    "axis (the last), or use the scan's carry", eqn.line)
        return [OTHER]
    blocks: list[tuple[int, int]] = []
    for v, shape in zip(vals, eqn.in_shapes, strict=True):
        blocks += list(v.blocks) if v.kind == "hidden" else [(-1, int(shape[dim]))]
    return [Val("hidden", axis=dim, blocks=tuple(blocks))]


def _stack(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """``jnp.stack`` along a new axis (the members of a ``jax.vmap`` ensemble, the ``ys`` of a
    scan): constants fold, parameters and values of ``x`` give a value of ``x``; hidden values
    are pinned (their neurons would be read across the new axis)."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    if any(v.kind == "hidden" for v in vals):
        a.pin(vals, f"stacked along a new axis by `{eqn.name}` (read as neurons of none: "
                    "the members of an ensemble are joined so for an operation over them, "
                    "their mean); fix: none needed for the members' output layer; join other "
                    "hidden values along their neurons' axis (concatenate), or stack the "
                    "parameters and vmap over them (an ensemble)", eqn.line)
    return [OTHER]


def _pinning(reason: str) -> Rule:
    def rule(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
        a.pin(vals, reason.format(name=eqn.name), eqn.line)
        return [OTHER] * len(eqn.outs)
    return rule


#: The rule of an elementwise primitive (for a user's own primitive, see :func:`register_rule`).
ELEMENTWISE: Rule = _elementwise

_define(_elementwise, "tanh", "logistic", "tan", "log", "log1p", "expm1", "erf_inv", "sqrt",
        "rsqrt", "cbrt", "asinh", "atan", "atanh", "asin", "acos", "acosh", "div", "pow",
        "atan2", "logaddexp")
_define(_elementwise, "sin", "cos", "exp", "exp2", "neg", "integer_pow", "erf", "erfc", "sinh",
        "cosh", "square", entire=True)
_define(_elementwise, "add", "sub", "mul", "add_any", entire=True, ties=True)
# kinks, jumps and comparisons
_define(_elementwise, "max", "min", "abs", "sign", "select_n", "ne", "eq", "lt", "le", "gt",
        "ge", "floor", "ceil", "round", "clamp", "and", "or", "not", "is_finite", "rem",
        analytic=False)
_define(_view, "reshape", "broadcast_in_dim", "transpose", "squeeze", "expand_dims")
_define(_same, "convert_element_type", "copy", "copy_p", entire=True)
_define(_dot_general, "dot_general")
_define(_concatenate, "concatenate")
_define(_stack, "stack")


def _reduction(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """A reduction pins what it reads; over a value's neurons (a norm or mean over the
    channels, as LayerNorm computes on a residual stream) it says so: the result is not linear
    in them, so no reader's rows can be re-weighted."""
    axes = tuple(eqn.params.get("axes", (eqn.params.get("axis", -1),)))
    for v in vals:
        over = v.kind == "hidden" and v.axis in axes
        a.pin([v], f"feeds a reduction `{eqn.name}`" + (
            " over its neurons (a norm or mean over the channels, e.g. LayerNorm: not linear "
            "in them; fix: none inside the layer, the groups around it still compress; "
            "without the normalisation the layer compresses)" if over else
            "; fix: reduce the network's output, or its neurons through a kernel (h @ K)"),
            eqn.line)
    return [OTHER] * len(eqn.outs)


_define(_reduction, "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
        "cumsum", "reduce_and", "reduce_or")
_SLICED = ("is sliced or indexed by `{name}`; fix: slice the network's output or its "
           "parameters (a kernel's columns), not its hidden values")
_define(_pinning(_SLICED), "gather", "dynamic_update_slice",
        "scatter", "scatter-add", "pad", "rev")


def stack_index(a: Analysis, eqn: Eqn, vals: list[Val]) -> int | None:
    """The layer ``i`` when ``eqn`` takes slice ``i`` of a parameter leaf along its axis 0,
    whole along the others (``slice``, as an unrolled ``scan`` reads its stacked ``xs``, or
    ``dynamic_slice`` at a constant index, as ``fori_loop`` indexes ``W[i]``), else ``None``."""
    v = vals[0] if vals else OTHER
    if (eqn.name not in ("slice", "dynamic_slice") or v.kind != "param" or v.index is not None
            or v.flip or v.laxis is not None or v.scale is not None):
        return None
    shape = tuple(a.leaf_shapes[v.leaf])
    if not shape or tuple(eqn.out_shapes[0]) != (1,) + shape[1:]:
        return None
    if eqn.name == "slice":
        start = tuple(eqn.params["start_indices"])
        strides = eqn.params.get("strides")
        if any(start[1:]) or (strides is not None and any(s != 1 for s in strides)):
            return None
        return int(start[0])
    if any(w.kind != "const" for w in vals[1:]):
        return None
    starts = [int(np.asarray(w.value)) for w in vals[1:]]
    if any(starts[1:]):       # (clamped into range, as dynamic_slice does)
        return None
    return min(max(starts[0], 0), shape[0] - 1)


def _block_slice(eqn: Eqn, v: Val):
    """The blocks a ``slice`` of a hidden value keeps when it cuts its neuron axis at block
    boundaries (unit strides, every other axis whole): the backward pass of a concatenation
    (``[h, x]`` of a skip) splits the cotangent so. ``None`` for any other slice."""
    if eqn.name != "slice" or v.kind != "hidden" or v.node is not None and not v.dual:
        return None
    start, limit = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params.get("strides")
    shape = eqn.in_shapes[0]
    if (strides is not None and any(s != 1 for s in strides)) or any(
            (start[i], limit[i]) != (0, shape[i]) for i in range(len(shape)) if i != v.axis):
        return None
    return _blocks_between(v, start[v.axis], limit[v.axis])


def _blocks_between(v: Val, lo: int, hi: int):
    """The blocks of ``v`` from ``lo`` to ``hi`` along its neuron axis, or ``None`` when that
    range cuts a block or holds none."""
    kept, off = [], 0
    for g, size in v.blocks:
        if lo <= off and off + size <= hi:
            kept.append((g, size))
        elif off < hi and off + size > lo:
            return None                          # cuts a block
        off += size
    if sum(s for _, s in kept) != hi - lo or not kept:
        return None
    return tuple(kept)


def _split(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """``split`` of a hidden value along its neuron axis at block boundaries (the backward
    pass of a concatenation, ``[h, x]``): each part keeps its blocks (a part of no group's
    block, the input's, is no hidden value); any other split pins what it reads."""
    v = vals[0]
    if all(w.kind == "const" for w in vals):
        return _const_eval(eqn, vals)
    if v.kind == "hidden" and eqn.params["axis"] == v.axis and (v.node is None or v.dual):
        parts, lo = [], 0
        for size in eqn.params["sizes"]:
            parts.append(_blocks_between(v, lo, lo + size))
            lo += size
        if all(p is not None for p in parts):
            return [dataclasses.replace(v, blocks=p, pre=False, node=None)
                    if any(g >= 0 for g, _ in p) else OTHER for p in parts]
    a.pin(vals, _SLICED.format(name=eqn.name), eqn.line)
    return [OTHER] * len(eqn.outs)


def _slice(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """``slice`` / ``dynamic_slice``: slice ``i`` of a stacked parameter leaf (a layer of a
    ``scan``) is followed as that layer's parameter; a slice computed from parameters alone is
    a fixed value; any other slice pins what it reads."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    index = stack_index(a, eqn, vals)
    if index is not None:
        return [dataclasses.replace(vals[0], index=index, lead=True)]
    blocks = _block_slice(eqn, vals[0])
    if blocks is not None:
        return [dataclasses.replace(vals[0], blocks=blocks, pre=False, node=None)]
    if all(v.kind in ("param", "const", "fixed") for v in vals):
        return [Val("fixed", shape=tuple(eqn.out_shapes[0]))]
    a.pin(vals, _SLICED.format(name=eqn.name), eqn.line)
    return [OTHER]


_define(_slice, "slice", "dynamic_slice")
_define(_split, "split")


def _random(a: Analysis, eqn: Eqn, vals: list[Val]) -> list[Val]:
    """JAX's random number generation: a ``fn`` that draws (dropout, noise) is not one function
    of its inputs, so it is refused with its line."""
    raise ValueError(
        f"trace: fn draws random numbers (`{eqn.name}` at {eqn.line}): dropout or noise inside "
        "fn makes it a different function at every key, and compression needs one; trace the "
        "deterministic function (dropout off: nnx's model.eval(), linen's "
        "deterministic=True, Equinox's inference=True)")


_define(_random, "random_seed", "random_bits", "random_wrap", "random_unwrap", "random_fold_in",
        "random_split", "threefry2x32", "rng_bit_generator", "rng_uniform")


def interpret(flat: list[Eqn], a: Analysis) -> None:
    """Run every equation's rule; an unknown primitive pins what it touches and is recorded
    (random number generation is refused by its rule, before anything is counted)."""
    for eqn in flat:
        vals = [a.val(o) for o in eqn.ins]
        entry = RULES.lookup(eqn.primitive)
        if entry is None:
            if all(v.kind == "const" for v in vals):   # (``iota``: no operand at all)
                outs = _const_eval(eqn, vals)
            else:
                a.unknown.append((eqn.name, eqn.line))
                a.pin(vals, f"feeds `{eqn.name}`, a primitive without a rule; fix: "
                            f"register one, jaxcompress.graph.register_rule({eqn.name!r}, "
                            "rule) (an elementwise analytic one: rule = "
                            "jaxcompress.graph.rules.ELEMENTWISE)", eqn.line)
                outs = [OTHER] * len(eqn.outs)
        else:
            outs = entry.rule(a, eqn, vals)
        _count_reads(a, vals, outs)
        for o, v in zip(eqn.outs, outs, strict=True):
            a.vals[o] = v


def _count_reads(a: Analysis, vals: Sequence[Val], outs: Sequence[Val]) -> None:
    """Count a read of every parameter operand the equation uses, not of one it only passes on
    as a parameter (a view, a slice of a stacked leaf, ``g * v``: the equation that uses that
    value counts)."""
    passed = {v.leaf for v in outs if v.kind == "param"} | {
        v.scale[0] for v in outs if v.kind == "param" and v.scale is not None}
    for v in vals:
        if v.kind != "param":
            continue
        for leaf in [v.leaf] + ([] if v.scale is None else [v.scale[0]]):
            if leaf not in passed:
                a.uses[(leaf, v.index)] = a.uses.get((leaf, v.index), 0) + 1
