"""The network: the library's one representation, and its compressed form.

A :class:`Network` is neuron groups over the leaves of a parameter pytree: who produces each
group (the kernel's columns, the bias, per-neuron scales), which kernel rows read it, which groups
are tied into one index set, which are pinned and why. Front ends build it:
:meth:`Network.from_params` for a params list (the chain built directly, no tracing),
:func:`trace` for any JAX function, :func:`jaxcompress.trace_module` for a module; a
:class:`Compressed` result is a network again (:meth:`Compressed.as_network`). The driver
(:mod:`jaxcompress.driver`) sees only :meth:`Network.plan` (the records of
:mod:`jaxcompress.graph.plan`); this package imports nothing of the driver.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.activations import Activation, get_activation
from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.graph.analysis import (
    Analysis,
    chain_of,
    close_constants,
    close_duals,
    close_sets,
    close_stacks,
    pin_shared,
    seed_candidates,
)
from jaxcompress.graph.match import analytic_call, chain_activation
from jaxcompress.graph.plan import (
    ChainPlan,
    FlatFn,
    LayerLeaves,
    Plan,
    Producer,
    Reader,
    SetPlan,
    flat_output,
)
from jaxcompress.graph.rules import elementwise, interpret
from jaxcompress.graph.table import format_table
from jaxcompress.graph.values import Consumer, Group, Val
from jaxcompress.layer import CompressInfo
from jaxcompress.mlp import Params, apply, leaf_count
from jaxcompress.program import keep_numbers, trace_program
from jaxcompress.protocol import NetworkLike

__all__ = ["Compressed", "Network", "apply_fn", "compressed", "trace"]


@dataclasses.dataclass(frozen=True, eq=False)
class Network(NetworkLike):
    """A network as neuron groups (build with :func:`trace`, :func:`jaxcompress.trace_module` or
    :meth:`from_params`; ``print`` it for a table).

    Attributes:
      fn, params: the function ``fn(params, x)`` and its parameter pytree.
      x: the example input's shape and dtype.
      paths: :func:`jax.tree_util.keystr` of every parameter leaf (flatten order).
      groups: the :class:`~jaxcompress.graph.Group` records, in program order.
      unknown: ``(primitive, line)`` of every primitive without a rule.
      hidden: the hidden groups of a chain of dense layers (empty off a chain).
      why_not: why the network is not such a chain (its features then come from its program).
      layouts: per reader leaf, ``(leaf, axis, row blocks)``.
      signature: the traced program's primitives in order (``()`` for a params list).
      derivative: whether ``fn`` differentiates the network (``jax.grad`` of it inside
        ``fn``: its groups are also read through their cotangents; collocation and data
        features then take first derivatives at their points too).
      exits: the program's values where a cotangent leaves the network (its derivatives by
        ``x``; :meth:`~jaxcompress.graph.plan.Plan.contribution`).
      kind: ``"params"`` (a params list) or ``"traced"``.
      given: the activation of a params list (``None`` for a traced network: its own is found
        from its program, :attr:`activation`).
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
    derivative: bool = False
    exits: tuple[int, ...] = ()
    kind: str = "traced"
    given: Activation | None = None

    # -- structure ------------------------------------------------------------------------------

    @property
    def chain(self) -> bool:
        """Whether the network is a chain of dense layers with one activation."""
        return not self.why_not

    @property
    def leaves(self) -> list:
        return jax.tree_util.tree_leaves(self.params)

    @property
    def compressible(self) -> tuple[Group, ...]:
        """The groups :func:`jaxcompress.compress` compresses: a chain's hidden groups, or every
        group that is not pinned and is read by a kernel (with its tied set)."""
        if self.chain:
            return self.hidden
        read = {i for g in self.groups if g.consumers
                for i in (g.stacked or g.tied or (g.index,))}
        return tuple(g for g in self.groups if not g.pins and g.index in read)

    def sets(self) -> tuple[tuple[Group, ...], ...]:
        """The compressible groups by tied set (a set of one for an untied group; a stack, the
        layers of a ``scan`` that keep one width, as one entry), in program order of each
        one's first group."""
        out: dict[tuple[int, ...], list[Group]] = {}
        for g in self.compressible:
            out.setdefault(g.stacked or g.tied or (g.index,), []).append(g)
        return tuple(tuple(v) for v in out.values())

    def set_names(self) -> list[str]:
        """How messages name each compressible set."""
        if self.chain:
            return [f"hidden layer {l}" for l in range(1, len(self.hidden) + 1)]
        return [("group " + str(m[0].index) if len(m) == 1 else
                 "groups " + ", ".join(str(g.index) for g in m))
                + (" (a stack under scan: one width)" if m[0].stacked else "")
                for m in self.sets()]

    @functools.cached_property
    def activation(self) -> Activation | None:
        """A chain's activation: the given one, the registered one its program equals, or one
        built from its program (never registered); ``None`` off a chain."""
        if not self.chain:
            return None
        return self.given or chain_activation(self.hidden[0], self.x.dtype)

    def layer_sizes(self) -> list[int]:
        """``[d_in]`` and every neuron group's width, in program order."""
        return [int(self.x.shape[-1])] + [g.width for g in self.groups]

    def num_params(self) -> int:
        return leaf_count(self.params)

    def __str__(self) -> str:
        return format_table(self)

    # -- the network protocol -------------------------------------------------------------------

    placeable: ClassVar[bool] = True

    def __call__(self, x: jax.Array) -> Any:
        """``fn(params, x)``: the network on a batch (its output as ``fn`` returns it)."""
        return self.fn(self.params, x)

    def as_network(self) -> Network:
        return self

    def function(self) -> tuple[Callable, Any]:
        return (self.fn if self.kind == "params" else FlatFn(self.fn)), self.params

    def with_params(self, params: Any) -> Network:
        return dataclasses.replace(self, params=params)

    def compressed_as(self, net: Network, leaves: list, info, domain=None) -> Compressed:
        del domain
        return compressed(net, leaves, info)

    # -- what the driver sees -------------------------------------------------------------------

    @functools.cached_property
    def _plan(self) -> Plan:
        sets = []
        for members in self.sets():
            parts: tuple[SetPlan, ...] = ()
            if members[0].stacked:        # a stack: each tied set selects its own neurons
                by_set: dict[tuple[int, ...], list[Group]] = {}
                for g in members:
                    by_set.setdefault(g.tied or (g.index,), []).append(g)
                parts = tuple(_set_plan(m) for m in by_set.values())
            sets.append(_set_plan(members, parts))
        sets = tuple(sets)
        chain = None
        if self.chain:
            chain = ChainPlan(self.activation, tuple(
                LayerLeaves(g.kernel, g.bias, g.out_in) for g in self.groups))
        return Plan(fn=self.fn, treedef=jax.tree_util.tree_structure(self.params), x=self.x,
                    signature=self.signature, sets=sets, layouts=self.layouts,
                    width_of=tuple(g.width for g in self.groups),
                    d_out=self._d_out, chain=chain, derivative=self.derivative,
                    exits=self.exits)

    @property
    def _d_out(self) -> int:
        """The output width: the last group's, or (``fn`` differentiates the network, so its
        last kernel's ``x K`` is no output) the width of ``fn``'s output."""
        if not self.derivative:
            return self.groups[-1].width if self.groups else 0
        out = jax.eval_shape(FlatFn(self.fn), self.params, self.x)
        return int(out.shape[-1])

    def plan(self) -> Plan:
        """The static :class:`~jaxcompress.graph.plan.Plan` of this network."""
        return self._plan

    def lower(self, params: Any = None) -> Params:
        """A chain in the params convention (of ``params``, shaped like :attr:`params` up to
        widths; default :attr:`params`)."""
        if not self.chain:
            raise ValueError("lower: the network is not a chain of dense layers:\n  "
                             + "\n  ".join(self.why_not))
        return self.plan().chain.lower(jax.tree_util.tree_leaves(
            self.params if params is None else params))

    # -- front end: a params list ---------------------------------------------------------------

    @classmethod
    def from_params(cls, params: Params, activation) -> Network:
        """A params list ``[{"kernel": (in, out), "bias": (out,)}, ...]`` as a network: the
        chain's groups built directly from the shapes (no tracing), cached by the sizes, the
        activation and the dtype."""
        act = get_activation(activation)
        sizes = tuple((int(layer["kernel"].shape[-2]), int(layer["kernel"].shape[-1]))
                      for layer in params)
        dtype = jnp.result_type(params[0]["kernel"])
        groups, layouts, paths = _chain_groups(sizes, _leaf_order(len(params)))
        return cls(fn=apply_fn(act), params=list(params),
                   x=jax.ShapeDtypeStruct((1, sizes[0][0]), dtype), paths=paths, groups=groups,
                   unknown=(), hidden=groups[:-1], why_not=(), layouts=layouts, kind="params",
                   given=act)


