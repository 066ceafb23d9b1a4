r"""The check of a verification certificate, in Arb ball arithmetic (python-flint).

Given the file's programs ``F_a``, ``F_b``, domain ``Omega``, proof tree, ``upper``, ``lower``
and ``argmax``, it confirms

.. math::
   \sup_{x \in \Omega} \max_j |D_j(x)| \le \texttt{upper}, \qquad
   \max_j |D_j(\texttt{argmax})| \ge \texttt{lower}, \quad \texttt{argmax} \in \Omega,
   \qquad D = F_a - F_b,

or names the first node that fails. It shares nothing with the verifier but the file:

1. **Covering**, in exact rational arithmetic (the stored float64 centres ``c`` and half-widths
   ``h`` read as :class:`fractions.Fraction`; node ``i`` is ``[c_i - h_i, c_i + h_i]``): the
   root contains ``Omega``; a split node is covered by its two children (equal to it on every
   axis but one, whose two intervals cover its interval); a clipped node contains its parent's
   intersection with ``Omega`` (for a ball: on axis ``i`` the intersection spans
   ``c_i -+ sqrt(R^2 - m_i)`` with ``m_i`` the squared distance to the box along the other
   axes, compared squared); a leaf claimed ``-inf`` misses ``Omega`` (or is the clip of a box
   that does). Every leaf's claim is at most ``upper``.
2. **Every claim**, by three enclosures of ``D`` over the leaf box ``X`` (centre ``c``,
   ``Delta = x - c in [-h, h]``), any of which suffices for each output:

   .. math::
      D(X), \qquad D(c) + \nabla D(X) \cdot \Delta, \qquad
      D(c) + \nabla D(c) \cdot \Delta + \tfrac12 \Delta^T \nabla^2 D(X) \Delta,

   the natural enclosure, the mean-value form and the second-order Taylor form (Lagrange
   remainder). Values, gradients and Hessians are propagated forward through both programs
   (jets: ``f(u)``, ``f'(u) g``, ``f'(u) H + f''(u) g g^T``; products by the product rule;
   ``x @ W`` as one ball-matrix product over a batch of boxes), with Arb's proven enclosures of
   ``tanh``, ``exp``, ``sin``, ``erf``, ...; ``D(c)`` and ``nabla D(c)`` at the exact centre,
   so what the two programs share cancels there. A kink (``max`` / ``min`` with a constant,
   ``abs``) whose argument's enclosure contains it gets the derivative ``[0, 1]`` (``[-1, 1]``)
   and an unbounded second derivative: the mean-value form stays valid (the segment's
   derivative lies in the enclosure almost everywhere), the Taylor form is then infinite. A
   leaf whose bound the three forms do not prove is bisected along its widest axis (children
   rounded outwards, exactly), to ``max_depth`` levels, then the check fails there.
3. **The lower end**: ``argmax`` lies in ``Omega`` (exactly) and ``|D_j(argmax)| >= lower``
   for some ``j`` (Arb).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from fractions import Fraction

import numpy as np

from jaxcompress.checker.fileformat import CertificateError, read

__all__ = ["CheckReport", "check"]

ROOT, SPLIT, CLIP = 0, 1, 2
#: Arb working precision (bits): D(c) is a difference of nearly equal numbers.
PREC = 80
#: Boxes bounded per ball-matrix product.
BATCH = 32
#: The order of the derivatives enclosed over a box (those at its centre: one less).
BOX_ORDER = 3
_UNARY = ("tanh", "logistic", "exp", "expm1", "log", "log1p", "sin", "cos", "erf", "erfc",
          "sqrt", "neg", "abs", "pow")
_WITH_CONST = ("max", "min", "logaddexp", "div")
_BINARY = ("add", "sub", "mul")


def _flint():
    try:
        import flint
    except ImportError as exc:
        raise ImportError("check: needs python-flint (Arb ball arithmetic): pip install "
                          "'jaxcompress[check]' (python-flint==0.9.0)") from exc
    return flint


class _Reject(Exception):
    def __init__(self, node, reason: str):
        super().__init__(reason)
        self.node, self.reason = node, reason


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The outcome of :func:`check`.

    Attributes:
      confirmed: every claim proven: ``lower <= sup |F_a - F_b| <= upper`` on the domain.
      reason: why not (empty when confirmed), naming the node.
      node: the first node that failed (None when confirmed or not about one node).
      upper, lower: the certificate's bracket.
      leaves: leaves of the proof tree; boxes: boxes the checker bounded (leaves and the
        pieces it split them into); depth: the deepest split it needed.
      seconds: wall-clock time of the check.
    """

    confirmed: bool
    reason: str
    node: int | None
    upper: float
    lower: float
    leaves: int
    boxes: int
    depth: int
    seconds: float

    def summary(self) -> str:
        head = (f"confirmed: sup |F_a - F_b| in [{self.lower:.6e}, {self.upper:.6e}]"
                if self.confirmed else f"rejected: {self.reason}")
        return (f"{head}\n{self.leaves:,} leaves, {self.boxes:,} boxes bounded in Arb ball "
                f"arithmetic (split to depth {self.depth}) in {self.seconds:.2f} s")

    def __str__(self) -> str:
        return self.summary()


