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
from jax._src import core as jax_core
from jax._src import source_info_util

from jaxcompress.activations import get_activation, register_activation, registered_activations
from jaxcompress.compression import CompressInfo, FrontEnd, compress
from jaxcompress.domains import Ball, check_domain
from jaxcompress.evaluate import error_points
from jaxcompress.features import DerivativeFeatures
from jaxcompress.methods import BestOf, Method
from jaxcompress.mlp import apply

__all__ = ["RULES", "Compressed", "Group", "Network", "trace"]

# ------------------------------------------------------------------------------------------------
# The flat program: the jaxpr with its calls inlined
# ------------------------------------------------------------------------------------------------

#: Primitives whose sub-program is inlined, and the parameter that holds it.
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
          "custom_vjp_call_jaxpr": "fun_jaxpr", "checkpoint": "jaxpr", "remat": "jaxpr",
          "remat2": "jaxpr"}


@dataclasses.dataclass(frozen=True)
class _Const:
    """A value known at trace time (a literal or a closed-over constant)."""

    value: np.ndarray


@dataclasses.dataclass(frozen=True)
class _Eqn:
    """One equation of the flat program: operands are value ids (ints) or :class:`_Const`."""

    primitive: Any
    ins: tuple
    outs: tuple[int, ...]
    params: dict
    line: str
    in_shapes: tuple[tuple[int, ...], ...] = ()

    @property
    def name(self) -> str:
        return self.primitive.name


def _line(eqn) -> str:
    """The user's source line of an equation (JAX's own frames filtered out)."""
    try:
        return source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001 - source info is best effort; the op is still named
        return ""


def _flatten(jaxpr, consts: Sequence, args: Sequence, out: list[_Eqn], counter: list[int],
             where: str = "") -> list:
    """Append ``jaxpr``'s equations to ``out`` (calls inlined); returns its outputs' operands.

    An inlined equation without a user frame of its own (the inside of ``jax.nn.relu``) gets the
    line of the call it came from, ``where``."""
    env: dict = {}

    def read(v):
        if isinstance(v, jax_core.Literal):
            return _Const(np.asarray(v.val))
        return env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = c if isinstance(c, (int, _Const)) else _Const(np.asarray(c))
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        sub = eqn.params.get(_CALLS.get(eqn.primitive.name, ""))
        if sub is not None:
            inner, inner_consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())
            res = _flatten(inner, inner_consts, ins, out, counter, _line(eqn) or where)
            for v, r in zip(eqn.outvars, res, strict=True):
                env[v] = r
            continue
        outs = []
        for v in eqn.outvars:
            counter[0] += 1
            env[v] = counter[0]
            outs.append(counter[0])
        shapes = tuple(tuple(getattr(v.aval, "shape", ())) for v in eqn.invars)
        out.append(_Eqn(eqn.primitive, tuple(ins), tuple(outs), dict(eqn.params),
                        _line(eqn) or where or "unknown line", shapes))
    return [read(v) for v in jaxpr.outvars]


# ------------------------------------------------------------------------------------------------
# Abstract values and neuron groups
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Val:
    """What the analysis knows of one value.

    kind: ``"const"`` (``value``), ``"param"`` (leaf ``leaf``; ``flip`` for a transposed 2-D
    leaf, ``bias`` for a 1-D leaf broadcast along the last axis), ``"input"`` (``x`` itself),
    ``"pre"`` (group ``group``'s ``x K`` or ``x K + b``), ``"act"`` (node ``node`` of group
    ``group``'s activation program) or ``"other"`` (anything else).
    """

    kind: str
    value: np.ndarray | None = None
    leaf: int = -1
    flip: bool = False
    bias: bool = False
    group: int = -1
    node: int = 0


_OTHER = _Val("other")