def _set_plan(members, parts=()) -> SetPlan:
    """The driver's record of the groups ``members`` (one index set, or a stack of ``parts``)."""
    return SetPlan(index=members[0].index, width=members[0].width,
                   producers=tuple(dict.fromkeys(Producer(leaf, axis, index) for g in members
                                                 for leaf, axis, index in g.slots())),
                   readers=_readers([c for g in members for c in g.consumers]),
                   members=tuple(g.index - 1 for g in members), parts=tuple(parts))


def _readers(consumers) -> tuple[Reader, ...]:
    """One :class:`Reader` per block of rows, with every site's consumed value (a network called
    twice reads the same rows at two values: they are re-weighted to fit both)."""
    values: dict[tuple, list[tuple[int, int]]] = {}
    for c in consumers:
        values.setdefault((c.leaf, c.axis, c.block, c.index), []).append((c.value, c.value_axis))
    return tuple(Reader(leaf, axis, block, tuple(dict.fromkeys(vals)), index)
                 for (leaf, axis, block, index), vals in values.items())


@functools.cache
def apply_fn(act: Activation) -> Callable:
    """``fn(params, x)`` of a params list (one function object per activation: a stable part
    of the plan, so repeated compressions share their compilation)."""
    def fn(params, x):
        return apply(params, x, activation=act)
    fn.__qualname__ = fn.__name__ = f"apply[{act.name}]"
    return fn


