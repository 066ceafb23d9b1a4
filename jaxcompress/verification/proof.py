r"""A verification's certificate: the two programs in the checker's op language, the domain,
the search's proof tree and the bracket, written to one file by
:meth:`Verification.save <jaxcompress.verification.Verification.save>` and checked by
:func:`jaxcompress.check` without the verifier (:mod:`jaxcompress.checker`).

The programs are **lowered** from the verifier's jaxprs to a straight-line list of operations
on row vectors (value 0 is the input ``x``, operation ``i`` defines value ``i + 1``):

* ``dot`` (``x @ W``, ``W`` a constant; also a row's sum and one entry repeated, as products
  with ones), ``add`` / ``sub`` / ``mul`` (of two values, or of a value and a constant
  broadcast to it: biases, scalings), ``div`` by a constant, ``neg``,
  ``concat`` (of values and constants: input skips), ``slice`` (a range of a row);
* ``tanh``, ``logistic``, ``exp``, ``expm1``, ``log``, ``log1p``, ``sin``, ``cos``, ``erf``,
  ``erfc``, ``sqrt``, ``pow`` (an integer power), ``logaddexp`` with a constant (softplus) —
  every activation of :mod:`jaxcompress.activations` is built of these;
* ``max`` / ``min`` with a constant (ReLU) and ``abs``.

The jaxprs are read as the verifier reads them (:func:`jaxcompress.program.flatten`, the
library's one front end): calls (``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``remat``,
``closed_call``) inlined, a ``scan`` / ``fori_loop`` with a static trip count unrolled;
shape-only operations (reshape, squeeze, casts, copies) are the identity (a float32
cast is taken as exact, as the verifier takes it), and equations that do not depend on ``x`` are
evaluated by JAX in float64 and stored as constants: the certificate is about the programs as
written in the file. Anything else (``cond``, ``while``, products of matrices of values, ...) is
refused by name: :class:`UnsupportedForCertificate`.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.checker import fileformat
from jaxcompress.program import Const, sub_programs
from jaxcompress.verification.interpret import flat, known_call

__all__ = ["Proof", "UnsupportedForCertificate", "lower_program"]

_UNARY = ("tanh", "logistic", "exp", "expm1", "log", "log1p", "sin", "cos", "erf", "erfc",
          "sqrt", "neg", "abs")
_IDENTITY = ("reshape", "squeeze", "expand_dims", "convert_element_type", "copy", "copy_p",
             "reduce_precision")
_BINARY = ("add", "sub", "mul", "div", "max", "min")


class UnsupportedForCertificate(ValueError):
    """A program the certificate's op language cannot express (named by its primitive)."""