@dataclasses.dataclass(eq=False)
class Group:
    """One neuron group: the last axis of ``sigma(x K + b)``.

    Attributes:
      index: 1-based, in program order.
      width: the number of neurons.
      kernel: the producing kernel's leaf index; ``out_in`` when it is laid out ``(out, in)``.
      bias: the bias leaf's index, or ``None``.
      source: ``"input"`` (reads ``x``), the index of the group whose activation it reads, or
        ``"other"``.
      program: the activation as elementwise equations on node 0 (``u``): ``(primitive, params,
        operands)`` with operands ``("n", node)`` or ``("c", value)``; node ``i + 1`` is
        equation ``i``'s result.
      consumers: ``(leaf, out_in)`` of the kernels that read the activation.
      consumed_node: the program node the consumers read.
      pins: ``(reason, source line)`` of everything that keeps the group whole.
      kinks: ``(primitive, source line)`` of the non-analytic primitives of the activation.
    """

    index: int
    width: int
    kernel: int
    out_in: bool
    bias: int | None = None
    source: Any = "other"
    program: list = dataclasses.field(default_factory=list)
    consumers: list = dataclasses.field(default_factory=list)
    consumed_node: int | None = None
    pins: list = dataclasses.field(default_factory=list)
    kinks: list = dataclasses.field(default_factory=list)

    @property
    def pinned(self) -> bool:
        return bool(self.pins)

    def pin(self, reason: str, line: str) -> None:
        if (reason, line) not in self.pins:
            self.pins.append((reason, line))

    def activation_fn(self) -> Callable[[jax.Array], jax.Array]:
        """The elementwise function ``u -> sigma(u)`` of the program (ending at the consumed
        node), built from the traced primitives."""
        program, end = list(self.program), self.consumed_node or 0

        def sigma(u):
            nodes = [u]
            for prim, params, operands in program[:end]:
                args = [nodes[r] if kind == "n" else jnp.asarray(r, u.dtype)
                        for kind, r in operands]
                nodes.append(prim.bind(*args, **params))
            return nodes[end]

        return sigma

    def expression(self, *, digits: int | None = None) -> str:
        """The activation as text, e.g. ``sin(mul(30.0, u))`` (constants in full, or to
        ``digits`` significant digits; up to the consumed node, or the last one when nothing
        consumes it)."""
        end = len(self.program) if self.consumed_node is None else self.consumed_node
        texts = ["u"]
        for prim, params, operands in self.program[:end]:
            args = [texts[r] if kind == "n" else _const_text(r, digits) for kind, r in operands]
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

    def val(self, operand) -> _Val:
        if isinstance(operand, _Const):
            return _Val("const", value=operand.value)
        return self.vals[operand]

    def pin_all(self, vals: Sequence[_Val], reason: str, line: str) -> None:
        for v in vals:
            if v.kind in ("pre", "act"):
                self.groups[v.group].pin(reason, line)


Rule = Callable[[_Analysis, _Eqn, list], list]

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


def _const_eval(eqn: _Eqn, vals: list[_Val]) -> list[_Val]:
    res = eqn.primitive.bind(*[v.value for v in vals], **eqn.params)
    res = res if eqn.primitive.multiple_results else [res]
    return [_Val("const", value=np.asarray(r)) for r in res]


def _elementwise(a: _Analysis, eqn: _Eqn, vals: list[_Val]) -> list[_Val]:
    """Elementwise primitives: constants fold; operations on one group's values extend its
    activation program; a parameter bias added to ``x K`` completes the pre-activation."""
    if all(v.kind == "const" for v in vals):
        return _const_eval(eqn, vals)
    hidden = [v for v in vals if v.kind in ("pre", "act")]
    groups = sorted({v.group for v in hidden})
    if len(groups) > 1:
        for g in groups:
            others = ", ".join(str(a.groups[h].index) for h in groups if h != g)
            a.groups[g].pin(f"`{eqn.name}` with group {others} (residual / skip)", eqn.line)
        return [_OTHER] * len(eqn.outs)
    if not groups:
        return [_OTHER] * len(eqn.outs)
    g = a.groups[groups[0]]
    params = [v for v in vals if v.kind == "param"]
    if (eqn.name == "add" and len(params) == 1 and len(hidden) == 1 and hidden[0].kind == "pre"
            and g.bias is None and not g.program and params[0].bias
            and a.leaf_shapes[params[0].leaf] == (g.width,)):
        g.bias = params[0].leaf
        return [_Val("pre", group=g.index - 1)]
    rest = [v for v in vals if v.kind not in ("pre", "act", "const")]
    if rest:
        what = ("a per-neuron parameter" if rest[0].kind == "param" else
                "the input" if rest[0].kind == "input" else "a value the analysis does not follow")
        g.pin(f"`{eqn.name}` of its activation with {what} (phase 1: constants only)", eqn.line)
        return [_OTHER] * len(eqn.outs)
    if any(v.kind == "const" and np.size(v.value) != 1 for v in vals):
        g.pin(f"`{eqn.name}` with a non-scalar constant (not one function of each neuron)",
              eqn.line)
        return [_OTHER] * len(eqn.outs)
    if g.consumers:
        g.pin(f"`{eqn.name}` after its activation is consumed (the value is used twice)",
              eqn.line)
        return [_OTHER] * len(eqn.outs)
    operands = [("n", v.node if v.kind == "act" else 0) if v.kind in ("pre", "act")
                else ("c", np.asarray(v.value).reshape(())) for v in vals]
    if eqn.name in NON_ANALYTIC:
        g.kinks.append((eqn.name, eqn.line))
    g.program.append((eqn.primitive, eqn.params, operands))
    return [_Val("act", group=g.index - 1, node=len(g.program))]