@functools.cache
def _leaf_order(n_layers: int) -> tuple[tuple[int, int], ...]:
    """``(kernel leaf, bias leaf)`` of each layer of a params list in flatten order."""
    example = [{"kernel": 0, "bias": 0} for _ in range(n_layers)]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(example)[0]]
    return tuple((paths.index(f"[{l}]['kernel']"), paths.index(f"[{l}]['bias']"))
                 for l in range(n_layers))


@functools.cache
def _chain_groups(sizes: tuple[tuple[int, int], ...], order):
    """The groups, layouts and paths of a params list of layer shapes ``sizes``."""
    n = len(sizes)
    groups = []
    for l, ((_, width), (kernel, bias)) in enumerate(zip(sizes, order, strict=True)):
        consumers = [] if l == n - 1 else [Consumer(order[l + 1][0], 0, 0, -1, 1, 0, "")]
        groups.append(Group(index=l + 1, width=width, kernel=kernel, kernel_axis=1, bias=bias,
                            source="input" if l == 0 else l, consumers=consumers,
                            consumed_node=1 if l < n - 1 else None))
    groups[-1].pin("reaches the output", "")
    layouts = tuple((order[l + 1][0], 0, ((l, sizes[l][1]),)) for l in range(n - 1))
    paths = [""] * (2 * n)
    for l, (kernel, bias) in enumerate(order):
        paths[kernel], paths[bias] = f"[{l}]['kernel']", f"[{l}]['bias']"
    return tuple(groups), layouts, tuple(paths)


# ------------------------------------------------------------------------------------------------
# Front end: any JAX function
# ------------------------------------------------------------------------------------------------