class _Lowering:
    """One program's op list; ``env`` maps jaxpr variables to ``("v", id, shape)`` (depends on
    ``x``) or ``("c", array)``."""

    def __init__(self, name: str, dim: int):
        self.name, self.ops, self.arrays = name, [], {}
        self.dim = dim

    def refuse(self, eqn, why: str):
        where = eqn.line
        raise UnsupportedForCertificate(
            f"save: program {self.name}: {why} (primitive {eqn.primitive.name!r}"
            + (f", at {where}" if where else "") + "); the certificate's checker reads dense "
            "layers, the analytic activations, ReLU / max / min / abs with a constant, "
            "elementwise sums and products, and concatenation (verify itself works on it)")

    def const(self, value, size: int | None = None) -> str:
        arr = np.asarray(value, np.float64)
        if size is not None:
            flat = arr.reshape(-1)
            arr = flat[:1].reshape(()) if flat.size and np.all(flat == flat[0]) else flat
            if arr.ndim and arr.size != size:
                raise ValueError(f"constant of {arr.size} entries for a value of {size}")
        key = f"{self.name}.c{len(self.arrays)}"
        self.arrays[key] = arr
        return key

    def emit(self, op: str, ins: list, shape, **params) -> tuple:
        self.ops.append({"op": op, "in": ins, **params})
        return ("v", len(self.ops), tuple(shape))

    def run(self, jaxpr, consts, args) -> list:
        """Lower ``jaxpr`` as the verifier reads it (:func:`~jaxcompress.verification.
        interpret.flat`: calls inlined, loops unrolled, known functions kept whole)."""
        program = flat(jaxpr)
        env = {i: ("c", np.asarray(c)) for i, c in enumerate(consts)}
        env.update({program.n_consts + i: a for i, a in enumerate(args)})

        def read(o):
            return ("c", np.asarray(o.value)) if isinstance(o, Const) else env[o]

        for eqn in program.eqns:
            ins = [read(o) for o in eqn.ins]
            if all(t[0] == "c" for t in ins):
                outs = eqn.primitive.bind(*[jnp.asarray(t[1]) for t in ins], **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
                outs = [("c", np.asarray(o)) for o in outs]
            else:
                outs = self.equation(eqn, ins)
            env.update(zip(eqn.outs, outs, strict=True))
        return [read(o) for o in program.outs]

    def operand(self, t, shape):
        """A value's id, or a constant broadcast to ``shape`` (its key)."""
        if t[0] == "v":
            return t[1]
        return self.const(np.broadcast_to(t[1], shape), math.prod(shape))

    def equation(self, eqn, ins) -> list:
        name = eqn.primitive.name
        shape = tuple(eqn.out_shapes[0]) if eqn.out_shapes else ()
        if len(shape) > 2 or (len(shape) == 2 and shape[0] != 1):
            self.refuse(eqn, f"a value of shape {shape} (the checker reads rows of one input)")
        if sub_programs(eqn) and known_call(eqn) == "logaddexp":
            vals = [t for t in ins if t[0] == "v"]
            if len(vals) != 1 or vals[0][2] != shape:
                self.refuse(eqn, "logaddexp of two values")
            other = self.operand(ins[1] if ins[0][0] == "v" else ins[0], shape)
            return [self.emit("logaddexp", [vals[0][1], other], shape)]
        x = ins[0]
        if name in _IDENTITY or (name == "broadcast_in_dim" and x[0] == "v"
                                 and math.prod(x[2]) == math.prod(shape)):
            return [("v", x[1], shape)]
        if x[0] == "v" and math.prod(x[2][:-1]) == 1 and (
                (name == "reduce_sum" and tuple(eqn.params["axes"]) == (len(x[2]) - 1,))
                or (name == "broadcast_in_dim" and math.prod(x[2]) == 1)):
            # a sum over a row, or one entry repeated: x @ ones (exact)
            ones = np.ones((math.prod(x[2]), math.prod(shape) if name != "reduce_sum" else 1))
            return [self.emit("dot", [x[1], self.const(ones)], shape)]
        if name in _UNARY and x[0] == "v":
            return [self.emit(name, [x[1]], shape)]
        if name in ("integer_pow", "square") and x[0] == "v":
            return [self.emit("pow", [x[1]], shape, y=int(eqn.params.get("y", 2)))]
        if name in _BINARY:
            return [self.binary(eqn, name, ins, shape)]
        if name == "dot_general":
            return [self.dot(eqn, ins, shape)]
        if name == "slice" and x[0] == "v" and len(x[2]) == len(shape) >= 1:
            start, stop = eqn.params["start_indices"][-1], eqn.params["limit_indices"][-1]
            if (eqn.params.get("strides") or (1,))[-1] != 1 or math.prod(x[2][:-1]) != 1:
                self.refuse(eqn, "a strided slice, or one across rows")
            return [self.emit("slice", [x[1]], shape, start=int(start), stop=int(stop))]
        if name == "concatenate" and eqn.params["dimension"] == len(shape) - 1:
            parts = [self.operand(t, tuple(v)) for t, v in zip(ins, eqn.in_shapes,
                                                               strict=True)]
            return [self.emit("concat", parts, shape)]
        return self.refuse(eqn, "no rule in the certificate's op language")

    def binary(self, eqn, name: str, ins, shape) -> tuple:
        for t in ins:
            if t[0] == "v" and t[2] != shape:
                self.refuse(eqn, f"an operand of shape {t[2]} broadcast to {shape}")
        both = all(t[0] == "v" for t in ins)
        if both and name not in ("add", "sub", "mul"):
            self.refuse(eqn, f"{name} of two values that depend on x")
        if name in ("div",) and ins[1][0] == "v":
            self.refuse(eqn, "division by a value that depends on x")
        if name in ("add", "mul", "max", "min") and ins[0][0] != "v":
            ins = ins[::-1]
        if name == "sub" and ins[0][0] == "c":  # c - v = (-v) + c
            neg = self.emit("neg", [ins[1][1]], shape)
            return self.emit("add", [neg[1], self.operand(ins[0], shape)], shape)
        return self.emit(name, [self.operand(t, shape) for t in ins], shape)

    def dot(self, eqn, ins, shape) -> tuple:
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        x, w = ins
        if (x[0] != "v" or w[0] != "c" or lb or rb or w[1].ndim != 2 or len(x[2]) < 1
                or tuple(lc) != (len(x[2]) - 1,) or tuple(rc) != (0,)):
            self.refuse(eqn, "a product other than x @ W with W a constant matrix")
        return self.emit("dot", [x[1], self.const(w[1])], shape)


def lower_program(jaxpr, consts, name: str, dim: int) -> tuple[dict, dict[str, np.ndarray]]:
    """``(program, arrays)``: one jaxpr (input ``(1, dim)``) in the checker's op language."""
    low = _Lowering(name, dim)
    with jax.enable_x64(True):
        (out,) = low.run(jaxpr, consts, [("v", 0, (1, dim))])
    if out[0] != "v":
        raise UnsupportedForCertificate(f"save: program {name} does not depend on x (a "
                                        "constant output)")
    return {"ops": low.ops, "out": out[1], "outputs": math.prod(out[2])}, low.arrays


@dataclasses.dataclass(frozen=True, eq=False)
class Proof:
    """What :meth:`Verification.save` writes: the programs (jaxprs and constants), the region
    and the search's :class:`~jaxcompress.verification.search.ProofTree` (its
    ``arrays()``)."""

    jaxprs: tuple
    consts: tuple
    region: object
    tree: object

    def save(self, path, *, upper: float, lower: float, argmax, status: str) -> Path:
        """Write the certificate to ``path`` (see :mod:`jaxcompress.checker.fileformat`)."""
        r = self.region
        programs, arrays = {}, {}
        for name, jaxpr, cs in zip("ab", self.jaxprs, self.consts, strict=True):
            programs[name], more = lower_program(jaxpr, cs, name, r.dim)
            arrays.update(more)
        if programs["a"]["outputs"] != programs["b"]["outputs"]:
            raise UnsupportedForCertificate("save: the two programs have different outputs")
        if r.kind == "box":
            arrays.update(domain_lo=r.lo, domain_hi=r.hi)
        else:
            arrays.update(domain_center=r.center, domain_radius=np.array([r.radius]))
        tree = self.tree.arrays()
        # every leaf that meets the domain claims `upper`, the statement the file proves: the
        # verifier's own (often smaller) bounds of its leaves are not needed for it, and
        # holding the check to them would ask it to be as tight as the verifier on each leaf
        tree["bound"] = np.where(np.isfinite(tree["bound"]), upper, tree["bound"])
        arrays.update({f"tree_{k}": v for k, v in tree.items()})
        arrays["claim"] = np.array([upper, lower], np.float64)
        arrays["argmax"] = np.asarray(argmax, np.float64).reshape(r.dim)
        meta = {"domain": r.kind, "dim": int(r.dim), "programs": programs, "status": status}
        return fileformat.write(path, meta, {k: np.asarray(v) for k, v in arrays.items()})