def _view(a: _Analysis, eqn: _Eqn, vals: list[_Val]) -> list[_Val]:
    """``reshape`` / ``broadcast_in_dim`` / ``transpose`` / ``squeeze`` / ``expand_dims``:
    parameter views (a bias broadcast along the last axis, a transposed kernel) are followed;
    hidden values reshaped are pinned."""
    v = vals[0]
    if all(w.kind == "const" for w in vals):
        return _const_eval(eqn, vals)
    if v.kind == "param":
        shape = a.leaf_shapes[v.leaf]
        if eqn.name == "transpose" and len(shape) == 2 and tuple(eqn.params["permutation"]) == (
                1, 0):
            return [dataclasses.replace(v, flip=not v.flip)]
        if eqn.name in ("reshape", "broadcast_in_dim") and len(shape) == 1:
            dims = eqn.params.get("broadcast_dimensions")
            new = eqn.params.get("shape") or eqn.params.get("new_sizes")
            if new and new[-1] == shape[0] and (dims is None or tuple(dims) == (len(new) - 1,)):
                return [dataclasses.replace(v, bias=True)]
        return [_Val("param", leaf=v.leaf, flip=v.flip)] if eqn.name == "copy" else [_OTHER]
    a.pin_all(vals, f"reshaped by `{eqn.name}`", eqn.line)
    return [_OTHER]


def _same(a: _Analysis, eqn: _Eqn, vals: list[_Val]) -> list[_Val]:
    """``convert_element_type`` / ``copy``: parameters and the input pass through, hidden
    values get the op in their activation program."""
    v = vals[0]
    if v.kind in ("param", "input"):
        return [v]
    return _elementwise(a, eqn, vals)


def _dot_general(a: _Analysis, eqn: _Eqn, vals: list[_Val]) -> list[_Val]:
    """``h @ K``: a new group whose kernel is the parameter ``K`` and whose source is ``h``."""
    lhs, rhs = vals
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    shape = a.leaf_shapes[rhs.leaf] if rhs.kind == "param" else ()
    lhs_rank = len(eqn.in_shapes[0])
    simple = (rhs.kind == "param" and len(shape) == 2 and not lb and not rb
              and tuple(lc) == (lhs_rank - 1,) and len(rc) == 1)
    if not simple:
        what = "a constant matrix" if rhs.kind == "const" else "operands other than (h, kernel)"
        a.pin_all(vals, f"`dot_general` with {what}", eqn.line)
        return [_OTHER]
    out_in = (rc[0] == 1) != rhs.flip
    if lhs.kind == "pre":
        a.groups[lhs.group].pin("no elementwise activation before the next kernel", eqn.line)
    if lhs.kind in ("pre", "act"):
        g = a.groups[lhs.group]
        if g.consumers:
            g.pin("consumed by more than one kernel", eqn.line)
        g.consumers.append((rhs.leaf, out_in))
        g.consumed_node = lhs.node if lhs.kind == "act" else 0
        source = lhs.group + 1
    else:
        source = "input" if lhs.kind == "input" else "other"
    width = shape[0] if out_in else shape[1]
    a.groups.append(Group(index=len(a.groups) + 1, width=int(width), kernel=rhs.leaf,
                          out_in=out_in, source=source))
    return [_Val("pre", group=len(a.groups) - 1)]