def trace(fn: Callable[[Any, jax.Array], jax.Array], params: Any, x: jax.Array) -> Network:
    """Trace ``fn(params, x)`` and find its neuron groups (see :mod:`jaxcompress.graph`).

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
    fn = keep_numbers(fn, params)   # Python numbers in params reach fn as numbers, jit or not
    shape = jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x))
    if len(shape.shape) != 2:
        raise ValueError(f"trace: x must be example inputs of shape (n, d_in), got shape "
                         f"{shape.shape}")
    pairs, _ = jax.tree_util.tree_flatten_with_path(params)
    if not pairs:
        raise ValueError("trace: params has no array leaves; expected the parameter pytree")
    complex_leaves = [f"{jax.tree_util.keystr(p)} ({jnp.result_type(v)})" for p, v in pairs
                      if jnp.iscomplexobj(v)]
    if complex_leaves or jnp.iscomplexobj(shape):
        what = ", ".join(complex_leaves) if complex_leaves else f"x ({shape.dtype})"
        raise TypeError(f"trace: complex parameters or inputs are not supported (selection and "
                        f"re-weighting are real least squares): {what}; expected real arrays")
    try:
        prog = trace_program(fn, params, shape, analytic_call=analytic_call)
    except Exception as e:  # noqa: BLE001 - the user's code failing: say which call, chain it
        raise ValueError(
            f"trace: fn(params, x) with x of shape {shape.shape} ({shape.dtype}) and params of "
            f"{len(pairs)} leaves raised {type(e).__name__}: {str(e).splitlines()[0]:.300} "
            "(the original error is chained above)") from e
    complex_eqn = next((e for e in prog.eqns if any("complex" in d for d in e.out_dtypes)), None)
    if complex_eqn is not None:
        raise ValueError(
            f"trace: fn computes complex values (`{complex_eqn.name}` at {complex_eqn.line}): "
            "complex-valued activations (WIRE's Gabor wavelet) are not supported; the library "
            "compresses real networks (write the real and imaginary parts as two real neurons)")
    _check_rowwise(fn, params, shape, prog)
    leaf_shapes = [tuple(np.shape(leaf)) for _, leaf in pairs]
    a = _interpret(prog, leaf_shapes)
    seeds = seed_candidates(a)
    if seeds:           # jax.grad inside fn: again, reading the seeds' kernels as rows
        a = _interpret(prog, leaf_shapes, seeds)
    out_vals = [a.val(o) for o in prog.outs]
    lines = {o: e.line for e in prog.eqns for o in e.outs}
    for o, v in zip(prog.outs, out_vals, strict=True):
        a.pin([v], "reaches the output", lines.get(o, "output") if isinstance(o, int)
              else "output")
    paths = tuple(jax.tree_util.keystr(p) for p, _ in pairs)
    close_constants(a)
    close_duals(a)
    pin_shared(a, paths)
    close_sets(a)
    merged = close_stacks(a, paths, [[a.val(o) for o in link] for link in prog.links])
    hidden, why = chain_of(a.groups, out_vals)
    why += [f"{reason} ({line})" for reason, line in dict.fromkeys(a.notes)]
    layouts = tuple((leaf, ax, blocks) for (leaf, ax), blocks in merged.items())
    return Network(fn=fn, params=params, x=shape, paths=paths, groups=tuple(a.groups),
                   unknown=tuple(a.unknown), hidden=tuple(hidden), why_not=tuple(why),
                   layouts=layouts, signature=prog.signature(), derivative=a.derivative,
                   exits=tuple(a.exits))


def _interpret(prog, leaf_shapes, seeds=frozenset()) -> Analysis:
    """One interpretation of the flat program (``seeds``: :func:`seed_candidates`)."""
    n = len(leaf_shapes)
    a = Analysis(leaf_shapes, seeds)
    a.vals = {i: Val("param", leaf=i) for i in range(n)}
    a.vals[n] = Val("input")
    interpret(list(prog.eqns), a)
    return a


#: Primitives that mix the examples of a batch when they reduce over its axis (0).
_BATCH_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
                     "reduce_or", "argmax", "argmin", "cumsum", "cumprod", "cummax", "cummin",
                     "cumlogsumexp", "sort")


def _along(e) -> tuple[int, ...]:
    """The axes an equation of :data:`_BATCH_REDUCTIONS` reduces, accumulates or sorts along."""
    p = e.params
    return tuple(p["axes"]) if "axes" in p else (p.get("axis", p.get("dimension", -1)),)


def _keeps_rows(e, x_dependent: list[bool], n: int) -> bool:
    """Whether equation ``e``, whose operands marked in ``x_dependent`` are batch-major (axis 0
    the batch, row ``i`` read from example ``i`` alone) and the others independent of ``x``,
    gives batch-major outputs. Conservative: ``False`` for anything not shown here."""
    if any(len(o) == 0 or o[0] != n for o in e.out_shapes):
        return False
    name, p = e.name, e.params
    if elementwise(name):   # every x-dependent operand of the output's shape (graph.rules)
        return all(s == e.out_shapes[0] for s, dep in zip(e.in_shapes, x_dependent,
                                                          strict=True) if dep)
    if name == "dot_general":   # x only on the left, its batch axis a free axis, no batch dims
        (lc, _), (lb, _) = p["dimension_numbers"]
        return x_dependent[0] and not x_dependent[1] and 0 not in lc and not lb
    if name == "broadcast_in_dim":
        return tuple(p["broadcast_dimensions"])[:1] == (0,)
    if name == "reshape":
        return p.get("dimensions") is None
    if name == "transpose":
        return tuple(p["permutation"])[:1] == (0,)
    if name == "squeeze":
        return 0 not in tuple(p["dimensions"])
    if name in _BATCH_REDUCTIONS:
        return 0 not in _along(e)
    if name == "concatenate":
        return p["dimension"] != 0
    if name == "slice":
        strides = p.get("strides")
        return (p["start_indices"][0] == 0 and p["limit_indices"][0] == n
                and (strides is None or strides[0] == 1))
    return False


def _acts_rowwise(prog, n: int) -> bool:
    """Whether the program provably computes each example's output from that example alone
    (ours): ``x`` (its batch axis first) is followed through elementwise operations, matrix
    products with the batch axis free on the left, broadcasts, reshapes, transposes,
    reductions, cumulative operations, sorts, slices and joins that keep axis 0 the batch,
    each row from its own row; any other operation on a value that depends on ``x`` answers
    ``False`` (then measured)."""
    rows = {prog.n_leaves}
    for e in prog.eqns:
        dep = [isinstance(o, int) and o in rows for o in e.ins]
        if any(dep):
            if not _keeps_rows(e, dep, n):
                return False
            rows.update(e.outs)
    return True   # every value depending on x is batch-major, the outputs too


def _check_rowwise(fn, params, shape: jax.ShapeDtypeStruct, prog) -> None:
    """Refuse ``fn`` when its output on one example depends on the others of the batch (a mean
    over the batch, BatchNorm's batch statistics): compression assumes ``fn`` acts on each
    input alone. Proven from the program when it can be (:func:`_acts_rowwise`: no program to
    compile), else measured: one example of a small batch moved, the others' outputs must not
    change (concrete params only; under a transformation the check is skipped)."""
    n, d = shape.shape
    leaves = jax.tree_util.tree_leaves(params)
    if n < 2 or any(isinstance(v, jax.core.Tracer) for v in leaves) or _acts_rowwise(prog, n):
        return
    x0 = np.linspace(-0.6, 0.7, n * d).reshape(n, d)
    x1 = x0.copy()
    x1[0] = 0.3 - 1.5 * x0[0]
    # one compiled program run twice (op by op, fn would compile a program per operation)
    outputs = FastOnSmallCPU(lambda p, x: flat_output(fn(p, x), x), limit="FAST_MAX_PARAMS")
    try:
        y0, y1 = (outputs(params, jax.device_put(x.astype(shape.dtype))) for x in (x0, x1))
    except Exception:  # noqa: BLE001 - values the trace could not see: leave it to the others
        return
    y0, y1 = np.asarray(y0, np.float64), np.asarray(y1, np.float64)
    gap = float(np.max(np.abs(y0[1:] - y1[1:]), initial=0.0))
    if not gap > 1e-4 * (1.0 + float(np.max(np.abs(y0), initial=0.0))):
        return
    line = next((e.line for e in prog.eqns if e.name in _BATCH_REDUCTIONS and 0 in _along(e)),
                None)
    where = f" (at {line})" if line else ""
    raise ValueError(
        f"trace: fn mixes the examples of a batch{where}: moving one input of a batch of {n} "
        f"changed the others' outputs by up to {gap:.3g}. Compression assumes fn acts on each "
        "input alone (its output on x[i] depends on x[i] only); use statistics of the data "
        "set as constants (BatchNorm in eval mode), not of the batch")


# ------------------------------------------------------------------------------------------------
# The compressed network
# ------------------------------------------------------------------------------------------------


#: network -> {polymorphic: small(x)'s jitted function}; weak, so a network is not kept alive
_APPLIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _compressed_apply(network: Network, polymorphic: bool) -> Callable:
    """``small(x)`` of a network's compressed results, one compiled program per shape (run op
    by op, every operation of a new shape compiled a program of its own; inside your own
    ``jax.jit`` / ``vmap`` / ``grad`` it is traced into yours)."""
    per = _APPLIES.setdefault(network, {})
    if polymorphic not in per:
        if polymorphic:
            per[polymorphic] = jax.jit(network.fn)
        else:
            ref = weakref.ref(network)   # the function must not keep its key alive

            def chain_apply(params, x):
                chain = ref().plan().chain
                return apply(chain.lower(jax.tree_util.tree_leaves(params)), x,
                             activation=chain.activation)
            per[polymorphic] = jax.jit(chain_apply)
    return per[polymorphic]


@dataclasses.dataclass(frozen=True, eq=False)
class Compressed(NetworkLike):
    """A compressed network: ``small.params`` (your pytree, same structure, smaller leaves),
    ``small(x)``, and a network again (compress, certify, measure or save it).

    Attributes:
      params: the compressed parameters.
      network: the :class:`Network` that was compressed (its function and structure).
      info: the :class:`~jaxcompress.CompressInfo` of the compression.
      polymorphic: whether ``network.fn`` runs on the smaller ``params`` (its program traced at
        the new widths has the same equations); else ``why`` says what it raised, and
        ``small(x)`` evaluates the compressed chain.
      why: what ``fn`` raised on the smaller parameters (``""`` when it ran).
    """

    params: Any
    network: Network
    info: CompressInfo | None = None
    polymorphic: bool = True
    why: str = ""

    @property
    def fn(self) -> Callable:
        return self.network.fn

    @property
    def activation(self) -> str:
        """The chain's activation name (``"traced"`` off a chain)."""
        act = self.network.activation
        return act.name if act is not None else "traced"

    @property
    def lowered(self) -> Params | None:
        """The compressed chain in the params convention (``None`` off a chain)."""
        if not self.network.chain:
            return None
        return self.network.plan().chain.lower(jax.tree_util.tree_leaves(self.params))

    def __call__(self, x: jax.Array) -> jax.Array:
        """The compressed function."""
        return self.apply(self.params, x)

    def apply(self, params: Any, x: jax.Array) -> jax.Array:
        """The compressed function of its parameters (``params`` shaped like :attr:`params`):
        what :func:`jaxcompress.polish` trains."""
        return _compressed_apply(self.network, self.polymorphic)(params, x)

    def replace(self, params: Any) -> Compressed:
        """The same compressed network with other parameters (e.g. polished ones)."""
        return dataclasses.replace(self, params=params)

    with_params = replace

    def function(self) -> tuple[Callable, Any]:
        return FlatFn(self.apply), self.params

    def compressed_as(self, net: Network, leaves: list, info, domain=None) -> Compressed:
        del domain
        return compressed(net, leaves, info)

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
        (its :class:`~jaxcompress.modules.CompressedModule`); a function from :func:`trace` has
        none."""
        raise AttributeError("module: this network was traced from a function (jc.trace), which "
                             "has no module to rebuild; use fn(small.params, x) or small(x), or "
                             "trace the module itself with jc.trace_module(model, x)")

    def as_network(self) -> Network:
        """The compressed network as a :class:`Network` (to compress, certify or measure it
        again): a params list stays one; ``fn`` traced at the new widths, or the compressed
        chain when ``fn`` does not run on them."""
        net = self.network
        if net.kind == "params":
            return Network.from_params(self.params, net.given)
        if self.polymorphic:
            return trace(net.fn, self.params, jax.ShapeDtypeStruct(net.x.shape, net.x.dtype))
        return Network.from_params(self.lowered, net.activation)


def compressed(net: Network, leaves, info) -> Compressed:
    """The :class:`Compressed` of ``net`` at the compressed ``leaves``. Whether ``fn`` runs on
    them is decided at trace time: its program at the new shapes (abstract, so this works under
    ``jax.jit``) must have the traced equations."""
    # a leaf that is not an array (a Python step counter) comes back as it was
    leaves = [old if not hasattr(old, "shape") else new
              for old, new in zip(jax.tree_util.tree_leaves(net.params), leaves, strict=True)]
    params = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(net.params), leaves)
    if net.kind == "params":
        return Compressed(params, net, info)
    try:
        prog = trace_program(net.fn, params, net.x)
    except Exception as e:  # noqa: BLE001 - the user's code refusing smaller leaves
        why = f"{type(e).__name__}: {str(e).splitlines()[0]}"   # whole: it says what to do
    else:
        if prog.signature() == net.signature:
            return Compressed(params, net, info)
        why = "its program at the new widths has other equations than the traced one"
    if not net.chain:
        raise ValueError(f"compress: fn(params, x) does not run on the compressed parameters "
                         f"({why}), so fn is not shape-polymorphic in its parameters; make the "
                         "widths follow the parameter shapes (e.g. x @ kernel, not a hard-coded "
                         "size)")
    return Compressed(params, net, info, False, why)