# ---- the programs: parsed and validated, constants as balls -------------------------------


def _parse(name: str, prog, arrays, dim: int, fl) -> tuple[list, int, int]:
    """``(ops, out, size)``: ops as ``(kind, operands, extra)``; a malformed program is a
    :class:`CertificateError`."""
    def bad(i, why):
        raise CertificateError(f"check: program {name}, operation {i}: {why}")

    def const(key, i):
        arr = arrays.get(key) if isinstance(key, str) else None
        if arr is None or arr.dtype != np.float64 or not np.all(np.isfinite(arr)):
            bad(i, f"constant {key!r} is missing or not finite float64")
        return arr

    sizes, ops = [dim], []
    try:
        steps, out = list(prog["ops"]), int(prog["out"])
    except (KeyError, TypeError, ValueError):
        raise CertificateError(f"check: program {name} is malformed (ops / out)") from None
    for i, op in enumerate(steps):
        kind, ins = op.get("op"), op.get("in")
        if not isinstance(ins, list) or not ins:
            bad(i, "no operands")
        vals = [v for v in ins if isinstance(v, int)]
        if any(not 0 <= v <= i for v in vals) or len(vals) + sum(
                isinstance(v, str) for v in ins) != len(ins):
            bad(i, f"operands {ins} must be earlier values or constants")
        n = sizes[vals[0]] if vals else 0
        if kind == "dot":
            w = const(ins[1], i) if len(ins) == 2 and len(vals) == 1 else bad(i, "dot(x, W)")
            if w.ndim != 2 or w.shape[0] != n:
                bad(i, f"W of shape {w.shape} for a value of size {n}")
            operands, n = [ins[0], fl.arb_mat(w.shape[0], w.shape[1], w.ravel().tolist())], \
                w.shape[1]
        elif kind == "concat" or kind == "slice":
            operands = []
            for v in ins:
                operands.append(v if isinstance(v, int)
                                else [fl.arb(x) for x in const(v, i).ravel().tolist()])
            parts = [sizes[v] if isinstance(v, int) else len(v) for v in operands]
            if kind == "slice":
                a, b = op.get("start"), op.get("stop")
                if len(ins) != 1 or not vals or not (isinstance(a, int) and isinstance(b, int)
                                                     and 0 <= a < b <= n):
                    bad(i, f"slice [{a}:{b}] of a value of size {n}")
                n = b - a
            else:
                n = sum(parts)
        elif kind in _UNARY + _WITH_CONST + _BINARY:
            arity = 1 if kind in _UNARY else 2
            if len(ins) != arity or not isinstance(ins[0], int) or (
                    kind in _WITH_CONST and not isinstance(ins[1], str)):
                bad(i, f"{kind} takes {arity} operands, a value first"
                    + (" and a constant" if kind in _WITH_CONST else ""))
            operands = [ins[0]]
            for v in ins[1:]:
                if isinstance(v, int):
                    if sizes[v] != n:
                        bad(i, f"operands of sizes {n} and {sizes[v]}")
                    operands.append(v)
                else:
                    c = const(v, i).ravel()
                    if c.size not in (1, n):
                        bad(i, f"a constant of {c.size} entries for a value of {n}")
                    operands.append([fl.arb(x) for x in c.tolist()])
            if kind == "pow" and not isinstance(op.get("y"), int):
                bad(i, "pow without an integer exponent y")
        else:
            bad(i, f"unknown operation {kind!r}")
        ops.append((kind, operands, op.get("y", (op.get("start"), op.get("stop")))))
        sizes.append(n)
    if not 0 <= out < len(sizes):
        raise CertificateError(f"check: program {name}: output {out} is not one of its values")
    return ops, out, sizes[out]


# ---- jets: value, gradient and Hessian of every entry, for a batch of boxes ---------------


def _partitions(s: tuple) -> list[list[tuple]]:
    """The set partitions of ``s`` (a tuple of distinct positions)."""
    if not s:
        return [[]]
    out = []
    for p in _partitions(s[1:]):
        out.append([(s[0],), *p])
        out += [p[:i] + [(s[0], *p[i])] + p[i + 1:] for i in range(len(p))]
    return out