def _pinning(reason: str) -> Rule:
    def rule(a: _Analysis, eqn: _Eqn, vals: list[_Val]) -> list[_Val]:
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
RULES["concatenate"] = _pinning("feeds a `concatenate` (skip connection)")
for _n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
           "cumsum", "reduce_and", "reduce_or"):
    RULES[_n] = _pinning("feeds a reduction `{name}`")
for _n in ("slice", "dynamic_slice", "gather", "dynamic_update_slice", "scatter", "scatter-add",
           "split", "pad", "rev"):
    RULES[_n] = _pinning("is sliced or indexed by `{name}`")


def _interpret(flat: list[_Eqn], a: _Analysis) -> None:
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


# ------------------------------------------------------------------------------------------------
# The activation of a chain: a registered one, or one registered from the traced program
# ------------------------------------------------------------------------------------------------

#: Where the traced activation is compared with the registered ones.
MATCH_GRID = np.concatenate([np.linspace(-6.0, 6.0, 241), [-20.0, -11.0, 11.0, 20.0]])


def _primitive_names(fn: Callable, u: jax.Array) -> list[str]:
    flat: list[_Eqn] = []
    closed = jax.make_jaxpr(fn)(u)
    _flatten(closed.jaxpr, closed.consts, [0], flat, [0])
    return sorted(e.name for e in flat if e.name not in ("copy", "copy_p"))


def match_activation(group: Group, dtype) -> tuple[str | None, str]:
    """The registered activation equal to ``group``'s traced program, and how it was matched.

    Equal means: within ``64 eps (1 + |sigma|)`` at every point of :data:`MATCH_GRID` (so
    ``jax.nn.gelu``'s tanh form is not taken for the exact GELU: they differ by 5e-4);
    "structurally" is added when the registered function traces to the same primitives.
    Returns ``(None, "")`` when none matches.
    """
    u = jnp.asarray(MATCH_GRID, dtype)
    sigma = group.activation_fn()
    mine = np.asarray(sigma(u), np.float64)
    if not np.all(np.isfinite(mine)):
        return None, ""
    tol = 64 * float(jnp.finfo(dtype).eps)
    prims = sorted(p.name for p, _, _ in group.program[: group.consumed_node or 0]
                   if p.name not in ("copy", "copy_p"))
    for name in registered_activations():
        act = get_activation(name)
        ref = np.asarray(act.fn(u), np.float64)
        if ref.shape == mine.shape and np.all(np.abs(mine - ref) <= tol * (1 + np.abs(ref))):
            same = _primitive_names(act.fn, u) == prims
            return name, "numerically and structurally" if same else "numerically"
    return None, ""


def _kink_name(expr: str) -> str:
    return " (relu)" if expr in ("max(u, 0.0)", "max(0.0, u)") else ""


def _refusing_series(expr: str, kinks: Sequence[tuple[str, str]]):
    def series(u0, k):
        prim, line = kinks[0]
        raise ValueError(f"the traced activation {expr} uses `{prim}` (at {line}), which is not "
                         "analytic: it has no Taylor series; use jc.collocation(k) or "
                         "jc.data_matching(x, order=k)")
    return series


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
    if group.kinks:
        for m in methods:
            if isinstance(m.features, DerivativeFeatures):
                prim, line = group.kinks[0]
                raise ValueError(
                    f"{where}: hidden layer {group.index}'s activation {expr}{_kink_name(expr)} "
                    f"uses `{prim}` at {line}, which is not analytic; {m.describe()} needs its "
                    "Taylor series. Use jc.collocation(k) or jc.data_matching(x, order=k) "
                    "(values only), or an analytic activation (jax.nn.softplus, jax.nn.gelu)")
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


