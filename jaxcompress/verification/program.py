r"""The pair of programs ``(F_a, F_b)`` as the verifier holds it, and the per-box computations.

:func:`trace` turns the two callables into jaxprs once (``x`` of shape ``(1, d)``, float64)
and checks them; the jaxprs' constants (the weights) stay arguments, so two networks of one
structure share every compiled program. :func:`box_bound` bounds the difference

.. math::
   D(x) = F_a(x) - F_b(x)

over one box by interpreting both jaxprs on the same input Taylor model
``x = c + h * t`` (:mod:`jaxcompress.verification.interpret`) and subtracting: both polynomials
depend on the same ``t``, so what the programs share cancels in the coefficients.
On a degenerate box (a point) the same bound encloses ``D`` at the point with its rounding,
which makes the lower bound rigorous too. :func:`difference` is the plain float64 evaluation
that finds the points (box centres, local search).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import extend

from jaxcompress.verification import taylor as tm
from jaxcompress.verification.interpret import flat, interpret
from jaxcompress.verification.rules import RuleContext

__all__ = ["Program", "box_bound", "difference", "trace"]

_core = extend.core


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """Two traced programs of ``x`` with shape ``(1, dim)``.

    Attributes:
      jaxprs: the two (open) jaxprs, whose constvars are the weights.
      consts: the two lists of constants (passed to the compiled programs as arguments).
      dim: the input width ``d``.
      outputs: the number of outputs ``k`` (``F(x)`` has shape ``(1, k)``, or ``(1,)``).
      key: a structural key: equal keys mean equal programs up to the constants' values.
      flops: the float operations of one evaluation of both programs (matmuls), for sizing
        batches.
      activations: the number of elementwise nonlinear results per evaluation.
      input_dtypes: the dtypes the two programs were traced with (float64, or float32 for a
        program that refuses float64 inputs).
      depth: the larger number of elementwise nonlinear equations of the two programs (an
        MLP's hidden layers), which decides :func:`symbolic_by_default`.
    """

    jaxprs: tuple
    consts: tuple
    dim: int
    outputs: int
    key: tuple
    flops: float
    activations: int
    input_dtypes: tuple = (jnp.float64, jnp.float64)
    fns: tuple = ()
    depth: int = 0
    _batched: dict = dataclasses.field(default_factory=dict, repr=False)

    def batched(self, n: int) -> tuple[tuple, tuple, str]:
        """``(jaxprs, consts, text)``: the two programs traced on ``n`` rows (for the plain
        float64 evaluations at many points at once; cached)."""
        if n not in self._batched:
            jaxprs, consts = [], []
            for fn, name, dtype in zip(self.fns, "ab", self.input_dtypes, strict=True):
                try:
                    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((n, self.dim), dtype))
                except Exception as exc:  # noqa: BLE001
                    raise ValueError(f"verify: {name} fails on a batch of {n} inputs (it works "
                                     f"on one): {type(exc).__name__}: {exc}") from exc
                jaxprs.append(closed.jaxpr)
                consts.append(list(closed.consts))
            text = str(jaxprs[0]) + str(jaxprs[1])
            self._batched[n] = (tuple(jaxprs), tuple(consts), text)
        return self._batched[n]


def _describe_out(out) -> str:
    leaves = jax.tree.leaves(out)
    if len(leaves) != 1:
        return f"a pytree of {len(leaves)} arrays"
    return f"shape {tuple(leaves[0].shape)}"


def _trace_one(fn, name: str, dim: int):
    """``(closed jaxpr, output shape, input dtype)``: traced on float64 inputs, or on float32
    ones where the function refuses float64 (a float32 network under strict dtype promotion;
    the interpreter computes in float64 all the same)."""
    try:
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(
            jax.ShapeDtypeStruct((1, dim), jnp.float64))
        dtype = jnp.float64
    except Exception as exc:  # noqa: BLE001 - report the user's function failing on the input
        try:
            closed, shape = jax.make_jaxpr(fn, return_shape=True)(
                jax.ShapeDtypeStruct((1, dim), jnp.float32))
            dtype = jnp.float32
        except Exception:  # noqa: BLE001
            closed = None
        if closed is None:
            _refuse(fn, name, dim, exc)
    leaves = jax.tree.leaves(shape)
    if len(leaves) != 1 or leaves[0].ndim not in (1, 2) or leaves[0].shape[0] != 1:
        raise ValueError(f"verify: {name} maps an input of shape (1, {dim}) to "
                         f"{_describe_out(shape)}; expected one array of shape (1, k) or (1,) "
                         "(a batch of n inputs to n outputs)")
    if not jnp.issubdtype(leaves[0].dtype, jnp.floating):
        raise TypeError(f"verify: {name} returns dtype {leaves[0].dtype}; expected real floats")
    return closed, tuple(leaves[0].shape), dtype


def _refuse(fn, name: str, dim: int, exc: Exception):
    widths = [w for w in range(1, 9) if w != dim and _accepts(fn, w)]
    hint = (f"; it accepts inputs of width {widths[0]} (the domain has dim {dim})"
            if widths else "")
    raise ValueError(f"verify: {name} fails on an input of shape (1, {dim}) (float64, a "
                     f"batch of one point of the domain){hint}: {type(exc).__name__}: "
                     f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc


def _accepts(fn, width: int) -> bool:
    for dtype in (jnp.float64, jnp.float32):
        try:
            jax.eval_shape(fn, jax.ShapeDtypeStruct((1, width), dtype))
            return True
        except Exception:  # noqa: BLE001
            pass
    return False


#: Elementwise nonlinear primitives, counted to size the batches of boxes.
_NONLINEAR = frozenset(("tanh", "logistic", "exp", "expm1", "log", "log1p", "sin", "cos", "erf",
                        "erfc", "sqrt", "rsqrt", "max", "min", "abs", "mul", "div",
                        "integer_pow"))


def _cost(jaxpr) -> tuple[float, int, int]:
    """Matmul flops, elementwise nonlinear results and nonlinear elementwise equations of a
    jaxpr as the interpreter reads it (calls inlined, every iteration of a loop counted)."""
    flops, acts, eqns = 0.0, 0, 0
    for eqn in flat(jaxpr).eqns:
        if eqn.name == "dot_general":
            (lc, _), _ = eqn.params["dimension_numbers"]
            k = math.prod(eqn.in_shapes[0][i] for i in lc) if lc else 1
            flops += 2.0 * k * math.prod(eqn.out_shapes[0])
        elif eqn.name in _NONLINEAR:
            acts += math.prod(eqn.out_shapes[0])
            eqns += eqn.name not in ("mul", "div", "integer_pow")
    return flops, acts, eqns


def _check_constants(closed, name: str) -> None:
    """Raise when a constant of the program (a weight it closes over) holds a NaN or an
    infinity, naming its shape and the user's line that reads it."""
    for i, c in enumerate(closed.consts):
        if isinstance(c, jax.core.Tracer) or not hasattr(c, "dtype"):
            continue
        if jnp.issubdtype(c.dtype, jnp.inexact) and not np.all(np.isfinite(np.asarray(c))):
            reader = next((e.line for e in flat(closed.jaxpr).eqns if i in e.ins), "")
            raise ValueError(f"verify: {name} holds a non-finite constant (shape "
                             f"{tuple(c.shape)}, {int(np.sum(~np.isfinite(np.asarray(c))))} "
                             f"non-finite entries)" + (f", read at {reader}" if reader else "")
                             + ": the bound of a program with NaN or infinite weights has no "
                             "meaning")


def trace(a, b, dim: int) -> Program:
    """Trace ``a`` and ``b`` on ``(1, dim)`` float64 inputs (call inside ``jax.enable_x64``).

    Raises ``ValueError`` naming the argument when a function fails on such an input or
    returns something else than one ``(1, k)`` / ``(1,)`` array, and when the two output shapes
    differ.
    """
    ca, sa, da = _trace_one(a, "a", dim)
    cb, sb, db = _trace_one(b, "b", dim)
    if sa != sb:
        raise ValueError(f"verify: a returns shape {sa} and b returns shape {sb} on an input "
                         f"of shape (1, {dim}); expected the same output shape (the difference "
                         "F_a - F_b is bounded)")
    _check_constants(ca, "a")
    _check_constants(cb, "b")
    key = (str(ca.jaxpr), str(cb.jaxpr), dim, str(da), str(db))
    fa, xa, na = _cost(ca.jaxpr)
    fb, xb, nb = _cost(cb.jaxpr)
    return Program(jaxprs=(ca.jaxpr, cb.jaxpr), consts=(list(ca.consts), list(cb.consts)),
                   dim=dim, outputs=int(sa[-1]) if len(sa) == 2 else 1, key=key,
                   flops=fa + fb, activations=xa + xb, input_dtypes=(da, db), fns=(a, b),
                   depth=max(na, nb))


#: Programs with at least this many nonlinear layers carry remainder symbols by default (by
#: input dimension: 4 in one or two, 3 from three on)...
SYMBOLIC_DEPTH = {1: 4, 2: 4}
#: ... unless they make more than this many nonlinear results (symbols) together.
SYMBOLIC_MAX = 8000


def symbolic_by_default(program: Program) -> bool:
    """Whether remainder symbols pay for ``program``: they save the factor ``|W|`` by which
    each layer widens a radius, which compounds with depth, and cost a matmul per symbol row
    at every later layer, which grows with the number of symbols (measured on
    ``benchmarks/verify.py``'s depth rows, docs/verify.md: ``[2, 256x8, 1]`` and
    ``[5, 128x3, 1]`` and ``[2, 512x8, 1]`` (4,456 symbols) gain at the higher default order
    of symbolic bounds, ``api.SYMBOLIC_ORDER``). In one or two inputs three layers do not need
    them: a 2-D SIREN ``[2, 256x3, 1]`` (first kernel x 30) against ``collocation(6)`` reached
    1.01x in 23 s with radii at degree 4 and in 102 s with symbols at degree 6, a tanh one in
    0.6 s against 1.0 s (2026-12-07, one run each, after compiling)."""
    return (program.depth >= SYMBOLIC_DEPTH.get(program.dim, 3)
            and program.activations <= SYMBOLIC_MAX)


def _input(c, h, mono: tm.Monomials) -> tm.TaylorModel:
    """The Taylor model of ``x = c + h * t`` with shape ``(1, d)``: at order 0 (no linear
    terms) the half-widths are the remainder, ``x in c + [-h, h]`` (interval arithmetic)."""
    d = c.shape[0]
    rows = [c[None]]
    if mono.order >= 1:
        rows.append(jnp.eye(d, dtype=jnp.float64) * h[None])
        if mono.size > d + 1:
            rows.append(jnp.zeros((mono.size - d - 1, d), jnp.float64))
    coef = jnp.concatenate(rows, axis=0)[:, None, :]
    rad = jnp.zeros((1, d), jnp.float64) if mono.order >= 1 else jnp.abs(h)[None]
    return tm.TaylorModel(coef, rad)


def _difference_model(program: Program, consts, x: tm.TaylorModel, mono: tm.Monomials,
                      symbolic: bool) -> tm.TaylorModel:
    """The Taylor model of ``D = F_a - F_b``: each program interpreted with its own remainder
    symbols (they share none), its output's symbols then bounded into its radius."""
    outs = []
    for jaxpr, cs in zip(program.jaxprs, consts, strict=True):
        ctx = RuleContext(mono, symbolic=symbolic)
        (out,) = interpret(jaxpr, cs, [x], ctx)
        outs.append(tm.collapse(ctx.lift(out)))
    ctx = RuleContext(mono)
    d = ctx.sub(outs[0], outs[1])
    return tm.linear(lambda v: v.reshape(-1), ctx.lift(d))


#: The output's polynomial is bounded on ``parts^d`` sub-boxes of each box
#: (:func:`~jaxcompress.verification.taylor.refined_range`): a few hundred flops per
#: coefficient against the whole network's Taylor models per box.
OUTPUT_PARTS = {1: 8, 2: 4, 3: 4, 4: 2, 5: 2}


def box_bound(program: Program, order: int, consts, c, h, *, symbolic: bool = False
              ) -> tuple[jax.Array, jax.Array]:
    """``(ub, lb)`` with ``lb <= max_j |D_j(x)| <= ub`` for every ``x`` in the box
    ``[c - h, c + h]`` (one box). On a degenerate box (``h = 0``, a point) ``lb`` is the
    point's value up to its rounding: a rigorous lower bound on the sup when the point lies in
    the domain. NaN (an overflow met on the way) gives ``ub = inf``. ``symbolic``: remainders
    as symbols (:meth:`~jaxcompress.verification.rules.RuleContext.fresh`)."""
    mono = tm.Monomials.of(program.dim, order)
    d = _difference_model(program, consts, _input(c, h, mono), mono, symbolic)
    lo, hi = tm.bounds(d, mono, OUTPUT_PARTS.get(program.dim, 1))
    ub = jnp.max(jnp.maximum(-lo, hi))
    lb = jnp.max(jnp.maximum(jnp.maximum(lo, -hi), 0.0))
    return jnp.where(jnp.isnan(ub), jnp.inf, ub), jnp.where(jnp.isnan(lb), 0.0, lb)



def difference(program: Program, jaxprs, consts, x) -> jax.Array:
    """``max_j |F_a(x)_j - F_b(x)_j|`` for the rows of ``x`` (``(n, d)`` -> ``(n,)``), evaluated
    by JAX with the programs traced on ``n`` rows (:meth:`Program.batched`)."""
    outs = []
    for jaxpr, cs, dtype in zip(jaxprs, consts, program.input_dtypes, strict=True):
        (out,) = _core.jaxpr_as_fun(_core.ClosedJaxpr(jaxpr, list(cs)))(x.astype(dtype))
        outs.append(jnp.asarray(out, jnp.float64).reshape(x.shape[0], -1))
    return jnp.max(jnp.abs(outs[0] - outs[1]), axis=1)