class _Jets:
    """Derivatives of every entry up to ``order``, for a batch of boxes: ``comps[k][b * n + i]``
    is derivative ``keys[k]`` (a sorted tuple of axes; ``()`` the value) of entry ``i`` for box
    ``b``. Compositions follow Faa di Bruno's formula (``d_S f(u) = sum over the partitions pi
    of S of f^(|pi|)(u) prod_(B in pi) d_B u``), products Leibniz's (``d_S (uv) = sum over
    A subset of S of d_A u d_(S - A) v``)."""

    def __init__(self, fl, d: int, order: int, nbox: int):
        self.fl, self.d, self.nbox, self.order = fl, d, nbox, order
        self.keys = [()]
        for m in range(1, order + 1):
            self.keys += [k + (i,) for k in self.keys if len(k) == m - 1
                          for i in range(k[-1] if k else 0, d)]
        self.K = len(self.keys)
        index = {k: n for n, k in enumerate(self.keys)}

        def sub(key, positions):
            return index[tuple(sorted(key[p] for p in positions))]

        # Faa di Bruno's terms of each key k >= 1, grouped by the derivative f^(m) they
        # multiply (m >= 2; m = 1 multiplies d_k u itself)
        self.chain = [(k, [(m, [[sub(key, b) for b in pi]
                                for pi in _partitions(tuple(range(len(key)))) if len(pi) == m])
                           for m in range(2, len(key) + 1)])
                      for k, key in enumerate(self.keys) if k]
        self.leibniz = [[(sub(k, a), sub(k, tuple(p for p in range(len(k)) if p not in a)))
                         for r in range(len(k) + 1)
                         for a in itertools.combinations(range(len(k)), r)]
                        for k in self.keys]
        self.zero = fl.arb(0)

    def inputs(self, c: np.ndarray, h: np.ndarray | None) -> list:
        """The jets of ``x`` over the boxes ``[c - h, c + h]`` (at the points ``c``)."""
        fl, d, rows = self.fl, self.d, []
        for key in self.keys:
            if not key:
                rows.append([fl.arb(float(c[b, i]), 0.0 if h is None else float(h[b, i]))
                             for b in range(self.nbox) for i in range(d)])
            else:
                rows.append([fl.arb(int(key == (i,))) for _ in range(self.nbox)
                             for i in range(d)])
        return rows

    def unary(self, x: list, fn, c: list | None = None, centre: list | None = None) -> list:
        """``f`` of every entry, ``fn(v, k) = (f(v), f'(v), f''(v), f'''(v))`` with ``k``
        the entry's constant (of ``c``: one, or one per entry); with ``centre``, ``fn(v, k,
        v_c)`` returns the value and a slope relative to the entry's value at the centre."""
        out = [[] for _ in range(self.K)]
        chain, rows = self.chain, list(zip(*x, strict=True))
        for t, xt in enumerate(rows):
            k = c[t % len(c)] if c else None
            fs = fn(xt[0], k) if centre is None else fn(xt[0], k, centre[t])
            out[0].append(fs[0])
            f1 = fs[1]
            for k, groups in chain:
                total = f1 * xt[k]
                for m, terms in groups:
                    part = None
                    for blocks in terms:
                        term = xt[blocks[0]]
                        for b in blocks[1:]:
                            term = term * xt[b]
                        part = term if part is None else part + term
                    total = total + fs[m] * part
                out[k].append(total)
        return out

    def product(self, x: list, y: list) -> list:
        return [[sum((x[a][t] * y[b][t] for a, b in self.leibniz[k]), self.zero)
                 for t in range(len(x[0]))] for k in range(self.K)]

    def dot(self, x: list, w, n: int) -> list:
        fl, m, rows = self.fl, w.ncols(), self.K * self.nbox
        flat = (fl.arb_mat(rows, n, [v for comp in x for v in comp]) * w).entries()
        size = self.nbox * m
        return [flat[k * size:(k + 1) * size] for k in range(self.K)]

    def constant(self, c: list, n: int) -> list:
        """The jets of a constant row ``c`` (zero derivatives)."""
        return [c * self.nbox] + [[self.zero] * (self.nbox * n) for _ in range(self.K - 1)]

    def columns(self, parts: list, sizes: list) -> list:
        """Concatenate rows per box (``parts`` of ``sizes`` entries)."""
        return [[v for b in range(self.nbox) for p, n in zip(parts, sizes, strict=True)
                 for v in p[k][b * n:(b + 1) * n]] for k in range(self.K)]


def _kink(fl, v, k, slope):
    """``max(v, k)`` (slope 0 on the left) or ``|v|`` (``k = 0``, slope -1): value and three
    derivatives, the higher ones unbounded where ``v`` may meet the kink."""
    zero = fl.arb(0)
    if v > k:
        return v, fl.arb(1), zero, zero
    if v < k:
        return (k, zero, zero, zero) if slope == 0 else (-v, fl.arb(-1), zero, zero)
    inf = fl.arb(0, math.inf)
    if slope == 0:
        return v.max(k), fl.arb(0.5, 0.5), inf, inf
    return v.max(-v).nonnegative_part(), fl.arb(0, 1), inf, inf


def _ipow(fl, v, n: int):
    if n < 0:
        return 1 / _ipow(fl, v, -n)
    base = v.max(-v).nonnegative_part() if n % 2 == 0 else v
    out = fl.arb(1)
    for _ in range(n):
        out = out * base
    return out