def _chain(groups: Sequence[Group], outputs: Sequence[_Val], uses: dict[int, int],
           paths: Sequence[str]) -> tuple[list[Group], list[str]]:
    """The hidden groups of a chain ``x -> g_1 -> ... -> g_L -> output``, or why it is not one
    (including a kernel or bias leaf that the program also reads elsewhere: writing a smaller
    one back would change that other use)."""
    why = []
    if not groups:
        return [], ["no dot_general with a parameter kernel"]
    for leaf in [g.kernel for g in groups] + [g.bias for g in groups if g.bias is not None]:
        if uses.get(leaf, 0) > 1:
            why.append(f"the leaf {paths[leaf]} is read {uses[leaf]} times (shared weights)")
    last = groups[-1]
    if len(outputs) != 1 or outputs[0].kind != "pre" or outputs[0].group != last.index - 1:
        why.append("the output is not the last kernel's x K + b (one array)")
    if groups[0].source != "input":
        why.append("group 1 does not read the input x itself")
    for g, nxt in zip(groups[:-1], groups[1:], strict=True):
        if nxt.source != g.index:
            why.append(f"group {nxt.index} does not read group {g.index}'s activation")
        for reason, line in g.pins:
            why.append(f"group {g.index} is pinned: {reason} ({line})")
        if not g.pins and g.consumers != [(nxt.kernel, nxt.out_in)]:
            why.append(f"group {g.index} is not consumed by group {nxt.index}'s kernel alone")
        if not g.pins and not g.consumed_node:
            why.append(f"group {g.index} has no activation")
    hidden = list(groups[:-1])
    exprs = {g.expression() for g in hidden if not g.pins}
    if len(exprs) > 1:
        why.append("the hidden layers' activations differ (" + "; ".join(sorted(exprs)) + "): "
                   "phase 1 lowers a chain with one activation")
    return hidden, why


