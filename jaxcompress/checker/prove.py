r"""The check of a verification certificate, in Arb ball arithmetic (python-flint).

It confirms, for the file's programs ``F_a``, ``F_b``, domain ``Omega``, proof tree, ``upper``,
``lower`` and ``argmax`` (``D = F_a - F_b``),

.. math::
   \sup_{x \in \Omega} \max_j |D_j(x)| \le \texttt{upper}, \qquad
   \max_j |D_j(\texttt{argmax})| \ge \texttt{lower}, \quad \texttt{argmax} \in \Omega,

or names the first node that fails, sharing nothing with the verifier but the file:

1. **Covering**, in exact rationals (node ``i`` is ``[c_i - h_i, c_i + h_i]``, its float64
   numbers read as :class:`fractions.Fraction`): the root contains ``Omega``; a split node is
   covered by its two halves; a clipped node contains its parent's intersection with
   ``Omega`` (for a ball, on axis ``i`` it spans ``q_i -+ sqrt(R^2 - m_i)``, ``m_i`` the
   squared distance along the other axes, compared squared); a leaf claimed ``-inf`` misses
   ``Omega``; every claim is at most ``upper``.
2. **Every claim**, on its leaf box ``x = c + h t``, ``t in [-1, 1]^d``: both programs run on
   **Taylor models** of degree ``K`` in ``t`` (:class:`_Models`: coefficients as balls, the
   remainder in the radius of the constant), so that in ``D``'s model what the programs share
   cancels and only remainders of order ``h^(K+1)`` add up; ``|D_j| <= claim`` on the box
   when the model's range is. Every ``x @ W`` of a batch of boxes is one ball-matrix product;
   an activation is composed through its Taylor series with Lagrange's remainder, from Arb's
   proven enclosures; a kink (ReLU) by its linear relaxation over its argument's range. A box
   not proven is bisected along its widest axis (halves rounded outwards, exactly), to
   ``max_depth`` levels, then the check fails there.
3. **The lower end**: ``argmax`` lies in ``Omega`` (exactly) and ``|D_j(argmax)| >= lower``
   for some ``j``.
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
#: Arb working precision (bits): enough for ``D(c)``, a difference of nearly equal numbers.
PREC = 64
#: Boxes bounded per ball-matrix product.
BATCH = 64
#: The degree ``K`` of the Taylor models by input dimension (the excess over a box of
#: half-width ``h`` shrinks like ``h^(K+1)``; a model has ``C(d + K, d)`` coefficients).
ORDER = {1: 6, 2: 4, 3: 3}
_SMOOTH = ("tanh", "logistic", "exp", "expm1", "log", "log1p", "sin", "cos", "erf", "erfc",
           "sqrt", "pow")
_KINKS = ("max", "min", "abs")


class _Reject(Exception):
    def __init__(self, node, reason: str):
        super().__init__(reason)
        self.node, self.reason = node, reason


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """The outcome of :func:`check`: ``confirmed`` (every claim proven: ``lower <= sup |F_a -
    F_b| <= upper`` on the domain), else the ``reason`` and the first ``node`` that failed
    (None when not about one node); the certificate's ``upper`` and ``lower``; the proof
    tree's ``leaves``, the ``boxes`` the checker bounded (leaves and the pieces it split them
    into), the ``depth`` of its deepest split and the ``seconds`` the check took."""

    confirmed: bool
    reason: str
    node: int | None
    upper: float
    lower: float
    leaves: int
    boxes: int
    depth: int
    seconds: float

    def __str__(self) -> str:
        head = (f"confirmed: sup |F_a - F_b| in [{self.lower:.6e}, {self.upper:.6e}]"
                if self.confirmed else f"rejected: {self.reason}")
        return (f"{head}\n{self.leaves:,} leaves, {self.boxes:,} boxes bounded in Arb ball "
                f"arithmetic (split to depth {self.depth}) in {self.seconds:.2f} s")


# ---- the programs: parsed and validated, constants as balls -------------------------------


def _parse(name: str, prog, arrays, dim: int, fl) -> tuple[list, int, int]:
    """``(ops, out, size)``, ops as ``(kind, operands, extra)`` (value ids, constant rows as
    lists of balls, ``W`` as a ball matrix); a malformed program is a
    :class:`CertificateError`."""
    def bad(i, why):
        raise CertificateError(f"check: program {name}, operation {i}: {why}")

    def const(key, i):
        arr = arrays.get(key) if isinstance(key, str) else None
        if arr is None or arr.dtype != np.float64 or not np.all(np.isfinite(arr)):
            bad(i, f"constant {key!r} is missing or not finite float64")
        return arr

    try:
        steps, out, sizes, ops = list(prog["ops"]), int(prog["out"]), [dim], []
    except (KeyError, TypeError, ValueError):
        raise CertificateError(f"check: program {name} is malformed (ops / out)") from None
    for i, op in enumerate(steps):
        kind, ins, extra = op.get("op"), op.get("in"), op.get("y")
        if not isinstance(ins, list) or not ins:
            bad(i, "no operands")
        vals = [v for v in ins if isinstance(v, int)]
        if any(not 0 <= v <= i for v in vals) or len(vals) + sum(
                isinstance(v, str) for v in ins) != len(ins):
            bad(i, f"operands {ins} must be earlier values or constants")
        n = sizes[vals[0]] if vals else 0
        operands = kind == "dot" or [v if isinstance(v, int) else [
            fl.arb(x) for x in const(v, i).ravel().tolist()] for v in ins]
        if kind == "dot":
            w = const(ins[1], i) if len(ins) == 2 and len(vals) == 1 else bad(i, "dot(x, W)")
            if w.ndim != 2 or w.shape[0] != n:
                bad(i, f"W of shape {w.shape} for a value of size {n}")
            operands, n = [ins[0], fl.arb_mat(*w.shape, w.ravel().tolist())], w.shape[1]
        elif kind == "slice":
            extra = a, b = op.get("start"), op.get("stop")
            if len(ins) != 1 or not vals or not (isinstance(a, int) and isinstance(b, int)
                                                 and 0 <= a < b <= n):
                bad(i, f"slice [{a}:{b}] of a value of size {n}")
            n = b - a
        elif kind == "concat":
            n = sum(sizes[v] if isinstance(v, int) else len(v) for v in operands)
        elif kind in _SMOOTH + _KINKS + ("logaddexp", "neg", "div", "add", "sub", "mul"):
            arity = 1 if kind in _SMOOTH + ("neg", "abs") else 2
            with_const = kind in ("max", "min", "logaddexp", "div")
            if len(ins) != arity or not isinstance(ins[0], int) or (
                    with_const and not isinstance(ins[1], str)):
                bad(i, f"{kind} takes {arity} operands, a value first"
                    + (" and a constant" if with_const else ""))
            if any(isinstance(v, int) and sizes[v] != n for v in ins[1:]) or any(
                    isinstance(v, list) and len(v) not in (1, n) for v in operands[1:]):
                bad(i, f"an operand whose size is not {n} (or 1, for a constant)")
            if kind == "pow" and not isinstance(extra, int):
                bad(i, "pow without an integer exponent y")
        else:
            bad(i, f"unknown operation {kind!r}")
        ops.append((kind, operands, extra))
        sizes.append(n)
    if not 0 <= out < len(sizes):
        raise CertificateError(f"check: program {name}: output {out} is not one of its values")
    return ops, out, sizes[out]


# ---- elementwise operations: Taylor coefficients and relaxations --------------------------


def _series(fl, kind: str, v, k, y, n: int) -> list:
    """The Taylor coefficients ``f^(j)(v) / j!``, ``j < n``, of one smooth elementwise
    operation over the ball ``v`` (``k``: the constant operand, ``y``: the exponent of
    ``pow``): ``tanh`` and the logistic by their differential equations (``y' = 1 - y^2``:
    ``(j + 1) y_(j+1) = [j = 0] - sum_(i <= j) y_i y_(j-i)``; ``s' = s - s^2``), softplus
    (``logaddexp`` with ``k``) as the logistic's integral, the others by Arb's power
    series."""
    if kind in ("tanh", "logistic", "logaddexp"):
        w, tanh = v - k if kind == "logaddexp" else v, kind == "tanh"
        t = w.tanh() if tanh else 1 / (1 + (-w).exp())
        c = [t, 1 - t * t if tanh else t - t * t]
        for j in range(1, n - 1):
            conv = c[0] * c[j]
            for i in range(1, (j + 1) // 2):
                conv = conv + c[i] * c[j - i]
            conv = conv + conv + (c[j // 2] * c[j // 2] if j % 2 == 0 else 0)
            c.append((-conv if tanh else c[j] - conv) / (j + 1))
        if kind == "logaddexp":
            return [k + w.exp().log1p()] + [a / (j + 1) for j, a in enumerate(c[:n - 1])]
        return c
    if kind == "pow":  # (v + x)^y = sum_j binom(y, j) v^(y - j) x^j; u^e monotone in |u|
        def power(e):  # or in u: from the ends of the ball
            base = v.max(-v).nonnegative_part() if e % 2 == 0 else v
            p = math.prod([base.lower()] * abs(e), start=fl.arb(1)).union(
                math.prod([base.upper()] * abs(e), start=fl.arb(1)))
            return p if e >= 0 else 1 / p

        binom = [math.prod(range(y - j + 1, y + 1)) // math.factorial(j) for j in range(n)]
        return [b * power(y - j) if b else fl.arb(0) for j, b in enumerate(binom)]
    x = fl.arb_series([v, 1], prec=n)
    f = {"exp": x.exp, "expm1": lambda: x.exp() - 1, "log": x.log,
         "log1p": lambda: (1 + x).log(), "sin": x.sin, "cos": x.cos, "erf": x.erf,
         "erfc": x.erfc, "sqrt": x.sqrt}[kind]
    try:
        coeffs = f().coeffs()
    except ValueError:  # a division by a series whose ball may hold 0: unbounded
        return [fl.arb(0, math.inf)] * n
    return coeffs + [fl.arb(0)] * (n - len(coeffs))


def _relax_max(fl, u, k):
    """``(lam, mu)`` with ``max(v, k) in lam v + mu`` for every ``v`` in the ball ``u``: exact
    where ``u`` lies on one side of ``k``; else the chord ``lam = (r - k) / (r - l)`` over
    ``[l, r]`` and ``mu = (1 - lam) k + [0, lam (k - l)]`` (``max(v, k) - lam v`` is convex,
    ``(1 - lam) k + lam (k - l)`` at both ends and ``(1 - lam) k`` at the kink)."""
    if u >= k:
        return fl.arb(1), fl.arb(0)
    if u <= k:
        return fl.arb(0), k
    low, r = u.lower(), u.upper()
    lam = (r - k) / (r - low)
    return lam, (1 - lam) * k + fl.arb(0).union(lam * (k - low))


_RELAX = {  # kind: (u, k) -> (lam, mu); min(v, k) = -max(-v, -k), |v| = 2 max(v, 0) - v
    "max": _relax_max,
    "min": lambda fl, u, k: (lambda lam, mu: (lam, -mu))(*_relax_max(fl, -u, -k)),
    "abs": lambda fl, u, k: (lambda lam, mu: (2 * lam - 1, 2 * mu))(*_relax_max(fl, u, k)),
}


# ---- a batch of boxes: both programs run once on Taylor models of every value --------------


def _add(rows: list | None, more: list | None, scale=None) -> list | None:
    """``rows + scale * more`` entrywise (``None``: a row of zeros)."""
    if more is None:
        return rows
    if scale is None:
        return more if rows is None else [a + b for a, b in zip(rows, more, strict=True)]
    if rows is None:
        return [a * s for a, s in zip(more, scale, strict=True)]
    return [r + a * s for r, a, s in zip(rows, more, scale, strict=True)]


class _Models:
    """``B`` boxes ``x = c + h t``, ``t in [-1, 1]^d``, on Taylor models of degree ``K`` in
    ``t`` (Berz and Makino's Taylor models, the remainder carried in the radius of the
    constant coefficient). A value of ``n`` entries is a list of rows, one per monomial
    ``t^alpha``, ``|alpha| <= K`` (graded: ``1`` first), each a flat list of ``B * n`` balls
    (box ``b``'s entry ``i`` at ``b * n + i``) or ``None`` (zero): for every ``t``, entry
    ``u(t) in sum_alpha p_alpha t^alpha`` evaluated in ball arithmetic. So ``x @ W`` is one
    ball-matrix product of the rows (the coefficients combine exactly, the radii by ``|W|``),
    and in the difference of two programs' models what they share cancels."""

    def __init__(self, fl, c: np.ndarray, h: np.ndarray, order: int):
        self.fl, self.K, (self.B, d) = fl, order, c.shape
        mono = sorted((e for e in itertools.product(range(order + 1), repeat=d)
                       if sum(e) <= order), key=lambda e: (sum(e), [-v for v in e]))
        index, self.deg, self.M = {e: i for i, e in enumerate(mono)}, [sum(e) for e in mono], \
            len(mono)
        # t^alpha ranges over [0, 1] when every exponent is even, else over [-1, 1]
        self.T = [fl.arb(0.5, 0.5) if all(v % 2 == 0 for v in e) else fl.arb(0, 1)
                  for e in mono]
        self.keep = [(i, j, index[tuple(a + b for a, b in zip(e, f, strict=True))])
                     for i, e in enumerate(mono) for j, f in enumerate(mono)
                     if self.deg[i] + self.deg[j] <= order]
        self.x = [[fl.arb(float(v)) for v in c.ravel()]] + [None] * (self.M - 1)
        for k in range(d):
            self.x[1 + k] = [fl.arb(float(h[b, i]) if i == k else 0) for b in range(self.B)
                             for i in range(d)]

    def spread(self, u: list) -> list:
        """The range of every entry's non-constant part."""
        out = [self.fl.arb(0)] * len(u[0])
        for row, t in zip(u[1:], self.T[1:], strict=True):
            if row is not None:
                out = [s + p * t for s, p in zip(out, row, strict=True)]
        return out

    def truncated(self, u: list, w: list) -> list:
        """The terms of degree ``<= K`` of ``u w``."""
        out = [None] * self.M
        for i, j, k in self.keep:
            if u[i] is not None and w[j] is not None:
                out[k] = _add(out[k], u[i], w[j])
        return out

    def degree_sums(self, u: list) -> list:
        """``A_p = sum_(|alpha| = p) |u_alpha|`` per entry, ``p = 0 .. K`` (``None``: 0)."""
        sums = [None] * (self.K + 1)
        for row, p in zip(u, self.deg, strict=True):
            if row is not None:
                sums[p] = [abs(a) for a in row] if sums[p] is None else [
                    s + abs(a) for s, a in zip(sums[p], row, strict=True)]
        return sums

    def product(self, u: list, w: list) -> list:
        """``u w``: the terms of degree ``<= K`` kept, the others bounded by the degree sums
        ``A`` of ``u`` and ``B`` of ``w`` as ``sum_(p + q > K) A_p B_q`` (``|t^alpha| <= 1``)
        and added to the constant's radius."""
        out, a, b = self.truncated(u, w), self.degree_sums(u), self.degree_sums(w)
        tail = None
        for p in range(1, self.K + 1):
            for q in range(self.K + 1 - p, self.K + 1):
                if a[p] is not None and b[q] is not None:
                    tail = _add(tail, a[p], b[q])
        return [_add(out[0], tail, [self.fl.arb(0, 1)] * len(out[0]))] + out[1:]

    def smooth(self, u: list, series) -> list:
        """``f(u)``, ``u = a + P``, by Taylor's formula about the midpoint ``m`` of ``a``:

        .. math:: f(u) = \\sum_{j \\le K} c_j\\, P^j
                  + \\tfrac{f^{(K+1)}(\\xi)}{(K+1)!} P^{K+1} + f'(\\zeta)\\,(a - m),
                  \\qquad c_j = \\tfrac{f^{(j)}(m)}{j!},

        ``xi`` and ``zeta`` in ``u``'s range ``U`` (``f``'s coefficients over ``U`` enclose
        theirs), ``P^{K+1}`` in ``S^{K+1}`` (``S``: ``P``'s range). ``P^j`` keeps its terms
        of degree ``<= K``; the rest is at most ``A(1)^j - sum_(r <= K) [z^r] A(z)^j`` with
        ``A(z) = sum_p A_p z^p`` (the degree sums of ``P``)."""
        K, n, one = self.K, len(u[0]), self.fl.arb(0, 1)
        mids, spread, poly = [a.mid() for a in u[0]], self.spread(u), [None] + u[1:]
        at = [series(m, t, K + 1) for t, m in enumerate(mids)]
        over = [series(a + s, t, K + 2) for t, (a, s) in enumerate(zip(u[0], spread,
                                                                       strict=True))]
        out = [[c[0] + g[1] * (a - m) + g[K + 1] * math.prod([s] * (K + 1)) for c, g, a, m, s
                in zip(at, over, u[0], mids, spread, strict=True)]] + [None] * (self.M - 1)
        sums = self.degree_sums(poly)
        total = [sum((r[t] for r in sums if r is not None), self.fl.arb(0)) for t in range(n)]
        gen, total_j, power = sums, total, poly
        for j in range(1, K + 1):
            coef = [c[j] for c in at]
            if j > 1:
                power = self.truncated(power, poly)
                last, gen = gen, [None] * (K + 1)
                for r in range(j, K + 1):
                    for p in range(1, r):
                        if last[r - p] is not None and sums[p] is not None:
                            gen[r] = _add(gen[r], last[r - p], sums[p])
                total_j = [a * b for a, b in zip(total_j, total, strict=True)]
                high = total_j
                for row in gen:
                    if row is not None:
                        high = [h - g for h, g in zip(high, row, strict=True)]
                out[0] = _add(out[0], high, [abs(c) * one for c in coef])
            out = [_add(o, p, coef) for o, p in zip(out, power, strict=True)]
        return out

    def kink(self, u: list, relax, k: list) -> list:
        """A kink, by its linear relaxation over the entry's range (:data:`_RELAX`)."""
        ks = k * (len(u[0]) // len(k))
        lm = [relax(self.fl, a + s, c) for a, s, c in zip(u[0], self.spread(u), ks,
                                                          strict=True)]
        lam = [v[0] for v in lm]
        return [[a * v[0] + v[1] for a, v in zip(u[0], lm, strict=True)]] + [
            _add(None, row, lam) for row in u[1:]]

    def constant(self, row: list, n: int) -> list:
        return [row[t % len(row)] for t in range(self.B * n)]

    def dot(self, u: list, w) -> list:
        live, size, out = [k for k, r in enumerate(u) if r is not None], self.B * w.ncols(), \
            [None] * self.M
        flat = (self.fl.arb_mat(len(live) * self.B, w.nrows(), [v for k in live for v in u[k]])
                * w).entries()
        for r, k in enumerate(live):
            out[k] = flat[r * size:(r + 1) * size]
        return out

    def run(self, ops, sizes0: int, start: tuple = ([], [])) -> list:
        """Every value of a program over the batch (``start``: the values and sizes of a
        prefix of it already run; ``self.sizes``: the sizes)."""
        fl, B = self.fl, self.B
        vals, sizes = list(start[0]) or [self.x], list(start[1]) or [sizes0]
        for kind, operands, extra in ops[len(vals) - 1:]:
            a = vals[operands[0]] if isinstance(operands[0], int) else None
            n = sizes[operands[0]] if a is not None else 0
            other = operands[1] if len(operands) > 1 else None
            if kind == "dot":
                y, n = self.dot(a, other), other.ncols()
            elif kind == "concat":
                parts = [vals[v] if isinstance(v, int) else [self.constant(v, len(v))]
                         + [None] * (self.M - 1) for v in operands]
                widths = [sizes[v] if isinstance(v, int) else len(v) for v in operands]
                y = [None if all(p[k] is None for p in parts) else
                     [v for b in range(B) for p, w in zip(parts, widths, strict=True)
                      for v in (p[k] or [fl.arb(0)] * (B * w))[b * w:(b + 1) * w]]
                     for k in range(self.M)]
                n = sum(widths)
            elif kind == "slice":
                lo, hi = extra
                y = [row and [row[b * n + i] for b in range(B) for i in range(lo, hi)]
                     for row in a]
                n = hi - lo
            elif kind == "neg":
                y = [row and [-v for v in row] for row in a]
            elif kind in ("add", "sub"):
                sign = [fl.arb(1 if kind == "add" else -1)] * (B * n)
                if isinstance(other, int):
                    y = [_add(p, q, sign) for p, q in zip(a, vals[other], strict=True)]
                else:
                    y = [_add(a[0], self.constant(other, n), sign)] + a[1:]
            elif kind == "mul" and isinstance(other, int):
                y = self.product(a, vals[other])
            elif kind in ("mul", "div"):  # linear: every row scaled
                c = self.constant(other if kind == "mul" else [1 / v for v in other], n)
                y = [_add(None, row, c) for row in a]
            elif kind in _KINKS:
                y = self.kink(a, _RELAX[kind], other or [fl.arb(0)])
            else:
                y = self.smooth(a, lambda v, t, m, kind=kind, k=other, y=extra: _series(
                    fl, kind, v, k and k[t % len(k)], y, m))
            vals.append(y)
            sizes.append(n)
        self.sizes = sizes
        return vals


def _bound_boxes(fl, progs, c: np.ndarray, h: np.ndarray, claims, shared: int = 0) -> list:
    """Per box ``(proven, bound, counterexample)``: whether ``|D_j| <= claim`` over the box for
    every output ``j`` (the range of ``D``'s Taylor model, the difference of the programs'),
    the checker's bound, and whether ``|D_j(c)| > claim`` for some ``j`` (proven: the
    constant coefficient encloses ``D(c)``). The programs' first ``shared`` operations are
    the same: run once."""
    models = _Models(fl, c, h, ORDER.get(c.shape[1], 2))
    va = models.run(progs[0][0], c.shape[1])
    vb = models.run(progs[1][0], c.shape[1], (va[:shared + 1], models.sizes[:shared + 1]))
    ys = [va[progs[0][1]], vb[progs[1][1]]]
    m = progs[0][2]
    diff = [_add(p, q, [fl.arb(-1)] * (len(c) * m)) for p, q in zip(*ys, strict=True)]
    at = diff[0]
    over = [a + s for a, s in zip(at, models.spread(diff), strict=True)]
    out = []
    for b, claim in enumerate(claims):
        rows = range(b * m, (b + 1) * m)
        best = max(float(over[t].abs_upper()) if over[t].is_finite() else math.inf
                   for t in rows)
        out.append((all(over[t].abs_upper() <= claim for t in rows), best,
                    any(at[t].abs_lower() > claim for t in rows)))
    return out


def _halves(c: np.ndarray, h: np.ndarray) -> list:
    """Two boxes covering ``[c - h, c + h]``, cut at the centre of its widest axis: centres
    rounded to floats, half-widths rounded up, so that they cover it exactly."""
    a, out = int(np.argmax(h)), []
    lo, mid, hi = Fraction(c[a]) - Fraction(h[a]), Fraction(c[a]), Fraction(c[a]) + Fraction(h[a])
    for left, right in ((lo, mid), (mid, hi)):
        m = float((left + right) / 2)
        r = max(Fraction(m) - left, right - Fraction(m))
        cc, hh = c.copy(), h.copy()
        cc[a], hh[a] = m, float(r) if Fraction(float(r)) >= r else math.nextafter(float(r),
                                                                                  math.inf)
        out.append((cc, hh))
    return out


# ---- the covering, in exact rationals --------------------------------------------------------


class _Domain:
    """The domain as exact rationals: a box ``[L, U]`` (``a``, ``b``) or a ball
    ``|x - q| <= R`` (``a = q``, ``b = [R]``); boxes as lists of ``(lo, hi)``."""

    def __init__(self, kind: str, arrays, dim: int):
        names = {"box": ("domain_lo", "domain_hi"), "ball": ("domain_center", "domain_radius")}
        if kind not in names:
            raise CertificateError(f"check: domain kind {kind!r}; expected 'box' or 'ball'")
        a, b = (np.asarray(arrays.get(n, np.zeros(0))) for n in names[kind])
        sizes = (dim, dim if kind == "box" else 1)
        if (a.size, b.size) != sizes or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise CertificateError(f"check: the {kind}'s arrays {names[kind]} must be finite of "
                                   f"sizes {sizes}, got {(a.size, b.size)}")
        self.kind, self.a, self.b = kind, [Fraction(float(v)) for v in a.ravel()], [
            Fraction(float(v)) for v in b.ravel()]
        if kind == "box" and any(lo > hi for lo, hi in zip(self.a, self.b, strict=True)):
            raise CertificateError("check: the box domain has lo > hi")
        if kind == "ball" and not self.b[0] > 0:
            raise CertificateError("check: the ball's radius must be positive")
        # the domain's bounding box
        self.hull = (list(zip(self.a, self.b, strict=True)) if kind == "box" else
                     [(q - self.b[0], q + self.b[0]) for q in self.a])

    def _dist2(self, box) -> list:
        return [max(Fraction(0), lo - q, q - hi) ** 2 for (lo, hi), q in zip(box, self.a,
                                                                              strict=True)]

    def meets(self, box) -> bool:
        if self.kind == "box":
            return all(lo <= u and hi >= L for (lo, hi), (L, u) in zip(box, self.hull,
                                                                       strict=True))
        return sum(self._dist2(box)) <= self.b[0] ** 2

    def clipped(self, parent, child) -> bool:
        """``child`` contains ``parent``'s intersection with the domain."""
        if not self.meets(parent):
            return True
        if self.kind == "box":
            return all(cl <= max(pl, L) and ch >= min(ph, u) for (pl, ph), (cl, ch), (L, u)
                       in zip(parent, child, self.hull, strict=True))
        d2, r2 = self._dist2(parent), self.b[0] ** 2
        for i, ((pl, ph), (cl, ch), q) in enumerate(zip(parent, child, self.a, strict=True)):
            s2 = r2 - (sum(d2) - d2[i])  # the intersection spans q -+ sqrt(s2) on axis i
            if not ((cl <= pl or (q - cl >= 0 and (q - cl) ** 2 >= s2))
                    and (ch >= ph or (ch - q >= 0 and (ch - q) ** 2 >= s2))):
                return False
        return True


def _box(c, h) -> list:
    return [(Fraction(a) - Fraction(r), Fraction(a) + Fraction(r))
            for a, r in zip(c.tolist(), h.tolist(), strict=True)]


def _cover(t: dict, dom: _Domain) -> list[int]:
    """The leaves, once the tree is proven to cover the domain (else :class:`_Reject`): the
    root holds it, a split node is covered by its two halves (equal to it on all axes but
    one, whose intervals overlap and span it), a clipped node holds its parent's part of it."""
    c, h, parent, kind, bound = (t[k] for k in ("c", "h", "parent", "kind", "bound"))
    n = len(parent)
    void = (kind == CLIP) & (bound == -np.inf)  # claimed to miss it: may be anything
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
    boxes = {}

    def box(i):
        if i not in boxes:
            if not (np.all(np.isfinite(c[i])) and np.all(np.isfinite(h[i]))):
                raise _Reject(i, f"node {i}: a box that is not finite")
            boxes[i] = _box(c[i], h[i])
        return boxes[i]

    if not dom.clipped([(L - 1, u + 1) for L, u in dom.hull], box(0)):
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
            short = [(pk, ak, bk) for pk, ak, bk in zip(box(p), box(ch[0]), box(ch[1]),
                                                        strict=True)
                     if not (ak[0] <= pk[0] <= pk[1] <= ak[1] and bk[0] <= pk[0] <= pk[1] <= bk[1])]
            if len(short) > 1 or short and not (  # one axis: the halves overlap and span it
                    min(short[0][1][0], short[0][2][0]) <= short[0][0][0]
                    and max(short[0][1][1], short[0][2][1]) >= short[0][0][1]
                    and max(short[0][1][0], short[0][2][0]) <= min(short[0][1][1], short[0][2][1])):
                raise _Reject(p, f"node {p} is not covered by its halves {ch}")
        else:
            raise _Reject(p, f"node {p} has children {ch[:4]} (kinds {kinds[:4]}); expected "
                          "two halves or one clipped box")
    leaves = [i for i in range(n) if i not in kids]
    for i in leaves:
        if np.isnan(bound[i]):
            raise _Reject(i, f"leaf {i} has no claimed bound (a box removed below it?)")
        if bound[i] == -np.inf and dom.meets(box(int(parent[i]) if void[i] else i)):
            raise _Reject(i, f"leaf {i} is claimed to miss the domain, and meets it")
    return leaves


# ---- the check ----------------------------------------------------------------------------


def _claims(fl, progs, t: dict, leaves: list[int], dom: _Domain, max_depth: int,
            stats: dict, shared: int) -> None:
    """Prove every finite claim on its leaf box, splitting where needed (a box whose bound is
    ``rho`` times its claim into ``2^k`` pieces at once, ``k ~ d log2(rho) / (K + 1)``: the
    excess of a degree-``K`` model shrinks like ``h^(K+1)``)."""
    work = [(i, t["c"][i], t["h"][i], 0) for i in leaves if np.isfinite(t["bound"][i])]
    power = ORDER.get(len(t["c"][0]), 2) + 1
    while work:
        batch, work = work[:BATCH], work[BATCH:]
        claims = [float(t["bound"][w[0]]) for w in batch]
        stats["boxes"] += len(batch)
        for (i, bc, bh, level), claim, (ok, own, counter) in zip(batch, claims, _bound_boxes(
                fl, progs, np.stack([w[1] for w in batch]), np.stack([w[2] for w in batch]),
                claims, shared), strict=True):
            if ok:
                continue
            if counter and dom.meets(_box(bc, 0 * bc)):
                raise _Reject(i, f"leaf {i} claims {claim:.6e}, but |F_a - F_b| exceeds it "
                              f"at x = {bc.tolist()} (a point of the domain)")
            if level >= max_depth:
                where = ", ".join(f"{a - r:.6g}..{a + r:.6g}" for a, r in zip(bc, bh,
                                                                              strict=True))
                raise _Reject(i, f"leaf {i}'s claim {claim:.6e} is not proven: the checker's "
                              f"bound is {own:.6e} on its piece [{where}] (split {level} times, "
                              f"max_depth = {max_depth})")
            pieces, ratio = [(bc, bh)], own / claim if claim > 0 else math.inf
            for _ in range(min(max(1, int(len(bc) * math.log2(min(ratio, 2.0**30)) / power)),
                               2 * len(bc), max_depth - level)):
                pieces = [half for cc, hh in pieces for half in _halves(cc, hh)]
                level += 1
            work += [(i, cc, hh, level) for cc, hh in pieces]
            stats["depth"] = max(stats["depth"], level)


def _prove(fl, meta: dict, arrays: dict, max_depth: int, start: float) -> CheckReport:
    dim, programs = meta.get("dim"), meta.get("programs")
    if not isinstance(dim, int) or dim < 1:
        raise CertificateError(f"check: the input dimension must be a positive int, got {dim!r}")
    dom = _Domain(meta.get("domain"), arrays, dim)
    if not isinstance(programs, dict) or set(programs) != {"a", "b"}:
        raise CertificateError("check: the certificate must hold two programs, 'a' and 'b'")
    progs = [_parse(name, programs[name], arrays, dim, fl) for name in "ab"]
    shared = 0  # the operations the programs begin with alike (a network and its variant)
    for p, q in zip(programs["a"]["ops"], programs["b"]["ops"], strict=False):
        if ({k: v for k, v in p.items() if k != "in"} != {k: v for k, v in q.items() if k != "in"}
                or len(p["in"]) != len(q["in"]) or not all(
                    x == y if isinstance(x, int) else isinstance(y, str) and np.array_equal(
                        arrays[x], arrays[y]) for x, y in zip(p["in"], q["in"], strict=True))):
            break
        shared += 1
    if progs[0][2] != progs[1][2]:
        raise CertificateError(f"check: the programs have {progs[0][2]} and {progs[1][2]} "
                               "outputs")
    t = {k: np.asarray(arrays.get(f"tree_{k}", np.zeros(0)))
         for k in ("c", "h", "parent", "kind", "bound")}
    n = len(t["parent"])
    if not (n >= 1 and t["c"].shape == t["h"].shape == (n, dim)
            and t["parent"].shape == t["kind"].shape == t["bound"].shape == (n,)
            and t["c"].dtype == t["h"].dtype == t["bound"].dtype == np.float64
            and t["parent"].dtype.kind == "i" and t["kind"].dtype.kind == "i"):
        raise CertificateError(f"check: the proof tree's arrays (tree_c, tree_h ({n}, {dim}) "
                               "float64; tree_parent, tree_kind integers; tree_bound float64) "
                               "are missing or malformed")
    claim, argmax = np.asarray(arrays.get("claim")), np.asarray(arrays.get("argmax"))
    if claim.shape != (2,) or argmax.shape != (dim,) or claim.dtype != np.float64:
        raise CertificateError("check: 'claim' must be [upper, lower] float64 and 'argmax' a "
                               f"point of dimension {dim}")
    upper, lower = float(claim[0]), float(claim[1])
    leaves, stats = [], {"boxes": 0, "depth": 0}
    try:
        if not lower <= upper:
            raise _Reject(None, f"lower {lower!r} is not <= upper {upper!r}")
        leaves[:] = _cover(t, dom)
        over = [i for i in leaves if not t["bound"][i] <= upper]
        if over:
            raise _Reject(over[0], f"leaf {over[0]} claims {t['bound'][over[0]]:.6e} > upper "
                          f"{upper:.6e}")
        if not np.all(np.isfinite(argmax)) or not dom.meets(_box(argmax, 0 * argmax)):
            raise _Reject(None, f"argmax {argmax.tolist()} is not in the domain")
        if lower > 0:
            models = _Models(fl, argmax[None], np.zeros((1, dim)), 1)
            ys = [models.run(ops, dim)[out][0] for ops, out, _ in progs]
            at = [p - q for p, q in zip(*ys, strict=True)]
            if not any(v.abs_lower() >= lower for v in at):
                raise _Reject(None, f"lower {lower:.6e} is not attained at argmax: "
                              f"|F_a - F_b| there is {max(float(v.abs_upper()) for v in at):.6e}")
        _claims(fl, progs, t, leaves, dom, max_depth, stats, shared)
        ok, reason, node = True, "", None
    except _Reject as exc:
        ok, reason, node = False, exc.reason, exc.node
    return CheckReport(ok, reason, node, upper, lower, len(leaves), stats["boxes"],
                       stats["depth"], time.perf_counter() - start)


def check(path, *, max_depth: int = 24) -> CheckReport:
    """Check a certificate written by :meth:`Verification.save
    <jaxcompress.verification.Verification.save>` in Arb ball arithmetic (see the module
    docstring): confirm ``lower <= sup_{x in domain} max_j |F_a(x)_j - F_b(x)_j| <= upper``
    for the programs, domain and numbers in the file, or name the first node that fails.

    Args:
      path: the certificate (``.npz``).
      max_depth: how many times a leaf may be bisected where the checker's bound is looser
        than its claim.

    Returns:
      A :class:`CheckReport` (``confirmed`` True or False with the reason).

    Raises:
      CertificateError: a file that is missing, truncated, foreign, damaged or malformed.
      ImportError: python-flint is not installed (``pip install 'jaxcompress[check]'``).
    """
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"check: max_depth must be an int >= 0, got {max_depth!r}")
    start = time.perf_counter()
    try:
        import flint as fl
    except ImportError as exc:
        raise ImportError("check: needs python-flint (Arb ball arithmetic): pip install "
                          "'jaxcompress[check]' (python-flint==0.9.0)") from exc
    meta, arrays = read(path)
    prec, fl.ctx.prec = fl.ctx.prec, PREC
    try:
        return _prove(fl, meta, arrays, max_depth, start)
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        raise CertificateError(f"check: a malformed certificate ({type(exc).__name__}: "
                               f"{exc})") from exc
    finally:
        fl.ctx.prec = prec