def _derivatives(fl, kind: str, y):
    """``(v, k) -> (f(v), f'(v), f''(v), f'''(v))`` as balls for one elementwise operation
    (``k``: its constant operand, ``y``: the exponent of ``pow``)."""
    two_over_sqrt_pi = 2 / fl.arb.pi().sqrt()

    def tanh(v, _):
        t = v.tanh()
        d1 = 1 - t * t
        return t, d1, -2 * t * d1, d1 * (6 * t * t - 2)

    def sigma(s):  # the logistic's derivatives from its value
        d1 = s * (1 - s)
        return s, d1, d1 * (1 - 2 * s), d1 * (1 - 6 * s * (1 - s))

    def erf(v, _):
        g = two_over_sqrt_pi * (-(v * v)).exp()
        return v.erf(), g, -2 * v * g, g * (4 * v * v - 2)

    def logaddexp(v, k):  # log(e^v + e^k) = k + log1p(e^(v - k))
        return (k + (v - k).exp().log1p(), *sigma(1 / (1 + (k - v).exp()))[:3])

    def sqrt(v, _):
        r = v.sqrt()
        return r, 1 / (2 * r), -1 / (4 * r * v), 3 / (8 * r * v * v)

    def power(v, _):
        coef = [math.prod(range(y - m + 1, y + 1)) for m in range(4)]
        return tuple(a * _ipow(fl, v, y - m) if a else fl.arb(0) for m, a in enumerate(coef))

    def neg(f):
        return lambda v, k: tuple(-a for a in f(v, k))

    table = {
        "tanh": tanh, "erf": erf, "erfc": lambda v, _: (v.erfc(), *neg(erf)(v, _)[1:]),
        "logistic": lambda v, _: sigma(1 / (1 + (-v).exp())), "logaddexp": logaddexp,
        "sqrt": sqrt, "pow": power,
        "exp": lambda v, _: (v.exp(),) * 4,
        "expm1": lambda v, _: (v.expm1(),) + (v.exp(),) * 3,
        "log": lambda v, _: (v.log(), 1 / v, -1 / (v * v), 2 / (v * v * v)),
        "log1p": lambda v, _: (v.log1p(), 1 / (1 + v), -1 / ((1 + v) * (1 + v)),
                               2 / ((1 + v) * (1 + v) * (1 + v))),
        "sin": lambda v, _: (lambda s, c: (s, c, -s, -c))(*v.sin_cos()),
        "cos": lambda v, _: (lambda s, c: (c, -s, -c, s))(*v.sin_cos()),
        "neg": lambda v, _: (-v, fl.arb(-1), fl.arb(0), fl.arb(0)),
        "abs": lambda v, _: _kink(fl, v, fl.arb(0), -1),
        "max": lambda v, k: _kink(fl, v, k, 0),
        "min": lambda v, k: (lambda a, b, c, e: (-a, b, -c, e))(*_kink(fl, -v, -k, 0)),
    }
    return table[kind]


def _slope_max(fl, v, k, uc):
    """``max(u, k)`` over the ball ``v`` and its slope ``(max(u, k) - max(u_c, k)) / (u - u_c)``
    relative to the centre's value ``u_c``: in ``[0, (r - k) / (r - u_c)]`` when ``u_c < k``,
    ``[(u_c - k) / (u_c - l), 1]`` when ``u_c > k`` (``[l, r]``: the ball's ends), tight for a
    kink at the edge of a box, where the derivative's ``[0, 1]`` is not."""
    f0, f1 = _kink(fl, v, k, 0)[:2]
    if v > k or v < k:
        return f0, f1
    if uc < k:
        r = v.upper()
        return f0, fl.arb(0).union((r - k) / (r - uc))
    if uc > k:
        low = v.lower()
        return f0, fl.arb(1).union((uc - k) / (uc - low))
    return f0, f1


_SLOPES = {
    "max": _slope_max,
    "min": lambda fl, v, k, uc: (lambda f0, s: (-f0, s))(*_slope_max(fl, -v, -k, -uc)),
    "abs": lambda fl, v, k, uc: _kink(fl, v, fl.arb(0), -1)[:2],
}