@dataclasses.dataclass(frozen=True)
class Compressed:
    """The result of compressing a traced :class:`Network`.

    Attributes:
      params: the user's pytree, same structure, smaller leaves.
      fn: the user's function ``fn(params, x)``.
      lowered: the compressed network in the params convention (what the driver returned).
      activation: the registered activation name the driver used.
      polymorphic: whether ``fn`` runs on the smaller ``params`` (checked on the domain's error
        points against ``lowered``); else ``why`` says what ``fn`` raised.
    """

    params: Any
    fn: Callable
    lowered: list
    activation: str
    polymorphic: bool
    why: str = ""

    def __call__(self, x: jax.Array) -> jax.Array:
        """The compressed function: ``fn(params, x)`` when ``fn`` accepts the smaller leaves,
        else the lowered chain (the same function, checked at compression)."""
        if self.polymorphic:
            return self.fn(self.params, x)
        return apply(self.lowered, x, activation=self.activation)


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
      why_not: why the network is not a chain that :func:`jaxcompress.compress` can lower.
    """

    fn: Callable
    params: Any
    x: jax.ShapeDtypeStruct
    paths: tuple[str, ...]
    groups: tuple[Group, ...]
    unknown: tuple[tuple[str, str], ...]
    hidden: tuple[Group, ...]
    why_not: tuple[str, ...]

    @property
    def compressible(self) -> tuple[Group, ...]:
        """The hidden groups :func:`jaxcompress.compress` compresses (all or none: a chain)."""
        return () if self.why_not else self.hidden

    def _leaves(self) -> list:
        return jax.tree_util.tree_leaves(self.params)

    def lower(self) -> list[dict[str, jax.Array]]:
        """The chain in the params convention ``[{"kernel": (in, out), "bias": (out,)}]``."""
        if self.why_not:
            raise ValueError("compress: the traced network is not a chain that phase 1 "
                             "lowers:\n  " + "\n  ".join(self.why_not) + "\nprint(net) shows "
                             "every group.")
        leaves, out = self._leaves(), []
        for g in self.groups:
            kernel = jnp.asarray(leaves[g.kernel])
            kernel = kernel.T if g.out_in else kernel
            bias = (jnp.zeros((g.width,), kernel.dtype) if g.bias is None
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

    def compress(self, method, *, domain=None) -> tuple[Compressed, CompressInfo]:
        """:func:`jaxcompress.compress` on the lowered chain, written back into the pytree."""
        where = "compress"
        if not isinstance(method, (Method, BestOf)):
            raise TypeError(f"{where}: a traced network needs a method (e.g. "
                            f"jc.collocation(k)), got {type(method).__name__} {method!r:.60}")
        lowered = self.lower()
        dtype = jnp.result_type(lowered[0]["kernel"])
        methods = method.methods if isinstance(method, BestOf) else (method,)
        names = {activation_for(g, dtype, methods, where) for g in self.hidden}
        (name,) = names
        domain = Ball(self.x.shape[-1], 1.0) if domain is None else domain
        check_domain(domain, self.x.shape[-1], where, dtype)
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
                              f"{type(e).__name__}: {str(e).splitlines()[0]:.200}"), info
        gap = float(np.max(np.abs(y_user - y_small)))
        if not gap <= _tol(y_small, dtype):
            raise RuntimeError(f"{where}: fn on the compressed params differs from the "
                               f"compressed chain by {gap:.3g}; the write-back is wrong")
        return Compressed(params, self.fn, small, name, True), info

    def __str__(self) -> str:
        return format_table(self)


def _leaf_text(net: Network, leaf: int, out_in: bool | None = None) -> str:
    lay = "" if out_in is None else (" (out,in)" if out_in else "")
    return f"{net.paths[leaf]}{lay}"


def format_table(net: Network) -> str:
    """The readable table of :meth:`Network.__str__`."""
    head = (f"jc.trace: {len(net.groups)} neuron groups ({len(net.compressible)} compressible) "
            f"of fn(params, x: {net.x.dtype}{list(net.x.shape)})")
    rows = [("group", "width", "produced by", "consumed by", "activation", "status")]
    for g in net.groups:
        prod = [_leaf_text(net, g.kernel, g.out_in)]
        prod += [] if g.bias is None else [_leaf_text(net, g.bias)]
        cons = ", ".join(_leaf_text(net, leaf, oi) for leaf, oi in g.consumers) or "-"
        act = g.expression(digits=6) if g.program else "-"
        if g.consumed_node and not g.pins:
            name, how = match_activation(g, net.x.dtype)
            act = f"{name} (matches {how})" if name else act
            if g.kinks and not name:
                act += (f" (not analytic: `{g.kinks[0][0]}` at {g.kinks[0][1]}; collocation or "
                        "data matching only)")
        if g.pins:
            status = "pinned: " + "; ".join(f"{r} [{line}]" for r, line in g.pins)
        else:
            status = "compressible" if g in net.compressible else "not compressed (see below)"
        rows.append((str(g.index), str(g.width), ", ".join(prod), cons, act, status))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [head] + ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  "
                      + r[5] for r in rows]
    for prim, line in dict.fromkeys(net.unknown):
        lines.append(f"unknown primitive `{prim}` at {line}: no rule, what it touches is pinned")
    if net.why_not:
        lines.append("not a chain phase 1 lowers:")
        lines += [f"  {w}" for w in net.why_not]
    else:
        sizes = [net.x.shape[-1]] + [g.width for g in net.groups]
        lines.append(f"chain: lowers to the driver as {sizes}")
    return "\n".join(lines)


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
    closed = jax.make_jaxpr(fn)(params, jax.ShapeDtypeStruct(shape.shape, shape.dtype))
    leaf_shapes = [tuple(np.shape(leaf)) for _, leaf in pairs]
    n = len(leaf_shapes)
    flat: list[_Eqn] = []
    outs = _flatten(closed.jaxpr, closed.consts, list(range(n + 1)), flat, [n])
    a = _Analysis(leaf_shapes)
    a.vals = {i: _Val("param", leaf=i) for i in range(n)}
    a.vals[n] = _Val("input")
    _interpret(flat, a)
    out_vals = [a.val(o) for o in outs]
    lines = {o: e.line for e in flat for o in e.outs}
    for o, v in zip(outs, out_vals, strict=True):
        a.pin_all([v], "reaches the output", lines.get(o, "output") if isinstance(o, int)
                  else "output")
    paths = tuple(jax.tree_util.keystr(p) for p, _ in pairs)
    hidden, why = _chain(a.groups, out_vals, a.uses, paths)
    return Network(fn=fn, params=params, x=shape, paths=paths,
                   groups=tuple(a.groups), unknown=tuple(a.unknown), hidden=tuple(hidden),
                   why_not=tuple(why))