def _run(jets: _Jets, ops, x: list, sizes0: int, centre: list | None = None) -> list:
    """Every value of a program (``vals[i]``: the jets of value ``i``). With ``centre`` (the
    values of a pass at the boxes' centres) the first-order components are slopes relative to
    the centre (the kinks' are tighter than their derivatives')."""
    fl, vals, sizes = jets.fl, [x], [sizes0]
    for kind, operands, extra in ops:
        a = vals[operands[0]] if isinstance(operands[0], int) else None
        n = sizes[operands[0]] if a is not None else 0
        if kind == "dot":
            y, n = jets.dot(a, operands[1], n), operands[1].ncols()
        elif kind in ("concat", "slice"):
            parts = [vals[v] if isinstance(v, int) else jets.constant(v, len(v))
                     for v in operands]
            widths = [sizes[v] if isinstance(v, int) else len(v) for v in operands]
            if kind == "slice":
                lo, hi = extra
                y = [[comp[b * n + i] for b in range(jets.nbox) for i in range(lo, hi)]
                     for comp in a]
                n = hi - lo
            else:
                y, n = jets.columns(parts, widths), sum(widths)
        elif kind in _BINARY and isinstance(operands[1], int):
            b = vals[operands[1]]
            if kind == "mul":
                y = jets.product(a, b)
            else:
                sign = 1 if kind == "add" else -1
                y = [[u + sign * v for u, v in zip(p, q, strict=True)]
                     for p, q in zip(a, b, strict=True)]
        elif kind in ("add", "sub"):
            c = operands[1]
            sign = 1 if kind == "add" else -1
            y = [[u + sign * c[t % len(c)] for t, u in enumerate(a[0])]] + a[1:]
        elif kind in ("mul", "div"):  # linear: every component scaled
            c = operands[1] if kind == "mul" else [1 / v for v in operands[1]]
            y = [[u * c[t % len(c)] for t, u in enumerate(comp)] for comp in a]
        elif centre is not None and kind in _SLOPES:
            y = jets.unary(a, lambda v, k, uc, f=_SLOPES[kind]: f(fl, v, k, uc),
                           operands[1] if len(operands) > 1 else [fl.arb(0)],
                           centre[operands[0]][0])
        else:
            y = jets.unary(a, _derivatives(fl, kind, extra),
                           operands[1] if len(operands) > 1 else None)
        vals.append(y)
        sizes.append(n)
    return vals



# ---- bounds of boxes: three enclosures of D ------------------------------------------------


def _difference(jets: _Jets, progs, x: list, centres=(None, None)) -> tuple[list, list]:
    """``(D, runs)``: the jets of ``F_a - F_b`` and every value of both programs."""
    runs = [_run(jets, ops, x, jets.d, cen) for (ops, _, _), cen in zip(progs, centres,
                                                                          strict=True)]
    ya, yb = (vals[out] for vals, (_, out, _) in zip(runs, progs, strict=True))
    return [[u - v for u, v in zip(p, q, strict=True)] for p, q in zip(ya, yb, strict=True)], runs


def _monomials(fl, keys: list, h: np.ndarray) -> list:
    """``(m_alpha, even)`` per derivative key ``alpha``: ``Delta^alpha / alpha!`` ranges over
    ``[-m, m]``, or ``[0, m]`` when every exponent is even (``|Delta_i| <= h_i``)."""
    out = []
    for key in keys:
        counts = [key.count(i) for i in range(len(h))]
        mag = fl.arb(1)
        for i in key:
            mag = mag * fl.arb(float(h[i]))
        out.append((mag / math.prod(math.factorial(a) for a in counts),
                    all(a % 2 == 0 for a in counts)))
    return out


def _abs_bound(head, terms) -> object:
    """An upper bound of ``|head + sum coef * Delta^alpha / alpha!|`` from the ends of each
    term's range (no ball of radius ``h``: Arb's radii carry 30 bits, its midpoints all)."""
    lo, hi = head.lower(), head.upper()
    for coef, (mag, even) in terms:
        if even:
            lo, hi = lo + coef.lower().min(0) * mag, hi + coef.upper().max(0) * mag
        else:
            a = coef.abs_upper() * mag
            lo, hi = lo - a, hi + a
    return lo.abs_upper().max(hi.abs_upper())


def _bound_boxes(fl, progs, c: np.ndarray, h: np.ndarray, claims) -> list:
    """Per box ``(proven, bound, counterexample)``: whether some enclosure of every ``|D_j|``
    over ``[c - h, c + h]`` is at most its claim, the checker's best bound, and whether
    ``|D_j(c)| > claim`` for some ``j`` (proven). The enclosures: for ``r = 0..R``,

    .. math:: \\sum_{|\\alpha| < r} \\partial^\\alpha D(c) \\frac{\\Delta^\\alpha}{\\alpha!}
              + \\sum_{|\\alpha| = r} \\partial^\\alpha D(X) \\frac{\\Delta^\\alpha}{\\alpha!}

    (Taylor's formula with Lagrange's remainder; ``r = 0`` is ``D(X)``, ``r = 1`` the
    mean-value form), with ``R = BOX_ORDER``."""
    nbox, d = c.shape
    box, point = _Jets(fl, d, BOX_ORDER, nbox), _Jets(fl, d, BOX_ORDER - 1, nbox)
    over = _difference(box, progs, box.inputs(c, h))[0]
    at, centres = _difference(point, progs, point.inputs(c, None))
    slopes = over  # with kinks: the mean-value form's slopes relative to the centres
    if any(kind in _SLOPES for ops, _, _ in progs for kind, _, _ in ops):
        first = _Jets(fl, d, 1, nbox)
        slopes = _difference(first, progs, first.inputs(c, h), centres)[0]
    m = len(over[0]) // nbox
    out = []
    for b in range(nbox):
        mono = _monomials(fl, box.keys, h[b])
        proven, best, counter = True, 0.0, False
        for t in range(b * m, (b + 1) * m):
            uppers = [over[0][t].abs_upper()]
            for r in range(1, BOX_ORDER + 1):
                terms = [(at[k][t], mono[k]) for k, key in enumerate(point.keys)
                         if 0 < len(key) < r]
                terms += [((slopes if r == 1 else over)[k][t], mono[k])
                          for k, key in enumerate(box.keys) if len(key) == r]
                uppers.append(_abs_bound(at[0][t], terms))
            proven = proven and any(u <= claims[b] for u in uppers)
            best = max(best, min(float(u) if u.is_finite() else math.inf for u in uppers))
            counter = counter or at[0][t].abs_lower() > claims[b]
        out.append((proven, best, counter))
    return out


def _up(q: Fraction) -> float:
    """The least float ``>= q``."""
    f = float(q)
    return math.nextafter(f, math.inf) if Fraction(f) < q else f


def _halves(c: np.ndarray, h: np.ndarray) -> list:
    """Two boxes covering ``[c - h, c + h]`` (cut at the centre of its widest axis), their
    centres rounded to floats and half-widths rounded up: they cover it exactly."""
    a = int(np.argmax(h))
    lo, mid, hi = Fraction(c[a]) - Fraction(h[a]), Fraction(c[a]), Fraction(c[a]) + Fraction(h[a])
    out = []
    for left, right in ((lo, mid), (mid, hi)):
        m = float((left + right) / 2)
        cc, hh = c.copy(), h.copy()
        cc[a], hh[a] = m, _up(max(Fraction(m) - left, right - Fraction(m)))
        out.append((cc, hh))
    return out


# ---- the covering, in exact rationals --------------------------------------------------------


class _Domain:
    """The domain as exact rationals: a box ``[L, U]`` or a ball ``|x - q| <= R``."""

    def __init__(self, kind: str, arrays, dim: int):
        self.kind = kind
        names = {"box": ("domain_lo", "domain_hi"), "ball": ("domain_center", "domain_radius")}
        if kind not in names:
            raise CertificateError(f"check: domain kind {kind!r}; expected 'box' or 'ball'")
        a, b = (np.asarray(arrays.get(n, np.zeros(0))) for n in names[kind])
        sizes = (dim, dim if kind == "box" else 1)
        if (a.size, b.size) != sizes or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise CertificateError(f"check: the {kind}'s arrays {names[kind]} must be finite of "
                                   f"sizes {sizes}, got {(a.size, b.size)}")
        self.a = [Fraction(float(v)) for v in a.ravel()]
        self.b = [Fraction(float(v)) for v in b.ravel()]
        if kind == "box" and any(lo > hi for lo, hi in zip(self.a, self.b, strict=True)):
            raise CertificateError("check: the box domain has lo > hi")
        if kind == "ball" and not self.b[0] > 0:
            raise CertificateError("check: the ball's radius must be positive")

    def _dist2(self, box) -> list:
        return [max(Fraction(0), lo - q, q - hi) ** 2 for (lo, hi), q in zip(box, self.a,
                                                                              strict=True)]

    def meets(self, box) -> bool:
        if self.kind == "box":
            return all(lo <= u and hi >= L for (lo, hi), L, u in zip(box, self.a, self.b,
                                                                     strict=True))
        return sum(self._dist2(box)) <= self.b[0] ** 2

    def within(self, box) -> bool:
        """The domain lies in ``box``."""
        if self.kind == "box":
            return all(lo <= L and hi >= u for (lo, hi), L, u in zip(box, self.a, self.b,
                                                                     strict=True))
        r = self.b[0]
        return all(lo <= q - r and hi >= q + r for (lo, hi), q in zip(box, self.a, strict=True))

    def has(self, x) -> bool:
        x = [Fraction(float(v)) for v in x]
        if self.kind == "box":
            return all(L <= v <= u for v, L, u in zip(x, self.a, self.b, strict=True))
        return sum((v - q) ** 2 for v, q in zip(x, self.a, strict=True)) <= self.b[0] ** 2

    def clipped(self, parent, child) -> bool:
        """``child`` contains ``parent``'s intersection with the domain."""
        if not self.meets(parent):
            return True
        if self.kind == "box":
            return all(cl <= max(pl, L) and ch >= min(ph, u) for (pl, ph), (cl, ch), L, u
                       in zip(parent, child, self.a, self.b, strict=True))
        d2, r2 = self._dist2(parent), self.b[0] ** 2
        for i, ((pl, ph), (cl, ch), q) in enumerate(zip(parent, child, self.a, strict=True)):
            s2 = r2 - (sum(d2) - d2[i])  # the intersection spans q -+ sqrt(s2) on axis i
            if not (cl <= pl or (q - cl >= 0 and (q - cl) ** 2 >= s2)):
                return False
            if not (ch >= ph or (ch - q >= 0 and (ch - q) ** 2 >= s2)):
                return False
        return True


def _halves_cover(p, a, b) -> bool:
    """Boxes ``a`` and ``b`` cover box ``p``: both contain it on all axes but at most one, on
    which their intervals overlap and span it."""
    short = [k for k, (pk, ak, bk) in enumerate(zip(p, a, b, strict=True))
             if not (ak[0] <= pk[0] and ak[1] >= pk[1] and bk[0] <= pk[0] and bk[1] >= pk[1])]
    if not short:
        return True
    if len(short) > 1:
        return False
    (pl, ph), (al, ah), (bl, bh) = p[short[0]], a[short[0]], b[short[0]]
    return min(al, bl) <= pl and max(ah, bh) >= ph and max(al, bl) <= min(ah, bh)


def _tree(arrays, dim: int) -> dict:
    t = {k: np.asarray(arrays.get(f"tree_{k}", np.zeros(0)))
         for k in ("c", "h", "parent", "kind", "bound")}
    n = len(t["parent"])
    ok = (n >= 1 and t["c"].shape == t["h"].shape == (n, dim)
          and t["parent"].shape == t["kind"].shape == t["bound"].shape == (n,)
          and t["c"].dtype == t["h"].dtype == t["bound"].dtype == np.float64
          and t["parent"].dtype.kind == "i" and t["kind"].dtype.kind == "i")
    if not ok:
        raise CertificateError(f"check: the proof tree's arrays (tree_c, tree_h ({n}, {dim}) "
                               "float64; tree_parent, tree_kind integers; tree_bound float64) "
                               "are missing or malformed")
    return t


def _cover(t: dict, dom: _Domain) -> list[int]:
    """The leaves, once the tree is proven to cover the domain (else :class:`_Reject`)."""
    c, h, parent, kind, bound = (t[k] for k in ("c", "h", "parent", "kind", "bound"))
    n = len(parent)
    # a clipped box claimed to miss the domain may be anything: its parent must miss it
    void = (kind == CLIP) & (bound == -np.inf)
    bad = np.nonzero(~void & ~(np.all(np.isfinite(c), axis=1)
                               & np.all((h >= 0) & np.isfinite(h), axis=1)))[0]
    if bad.size:
        raise _Reject(int(bad[0]), f"node {bad[0]}: a box that is not finite")
    if parent[0] != -1 or kind[0] != ROOT:
        raise _Reject(0, "node 0 must be the root (parent -1, kind root)")
    wrong = np.nonzero((parent[1:] < 0) | (parent[1:] >= np.arange(1, n))
                       | ~np.isin(kind[1:], (SPLIT, CLIP)))[0]
    if wrong.size:
        raise _Reject(int(wrong[0]) + 1, f"node {wrong[0] + 1}: its parent must be an earlier "
                      "node and its kind split or clip")

    def box(i):
        if not (np.all(np.isfinite(c[i])) and np.all(np.isfinite(h[i]))):
            raise _Reject(i, f"node {i}: a box that is not finite")
        return [(Fraction(a) - Fraction(r), Fraction(a) + Fraction(r))
                for a, r in zip(c[i].tolist(), h[i].tolist(), strict=True)]

    if not dom.within(box(0)):
        raise _Reject(0, f"the root box does not contain the {dom.kind} domain")
    kids: dict[int, list[int]] = {}
    for i in range(1, n):
        kids.setdefault(int(parent[i]), []).append(i)
    for p, ch in kids.items():
        kinds = sorted(int(kind[i]) for i in ch)
        if kinds == [CLIP]:
            if not (void[ch[0]] and not dom.meets(box(p))) and not dom.clipped(box(p),
                                                                                box(ch[0])):
                raise _Reject(ch[0], f"node {ch[0]} does not contain its parent {p}'s "
                              "intersection with the domain")
        elif kinds == [SPLIT, SPLIT]:
            if not _halves_cover(box(p), box(ch[0]), box(ch[1])):
                raise _Reject(p, f"node {p} is not covered by its halves {ch}")
        else:
            raise _Reject(p, f"node {p} has children {ch[:4]} (kinds {kinds[:4]}); expected "
                          "two halves or one clipped box")
    leaves = [i for i in range(n) if i not in kids]
    for i in leaves:
        if np.isnan(bound[i]):
            raise _Reject(i, f"leaf {i} has no claimed bound (a box removed below it?)")
        if bound[i] == -np.inf and not (void[i] and not dom.meets(box(int(parent[i])))
                                        or not void[i] and not dom.meets(box(i))):
            raise _Reject(i, f"leaf {i} is claimed to miss the domain, and meets it")
    return leaves


# ---- the check ----------------------------------------------------------------------------


def _claims(fl, progs, t: dict, leaves: list[int], dom: _Domain, max_depth: int,
            stats: dict) -> None:
    """Prove every finite claim on its leaf box, splitting where needed (counting the boxes
    bounded and the depth reached in ``stats``)."""
    work = [(i, t["c"][i], t["h"][i], 0) for i in leaves if np.isfinite(t["bound"][i])]
    while work:
        batch, work = work[:BATCH], work[BATCH:]
        c, h = np.stack([w[1] for w in batch]), np.stack([w[2] for w in batch])
        claims = [float(t["bound"][w[0]]) for w in batch]
        stats["boxes"] += len(batch)
        for (i, bc, bh, level), claim, (ok, own, counter) in zip(
                batch, claims, _bound_boxes(fl, progs, c, h, claims), strict=True):
            if ok:
                continue
            where = ", ".join(f"{a - r:.6g}..{a + r:.6g}" for a, r in zip(bc, bh, strict=True))
            if counter and dom.has(bc):
                raise _Reject(i, f"leaf {i} claims {claim:.6e}, but |F_a - F_b| exceeds it "
                              f"at x = {bc.tolist()} (a point of the domain)")
            if level >= max_depth:
                raise _Reject(i, f"leaf {i}'s claim {claim:.6e} is not proven: the checker's "
                              f"bound is {own:.6e} on its piece [{where}] (split {level} times, "
                              f"max_depth = {max_depth})")
            work += [(i, cc, hh, level + 1) for cc, hh in _halves(bc, bh)]
            stats["depth"] = max(stats["depth"], level + 1)


def _prove(fl, meta: dict, arrays: dict, max_depth: int, start: float) -> CheckReport:
    dim = meta.get("dim")
    if not isinstance(dim, int) or dim < 1:
        raise CertificateError(f"check: the input dimension must be a positive int, got {dim!r}")
    dom = _Domain(meta.get("domain"), arrays, dim)
    programs = meta.get("programs")
    if not isinstance(programs, dict) or set(programs) != {"a", "b"}:
        raise CertificateError("check: the certificate must hold two programs, 'a' and 'b'")
    progs = [_parse(name, programs[name], arrays, dim, fl) for name in "ab"]
    if progs[0][2] != progs[1][2]:
        raise CertificateError(f"check: the programs have {progs[0][2]} and {progs[1][2]} "
                               "outputs")
    t = _tree(arrays, dim)
    claim, argmax = np.asarray(arrays.get("claim")), np.asarray(arrays.get("argmax"))
    if claim.shape != (2,) or argmax.shape != (dim,) or claim.dtype != np.float64:
        raise CertificateError("check: 'claim' must be [upper, lower] float64 and 'argmax' a "
                               f"point of dimension {dim}")
    upper, lower = float(claim[0]), float(claim[1])
    leaves, stats = [], {"boxes": 0, "depth": 0}

    def report(ok: bool, reason: str = "", node=None) -> CheckReport:
        return CheckReport(ok, reason, node, upper, lower, len(leaves), stats["boxes"],
                           stats["depth"], time.perf_counter() - start)

    try:
        if not lower <= upper:
            raise _Reject(None, f"lower {lower!r} is not <= upper {upper!r}")
        leaves[:] = _cover(t, dom)
        over = [i for i in leaves if not t["bound"][i] <= upper]
        if over:
            raise _Reject(over[0], f"leaf {over[0]} claims {t['bound'][over[0]]:.6e} > upper "
                          f"{upper:.6e}")
        if not np.all(np.isfinite(argmax)) or not dom.has(argmax):
            raise _Reject(None, f"argmax {argmax.tolist()} is not in the domain")
        if lower > 0:
            jets = _Jets(fl, dim, 0, 1)
            at = _difference(jets, progs, jets.inputs(argmax[None], None))[0][0]
            if not any(v.abs_lower() >= lower for v in at):
                raise _Reject(None, f"lower {lower:.6e} is not attained at argmax: "
                              f"|F_a - F_b| there is {max(float(v.abs_upper()) for v in at):.6e}")
        _claims(fl, progs, t, leaves, dom, max_depth, stats)
    except _Reject as exc:
        return report(False, exc.reason, exc.node)
    return report(True)


def check(path, *, max_depth: int = 24) -> CheckReport:
    """Check a certificate written by :meth:`Verification.save
    <jaxcompress.verification.Verification.save>` in Arb ball arithmetic (see the module
    docstring): confirm ``lower <= sup_{x in domain} max_j |F_a(x)_j - F_b(x)_j| <= upper``
    for the programs, domain and numbers in the file, or name the first node that fails.

    Args:
      path: the certificate (``.npz``).
      max_depth: how many times a leaf may be bisected further where the checker's bound is
        looser than the claimed one.

    Returns:
      A :class:`CheckReport` (``confirmed`` True or False with the reason).

    Raises:
      CertificateError: a file that is missing, truncated, foreign, damaged or malformed.
      ImportError: python-flint is not installed (``pip install 'jaxcompress[check]'``).
    """
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"check: max_depth must be an int >= 0, got {max_depth!r}")
    start = time.perf_counter()
    fl = _flint()
    meta, arrays = read(path)
    prec, fl.ctx.prec = fl.ctx.prec, PREC
    try:
        return _prove(fl, meta, arrays, max_depth, start)
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        raise CertificateError(f"check: a malformed certificate ({type(exc).__name__}: "
                               f"{exc})") from exc
    finally:
        fl.ctx.prec = prec
