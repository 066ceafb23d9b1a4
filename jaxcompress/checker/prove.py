r"""The check of a verification certificate in Arb ball arithmetic (python-flint): for ``D =
F_a - F_b`` it proves ``sup_(x in Omega) max_j |D_j(x)| <= upper`` by (1) the tree's covering of
``Omega`` in exact rationals (:func:`_cover`), (2) each leaf's claim on its box by ``D``'s Taylor
model (:class:`_Models`, :func:`_claims`), and ``max_j |D_j(argmax)| >= lower``, ``argmax in
Omega``, or names the first node that fails (``docs/verify.md``, "A certificate anyone can check").
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import sys
import time
from fractions import Fraction

import numpy as np

from jaxcompress.checker.fileformat import CertificateError, read

__all__ = ["CheckReport", "check"]

ROOT, SPLIT, CLIP = 0, 1, 2
PREC = 64  # Arb's working precision (bits): enough for D(c), a difference of nearly equal numbers
BATCH = 64  # boxes bounded per ball-matrix product
SAY_EVERY = 5.0  # seconds between progress lines
ORDER = {1: 6, 2: 4, 3: 4, 4: 3}  # the models' degree K by input dimension, 2 above (fastest)
_ARB_SERIES = {  # f(x + s) as Arb's power series in s
    "exp": lambda s: s.exp(), "expm1": lambda s: s.exp() - 1, "log": lambda s: s.log(),
    "log1p": lambda s: (1 + s).log(), "sin": lambda s: s.sin(), "cos": lambda s: s.cos(),
    "erf": lambda s: s.erf(), "erfc": lambda s: s.erfc(), "sqrt": lambda s: s.sqrt()}
_SMOOTH = ("tanh", "logistic", "pow", "logaddexp", *_ARB_SERIES)
_KINKS = ("max", "min", "abs")
#: The operands after the first (a value): "" none, "v" a value or a constant, "c" a constant.
_ARGS = {**dict.fromkeys(("neg", "slice", "abs", *_SMOOTH), ""), "logaddexp": "c",
         "add": "v", "sub": "v", "mul": "v", "max": "c", "min": "c", "div": "c", "dot": "c"}


class _Reject(Exception):
    """``(node, reason)``: the first node that fails (None: the certificate as a whole)."""


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """:func:`check`'s outcome: ``confirmed`` (``lower <= sup |F_a - F_b| <= upper`` proven) or
    the ``reason`` and first ``node`` that failed; the ``boxes`` bounded, the deepest split."""

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


def _map(f, *arrays, nout: int = 1):  # f on every entry (object arrays of balls, or floats)
    return np.frompyfunc(f, len(arrays), nout)(*arrays)


def _parse(name: str, prog, arrays, dim: int, fl) -> tuple[list, int, list]:
    """``(ops, out, sizes)``, ops ``(kind, operands, extra)`` (value ids, constants as balls,
    ``W`` a ball matrix), or :class:`CertificateError`."""
    def bad(i, why):
        raise CertificateError(f"check: program {name}, operation {i}: {why}")
    try:
        steps, out, sizes, ops = list(prog["ops"]), int(prog["out"]), [dim], []
    except (KeyError, TypeError, ValueError):
        raise CertificateError(f"check: program {name} is malformed (ops / out)") from None
    for i, op in enumerate(steps):
        kind, ins, extra = op.get("op"), op.get("in"), op.get("y")
        if not isinstance(ins, list) or not ins or not all(
                isinstance(v, int) and 0 <= v <= i or isinstance(v, str) and v in arrays
                and arrays[v].dtype == np.float64 and np.all(np.isfinite(arrays[v])) for v in ins):
            bad(i, f"operands {ins} must be earlier values or finite float64 constants")
        operands = [v if isinstance(v, int) else arrays[v] if kind == "dot" else _map(
            fl.arb, arrays[v].ravel()) for v in ins]  # W stays float64 for its ball matrix
        n, more = sizes[ins[0]] if isinstance(ins[0], int) else 0, _ARGS.get(kind)
        if kind == "concat":
            n = sum(sizes[v] if isinstance(v, int) else v.size for v in operands)
        elif more is None:
            bad(i, f"unknown operation {kind!r}")
        elif len(ins) != 1 + len(more) or not isinstance(ins[0], int) or (
                more == "c" and not isinstance(ins[1], str)):
            bad(i, f"{kind} takes {1 + len(more)} operands, a value first"
                + (" and a constant" if more == "c" else ""))
        elif kind == "slice":
            extra = a, b = op.get("start"), op.get("stop")
            if not (isinstance(a, int) and isinstance(b, int) and 0 <= a < b <= n):
                bad(i, f"slice [{a}:{b}] of a value of size {n}")
            n = b - a
        elif kind == "dot":
            if (w := operands[1]).ndim != 2 or len(w) != n:
                bad(i, f"W of shape {w.shape} for a value of size {n}")
            operands, n = [ins[0], fl.arb_mat(*w.shape, w.ravel().tolist())], w.shape[1]
        elif any(sizes[v] != n if isinstance(v, int) else v.size not in (1, n)
                 for v in operands[1:]):
            bad(i, f"an operand whose size is not {n} (or 1, for a constant)")
        elif kind == "pow" and not isinstance(extra, int):
            bad(i, "pow without an integer exponent y")
        ops.append((kind, operands, extra))
        sizes.append(n)
    if not 0 <= out < len(sizes):
        raise CertificateError(f"check: program {name}: output {out} is not one of its values")
    return ops, out, sizes


def _series(fl, kind: str, v: np.ndarray, k, y, n: int) -> list:
    """``f^(j)(v) / j!``, ``j < n``, over the balls ``v`` (constant ``k``, power ``y``): tanh, the
    logistic by ``y' = 1 - y^2``, ``s - s^2`` (``(j + 1) y_(j+1) = [j = 0] - sum_i y_i y_(j-i)``),
    softplus as its integral (increasing: from a wide ball's ends), ``(x + s)^y`` by ``sum_j
    binom(y, j) x^(y - j) s^j`` (``x^e``, ``|x|^e`` from the ends), the others by Arb's series."""
    def rising(f, w):
        return _map(lambda x: fx if (fx := f(x)).is_finite() else f(x.lower()).union(
            f(x.upper())), w)
    def power(x, e):
        base = x.max(-x).nonnegative_part() if e % 2 == 0 else x
        p = (base.lower() ** abs(e)).union(base.upper() ** abs(e))
        return p if e >= 0 else 1 / p

    if kind in ("tanh", "logistic", "logaddexp"):
        w, tanh = v - k if kind == "logaddexp" else v, kind == "tanh"
        c = [rising(lambda x: x.tanh() if tanh else 1 / (1 + (-x).exp()), w)]
        c.append(1 - c[0] * c[0] if tanh else c[0] - c[0] * c[0])
        for j in range(1, n - 1):
            conv = sum((c[i] * c[j - i] for i in range(1, (j + 1) // 2)), c[0] * c[j])
            conv = conv + conv + c[j // 2] * c[j // 2] if j % 2 == 0 else conv + conv
            c.append((-conv if tanh else c[j] - conv) / (j + 1))
        return c[:n] if kind != "logaddexp" else [k + rising(lambda x: x.exp().log1p(), w)] + [
            a / (j + 1) for j, a in enumerate(c[:n - 1])]
    out = np.empty((len(v), n), dtype=object)
    for e, x in enumerate(v):
        if kind == "pow":
            out[e] = [fl.arb(0) if b == 0 else b * power(x, y - j) for j, b in enumerate(
                math.prod(range(y - j + 1, y + 1)) // math.factorial(j) for j in range(n))]
            continue
        try:  # a division by a series whose ball may hold 0 (log, sqrt): unbounded
            got = _ARB_SERIES[kind](fl.arb_series([x, 1], prec=n)).coeffs()
        except ValueError:
            got = [fl.arb(0, math.inf)] * n
        out[e] = got + [fl.arb(0)] * (n - len(got))
    return list(out.T)


def _relax_max(fl, u, k):
    """``max(v, k) in lam v + mu`` on the ball ``u = [l, r]``: the chord ``lam = (r - k) / (r
    - l)``, ``mu = (1 - lam) k + [0, lam (k - l)]`` (``max(v, k) - lam v`` is convex)."""
    if u >= k or u <= k:  # wholly above or below the kink: exact
        return (fl.arb(1), fl.arb(0)) if u >= k else (fl.arb(0), k)
    low, r = u.lower(), u.upper()
    lam = (r - k) / (r - low)
    return lam, (1 - lam) * k + fl.arb(0).union(lam * (k - low))


_RELAX = {  # kind: (u, k) -> (lam, mu); min(v, k) = -max(-v, -k), |v| = 2 max(v, 0) - v
    "max": _relax_max,
    "min": lambda fl, u, k: (lambda lam, mu: (lam, -mu))(*_relax_max(fl, -u, -k)),
    "abs": lambda fl, u, k: (lambda lam, mu: (2 * lam - 1, 2 * mu))(*_relax_max(fl, u, k)),
}


class _Models:
    """``B`` boxes ``x = c + h t``, ``t in [-1, 1]^d``, on Taylor models of degree ``K``: a value of
    ``n`` entries is an ``(M, B n)`` ball array, row ``alpha`` (by degree) the coefficient of
    ``t^alpha``, ``u(t) in sum_alpha p_alpha t^alpha`` (the remainder in the constant's radius)."""

    def __init__(self, fl, c: np.ndarray, h: np.ndarray, order: int):
        self.fl, self.K, (self.B, d) = fl, order, c.shape
        mono = [e for p in range(order + 1) for e in sorted({tuple(map(m.count, range(d))) for m
                in itertools.combinations_with_replacement(range(d), p)}, reverse=True)]
        index, self.M, self.deg = {e: i for i, e in enumerate(mono)}, len(mono), np.array(
            [sum(e) for e in mono])
        self.pairs = [(i, j, index[tuple(np.add(e, f))]) for i, e in enumerate(mono)
                      for j, f in enumerate(mono) if sum(e) + sum(f) <= order]
        self.cuts = np.searchsorted(self.deg, np.arange(1, order + 1))
        self.T = np.array([fl.arb(0.5, 0.5) if all(v % 2 == 0 for v in e) else fl.arb(0, 1)
                           for e in mono], dtype=object)[:, None]  # the range of t^alpha
        self.x = self.constant(d, _map(fl.arb, c.ravel()))
        for k in range(d):
            self.x[1 + k, k::d] = _map(fl.arb, h[:, k])

    def constant(self, n: int, row=None) -> np.ndarray:
        out = np.full((self.M, self.B * n), self.fl.arb(0), dtype=object)
        out[0] = np.resize(self.fl.arb(0) if row is None else row, self.B * n)
        return out

    def join(self, parts) -> np.ndarray:
        """Values side by side (each box's entries concatenated)."""
        return np.concatenate([p.reshape(self.M, self.B, p.shape[1] // self.B) for p in parts],
                              axis=2).reshape(self.M, -1)

    def spread(self, u: np.ndarray) -> np.ndarray:
        """The range of ``u - u_0`` over the box."""
        return (u[1:] * self.T[1:]).sum(axis=0)

    def sums(self, u: np.ndarray, lo: int = 0) -> list:
        """``A_p = sum_(|alpha| = p) |u_alpha|``, ``p = 0 .. K`` (none below ``lo``)."""
        return [0] * lo + [np.abs(row).sum(axis=0) for row in np.split(u, self.cuts)[lo:]]

    def truncated(self, u: np.ndarray, w: np.ndarray, lo=(0, 0), hi=(), b=None) -> tuple:
        """``(T, E)``: the terms of degree ``<= K`` of ``u w`` (of ``u``'s rows of degree
        ``lo[0] .. hi[0]`` and ``w``'s of ``lo[1] .. hi[1]``, the others zero) and a bound on
        the rest, ``E = sum_(p + q > K) A_p B_q`` (:meth:`sums`, ``b``: ``w``'s if known)."""
        (K, deg), hi = (self.K, self.deg), hi or (self.K, self.K)
        left, right, to = (np.array(v) for v in zip(*[
            (i, j, k) for i, j, k in self.pairs
            if lo[0] <= deg[i] <= hi[0] and lo[1] <= deg[j] <= hi[1]], strict=True))
        terms, out = u[left] * w[right], self.constant(u.shape[1] // self.B)
        for k in set(to.tolist()):
            out[k] = terms[to == k].sum(axis=0)
        pq = [(p, q) for p in range(max(1, lo[0]), hi[0] + 1)
              for q in range(max(K + 1 - p, lo[1]), hi[1] + 1)]
        a, b = (self.sums(u, lo[0]), b or self.sums(w, lo[1])) if pq else ((), ())
        return out, sum(a[p] * b[q] for p, q in pq)

    def smooth(self, u: np.ndarray, series) -> np.ndarray:
        """``f(a + P) in sum_(j <= K) c_j P^j + f^(K+1)(U) / (K+1)! S^(K+1) + f'(U) (a - m)``,
        ``c_j = f^(j)(m) / j!`` at ``a``'s midpoint ``m``, ``U``, ``S`` the ranges of ``u``, ``P``
        (where smaller: ``P^(K+1)`` economized, ``- r^(K+1) T_(K+1)(P / r) / 2^K`` leaving degree
        ``K``, ``r = |S|``, remainder ``|c_(K+1)| r^(K+1) / 2^K + f^(K+2)(U) / (K+2)! S^(K+2)``);
        ``P^j = T_j + E_j``, ``T_j`` of degree ``<= K`` (``>= j``, ``<= j top``, ``top`` ``P``'s
        degree), ``|E_j| <= (dropped) + |E_(j-1)| sum_p A_p``. ``f(U)`` where narrower."""
        K, a, fl = self.K, u[0], self.fl
        top = next((p for p in range(K, 1, -1) if not all(
            v.is_zero() for v in u[self.deg == p].flat)), 1)
        mid, spread = _map(fl.arb.mid, a), self.spread(u)
        c, g, r = series(mid, K + 2), series(a + spread, K + 3), _map(fl.arb.abs_upper, spread)
        t, s = np.polynomial.chebyshev.cheb2poly([0] * (K + 1) + [1]), [spread] * (K + 2)
        rem = [g[K + 1] * math.prod(s[1:]), g[K + 2] * math.prod(s) + fl.arb(0, 1) * c[K + 1] * r
               ** (K + 1) / 2**K]
        use = _map(lambda x, y: y.abs_upper() < x.abs_upper(), *rem).astype(bool)
        c = [np.where(use, c[m] - c[K + 1] * round(t[m]) * r ** (K + 1 - m) / 2**K, c[m])
             for m in range(K + 1)]
        poly = u.copy()
        poly[0] = fl.arb(0)
        sums = self.sums(poly, 1)
        out, total, power, err = poly * c[1], sum(sums), poly, 0
        out[0] = c[0] + g[1] * (a - mid) + np.where(use, rem[1], rem[0])
        for j in range(2, K + 1):
            power, tail = self.truncated(power, poly, (j - 1, 1), (
                min(K, (j - 1) * top), top), sums)
            err, rows = tail + err * total if j > 2 else tail, self.deg >= j
            out[rows] = out[rows] + power[rows] * c[j]
            out[0] = out[0] + np.abs(c[j]) * err * fl.arb(0, 1)
        wide = _map(lambda v, r: not v.rad() <= r.rad(), out[0], g[0]).astype(bool)
        out[:, wide], out[0, wide] = fl.arb(0), g[0][wide]
        return out

    def dot(self, u: np.ndarray, w) -> np.ndarray:
        flat = self.fl.arb_mat(u.size // w.nrows(), w.nrows(), u.ravel().tolist()) * w
        return np.array(flat.entries(), dtype=object).reshape(self.M, -1)

    def run(self, ops, dim: int, start=None) -> tuple[list, list]:
        """The values of a program and their sizes (``start``: those of a prefix)."""
        vals, sizes = (list(s) for s in start or ([self.x], [dim]))
        fl, M, B = self.fl, self.M, self.B
        for kind, (x, *rest), extra in ops[len(vals) - 1:]:
            a, n = (vals[x], sizes[x]) if isinstance(x, int) else (None, 0)
            b = (vals[rest[0]] if isinstance(rest[0], int) else np.resize(rest[0], B * n)) if (
                rest and kind not in ("dot", "concat")) else None  # a model, or a row
            if kind == "dot":
                y = self.dot(a, rest[0])
            elif kind == "concat":
                y = self.join([vals[v] if isinstance(v, int) else self.constant(len(v), v)
                               for v in (x, *rest)])
            elif kind == "slice":
                y = a.reshape(M, B, n)[:, :, extra[0]:extra[1]].reshape(M, -1)
            elif kind == "neg":
                y = -a
            elif kind in ("add", "sub"):  # a constant adds to the constant row only
                y, rows = a.copy(), 0 if b.ndim == 1 else slice(None)
                y[rows] = a[rows] + b if kind == "add" else a[rows] - b
            elif kind == "mul" and b.ndim == 2:
                y, tail = self.truncated(a, b)
                y[0] = y[0] + tail * fl.arb(0, 1)
            elif kind in ("mul", "div"):  # linear: every row scaled
                y = a * (b if kind == "mul" else 1 / b)
            elif kind in _KINKS:
                lam, mu = _map(lambda v, k, r=_RELAX[kind]: r(fl, v, k), a[0] + self.spread(a),
                               fl.arb(0) if b is None else b, nout=2)
                y = a * lam
                y[0] = y[0] + mu
            else:
                y = self.smooth(a, lambda v, m, kind=kind, k=b, y=extra: _series(
                    fl, kind, v, k, y, m))
            vals.append(y)
            sizes.append(y.shape[1] // B)
        return vals, sizes


class _Difference:
    """``D = F_a - F_b`` on Taylor models: the ``shared`` operations both programs begin with run
    once; if both end in affine ones after them, ``D = [v_ids] A + d`` exactly (``linear``, found
    by running the ends on the identity): the shared values' remainders cancel too."""

    def __init__(self, fl, programs: dict, arrays: dict, progs: list):
        self.fl, self.progs, self.shared, self.linear = fl, progs, 0, None
        for p, q in zip(programs["a"]["ops"], programs["b"]["ops"], strict=False):
            if {**p, "in": 0} != {**q, "in": 0} or len(p["in"]) != len(q["in"]) or not all(
                    x == y or isinstance(x, str) and isinstance(y, str) and np.array_equal(
                        arrays[x], arrays[y]) for x, y in zip(p["in"], q["in"], strict=True)):
                break
            self.shared += 1
        shared, sizes = self.shared, progs[0][2]
        if any(kind in _SMOOTH + _KINKS or kind == "mul" and isinstance(operands[1], int)
               for ops, _, _ in progs for kind, operands, _ in ops[shared:]):
            return
        ids = sorted({v for ops, out, _ in progs for v in [out, *itertools.chain.from_iterable(
            operands for _, operands, _ in ops[shared:])] if isinstance(v, int) and v <= shared})
        cuts = np.cumsum([0] + [sizes[v] for v in ids])
        basis = _Models(fl, np.zeros((1, cuts[-1])), np.ones((1, cuts[-1])), 1)
        cols = dict(zip(ids, np.split(basis.x, cuts[1:-1], axis=1), strict=True))
        start = [cols.get(v) for v in range(shared + 1)], sizes[:shared + 1]
        a, b = (basis.run(ops, 0, start)[0][out] for ops, out, _ in progs)
        self.linear = ids, fl.arb_mat(*a[1:].shape, (a[1:] - b[1:]).ravel().tolist()), a[0] - b[0]

    def __call__(self, c: np.ndarray, h: np.ndarray, order: int = 0) -> tuple:
        """``D``'s constant row and its range over the boxes ``c -+ h`` (box by box)."""
        (ops, out, _), d, shared = self.progs[0], c.shape[1], self.shared
        models = _Models(self.fl, c, h, order or ORDER.get(d, 2))
        if self.linear:
            ids, w, const = self.linear
            va = models.run(ops[:shared], d)[0]
            diff = models.dot(models.join([va[v] for v in ids]), w)
            diff[0] = diff[0] + np.resize(const, diff.shape[1])
        else:
            va = models.run(ops, d)
            diff = va[0][out] - models.run(self.progs[1][0], d, [s[:shared + 1] for s in va])[
                0][self.progs[1][1]]
        return diff[0], diff[0] + models.spread(diff)


class _Domain:
    """The domain ``{x : sum_i dist(x_i, [L_i, U_i])^2 <= R^2}`` in exact rationals, a box if
    ``R = 0``, a ball if ``L = U``: ``core`` the intervals, ``r = R``; boxes: ``(lo, hi)`` lists."""

    def __init__(self, kind: str, a: np.ndarray, b: np.ndarray):
        a, b = ([Fraction(v) for v in x.ravel().tolist()] for x in (a, b))
        self.kind, self.core, self.r = kind, [*zip(a, b, strict=True)] if kind == "box" else [
            (q, q) for q in a], 0 if kind == "box" else b[0]
        if any(lo > hi for lo, hi in self.core) or kind == "ball" and not self.r > 0:
            raise CertificateError(f"check: the {kind} domain is empty (lo > hi, or radius <= 0)")

    def _dist2(self, box) -> list:
        return [max(Fraction(0), lo - U, L - hi) ** 2
                for (lo, hi), (L, U) in zip(box, self.core, strict=True)]

    def meets(self, box) -> bool:
        return sum(self._dist2(box)) <= self.r ** 2

    def clipped(self, parent, child) -> bool:
        """``child`` holds ``parent``'s part of the domain: on axis ``i`` the ``x_i`` with
        ``dist(x_i, [L_i, U_i])^2 <= s_i = R^2 - sum_(j != i) dist_j^2`` (compared squared)."""
        d2 = self._dist2(parent)
        slack = self.r ** 2 - sum(d2)  # < 0: the parent misses the domain
        return slack < 0 or all(
            (cl <= pl or L - cl >= 0 and (L - cl) ** 2 >= slack + d)
            and (ch >= ph or ch - U >= 0 and (ch - U) ** 2 >= slack + d)
            for (pl, ph), (cl, ch), (L, U), d in zip(parent, child, self.core, d2, strict=True))


def _box(c, h) -> list:
    return [(Fraction(a) - Fraction(r), Fraction(a) + Fraction(r))
            for a, r in zip(c.tolist(), h.tolist(), strict=True)]


def _cover(t: dict, dom: _Domain, upper: float) -> list[int]:
    """The leaves, the tree proven to cover the domain: the root holds it, two halves their parent
    (overlapping and spanning it on one axis), a clipped node its parent's part of the domain, a
    leaf claimed ``-inf`` misses it; the others claim at most ``upper``."""
    c, h, parent, kind, bound = (t[k] for k in ("c", "h", "parent", "kind", "bound"))
    if parent[0] != -1 or kind[0] != ROOT:
        raise _Reject(0, "node 0 must be the root (parent -1, kind root)")
    if (wrong := np.nonzero((parent[1:] < 0) | (parent[1:] >= np.arange(1, len(c)))
                            | ~np.isin(kind[1:], (SPLIT, CLIP)))[0]).size:
        raise _Reject(int(wrong[0]) + 1, f"node {wrong[0] + 1}: its parent must be an earlier "
                      "node and its kind split or clip")
    kids, leaf = {}, np.ones(len(c), bool)
    for i, p in enumerate(parent[1:].tolist(), 1):
        kids.setdefault(p, []).append(i)
        leaf[p] = False
    void = leaf & (kind == CLIP) & (bound == -np.inf)  # claimed to miss the domain: any box
    fine = np.all(np.isfinite(c) & np.isfinite(h) & (h >= 0), axis=1)
    if (bad := np.nonzero(~fine & ~void)[0]).size:
        raise _Reject(int(bad[0]), f"node {bad[0]}: a box that is not finite")
    box = [_box(c[i], h[i]) if fine[i] else None for i in range(len(c))]
    if not dom.clipped([(L - dom.r - 1, U + dom.r + 1) for L, U in dom.core], box[0]):
        raise _Reject(0, f"the root box does not contain the {dom.kind} domain")
    for p, ch in kids.items():
        kinds, (P, A, B) = sorted(int(kind[i]) for i in ch), (box[p], box[ch[0]], box[ch[-1]])
        if kinds == [CLIP]:
            if dom.meets(P) and not (A and dom.clipped(P, A)):
                raise _Reject(ch[0], f"node {ch[0]} does not contain its parent {p}'s "
                              "intersection with the domain")
        elif kinds == [SPLIT, SPLIT]:
            cut = [k for k, (pk, ak, bk) in enumerate(zip(P, A, B, strict=True)) if not (
                ak[0] <= pk[0] and pk[1] <= ak[1] and bk[0] <= pk[0] and pk[1] <= bk[1])]
            k = cut[0] if cut else 0
            if len(cut) > 1 or not (min(A[k][0], B[k][0]) <= P[k][0] <= P[k][1] <= max(
                    A[k][1], B[k][1]) and max(A[k][0], B[k][0]) <= min(A[k][1], B[k][1])):
                raise _Reject(p, f"node {p} is not covered by its halves {ch}")
        else:
            raise _Reject(p, f"node {p} has children {ch[:4]} (kinds {kinds[:4]}); expected "
                          "two halves or one clipped box")
    for i in (leaves := np.nonzero(leaf)[0].tolist()):
        if np.isnan(bound[i]):
            raise _Reject(i, f"leaf {i} has no claimed bound (a box removed below it?)")
        if bound[i] > upper:
            raise _Reject(i, f"leaf {i} claims {bound[i]:.6e} > upper {upper:.6e}")
        if bound[i] == -np.inf and dom.meets(box[int(parent[i])] if void[i] else box[i]):
            raise _Reject(i, f"leaf {i} is claimed to miss the domain, and meets it")
    return leaves


def _halves(c: np.ndarray, h: np.ndarray):
    """Two boxes covering ``c -+ h``, cut at its widest axis's centre (half-widths rounded up)."""
    a = int(np.argmax(h))
    ends = (Fraction(c[a]) - Fraction(h[a]), Fraction(c[a]), Fraction(c[a]) + Fraction(h[a]))
    for left, right in zip(ends, ends[1:], strict=False):
        cc, hh, m = c.copy(), h.copy(), float((left + right) / 2)
        up = float(r := max(Fraction(m) - left, right - Fraction(m)))
        cc[a], hh[a] = m, up if Fraction(up) >= r else math.nextafter(up, math.inf)
        yield cc, hh


def _claims(diff: _Difference, t: dict, leaves: list, max_depth: int, stats: dict, dom,
            share=(0, 1), say=None) -> None:
    """Every finite claim, on the root box if it proves the least, else on each leaf (those of
    ``share = (i, n)``: every n-th from the i-th), split where needed (a bound ``rho`` times the
    claim: ``2^k`` pieces, ``k ~ d log2(rho) / (K + 1)``); ``say``: told the leaves proven (all
    their pieces), the boxes and the time left at that pace every :data:`SAY_EVERY` s."""
    work = [(i, t["c"][i], t["h"][i], 0) for i in leaves if np.isfinite(t["bound"][i])]
    d, least = len(t["c"][0]), min([float(t["bound"][w[0]]) for w in work], default=0.0)
    stats["boxes"] += 1
    if work and all(v.abs_upper() <= least for v in diff(t["c"][:1], t["h"][:1])[1]):
        return
    work = work[share[0]::share[1]]
    pieces_left, done, start = {w[0]: 1 for w in work}, 0, time.perf_counter()
    last = start
    while work:
        batch, work = work[:BATCH], work[BATCH:]
        stats["boxes"] += len(batch)
        if say and (now := time.perf_counter()) - last >= SAY_EVERY:
            last, n = now, len(pieces_left)
            say(f"{done:,} of {n:,} leaves proven, {stats['boxes']:,} boxes, {now - start:.0f} s"
                + (f", about {(now - start) * (n - done) / done:.0f} s left" if done else ""))
        at, over = (v.reshape(len(batch), -1) for v in diff(np.stack([w[1] for w in batch]),
                                                            np.stack([w[2] for w in batch])))
        for (i, bc, bh, level), at_b, over_b in zip(batch, at, over, strict=True):
            claim = float(t["bound"][i])
            if all(v.abs_upper() <= claim for v in over_b):
                pieces_left[i] -= 1
                done += pieces_left[i] == 0
                continue
            if any(v.abs_lower() > claim for v in at_b) and dom.meets(_box(bc, 0 * bc)):
                raise _Reject(i, f"leaf {i} claims {claim:.6e}, but |F_a - F_b| exceeds it "
                              f"at x = {bc.tolist()} (a point of the domain)")
            own = max(float(v.abs_upper()) if v.is_finite() else math.inf for v in over_b)
            if level >= max_depth:
                raise _Reject(i, f"leaf {i}'s claim {claim:.6e} is not proven: the checker's "
                              f"bound is {own:.6e} on its piece {bc.tolist()} -+ {bh.tolist()} "
                              f"(split {level} times, max_depth = {max_depth})")
            pieces, ratio = [(bc, bh)], own / claim if claim > 0 else math.inf
            k = min(max(1, int(d * math.log2(min(ratio, 2.0**30)) / (ORDER.get(d, 2) + 1))),
                    2 * d, max_depth - level)
            for _ in range(k):
                pieces = [half for cc, hh in pieces for half in _halves(cc, hh)]
            work += [(i, cc, hh, level + k) for cc, hh in pieces]
            pieces_left[i] += len(pieces) - 1
            stats["depth"] = max(stats["depth"], level + k)


def _prove(fl, meta: dict, arrays: dict, max_depth: int, start: float, share=(0, 1),
           progress=False) -> CheckReport:
    dim, programs, kind = meta.get("dim"), meta.get("programs"), meta.get("domain")
    if not (isinstance(dim, int) and dim > 0 and kind in ("box", "ball") and isinstance(
            programs, dict) and set(programs) == {"a", "b"}):
        raise CertificateError(f"check: the header needs a dimension > 0 (got {dim!r}), a domain "
                               f"'box' or 'ball' (got {kind!r}) and two programs, 'a' and 'b'")
    progs = [_parse(name, programs[name], arrays, dim, fl) for name in "ab"]
    if (m := [sizes[out] for _, out, sizes in progs])[0] != m[1]:
        raise CertificateError(f"check: the programs have {m[0]} and {m[1]} outputs")
    n = len(arrays.get("tree_parent", ()))
    lo, hi = ("domain_lo", "domain_hi") if kind == "box" else ("domain_center", "domain_radius")
    for key, shape in {lo: (dim,), hi: (dim,) if kind == "box" else (1,), "tree_c": (n, dim),
                       "tree_h": (n, dim), "tree_parent": (n,), "tree_kind": (n,),
                       "tree_bound": (n,), "claim": (2,), "argmax": (dim,)}.items():
        a, ints = arrays.get(key), key in ("tree_parent", "tree_kind")
        if n < 1 or a is None or a.shape != shape or (
                a.dtype.kind != "i" if ints else a.dtype != np.float64) or (
                key in (lo, hi) and not np.all(np.isfinite(a))):
            raise CertificateError(f"check: the array {key!r} is missing or not of shape {shape}"
                                   f" and {'integers' if ints else 'float64'} (finite: domain)")
    dom = _Domain(kind, arrays[lo], arrays[hi])
    t = {k: arrays[f"tree_{k}"] for k in ("c", "h", "parent", "kind", "bound")}
    (upper, lower), argmax = arrays["claim"].tolist(), arrays["argmax"]
    diff, leaves, stats = _Difference(fl, programs, arrays, progs), [], {"boxes": 0, "depth": 0}
    try:
        if not lower <= upper:
            raise _Reject(None, f"lower {lower!r} is not <= upper {upper!r}")
        leaves[:] = _cover(t, dom, upper)
        if not np.all(np.isfinite(argmax)) or not dom.meets(_box(argmax, 0 * argmax)):
            raise _Reject(None, f"argmax {argmax.tolist()} is not in the domain")
        at = diff(argmax[None], np.zeros((1, dim)), 1)[0] if lower > 0 else ()
        if lower > 0 and not any(v.abs_lower() >= lower for v in at):
            raise _Reject(None, f"lower {lower:.6e} is not attained at argmax: |F_a - F_b| "
                          f"there is {max(float(v.abs_upper()) for v in at):.6e}")
        _claims(diff, t, leaves, max_depth, stats, dom, share, progress and (
            lambda line: print(f"check: {line}" + (f" (process 1 of {share[1]}, its share)"
                               if share[1] > 1 else ""), file=sys.stderr, flush=True)))
        ok, reason, node = True, "", None
    except _Reject as exc:
        ok, (node, reason) = False, exc.args
    return CheckReport(ok, reason, node, upper, lower, len(leaves), stats["boxes"],
                       stats["depth"], time.perf_counter() - start)


def _part(meta: dict, arrays: dict, max_depth: int, share, progress) -> CheckReport:
    """One process's part of :func:`check`: every step but the claims not in its ``share``
    (the first process tells its progress)."""
    import flint as fl
    fl.ctx.prec = PREC
    return _prove(fl, meta, arrays, max_depth, time.perf_counter(), share,
                  progress and share[0] == 0)


def check(path, *, max_depth: int = 24, workers: int | None = 1, progress: bool = False
          ) -> CheckReport:
    """Confirm ``lower <= sup_(x in domain) max_j |F_a(x)_j - F_b(x)_j| <= upper`` for a file of
    :meth:`Verification.save <jaxcompress.verification.Verification.save>`, or name the first node
    that fails (``max_depth``: how often a leaf may be bisected; ``workers``: processes that share
    the leaves, at most one per 64; ``None``: one per core this process may use and 256 leaves;
    more than one spawns processes, so a script needs Python's ``if __name__ == "__main__":``;
    ``progress``: a line on stderr every 5 s, the leaves proven and the time left at that pace).
    :class:`CertificateError` for a missing, truncated, foreign, damaged or malformed file;
    ``ImportError`` without python-flint."""
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"check: max_depth must be an int >= 0, got {max_depth!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ValueError(f"check: workers must be an int >= 1 or None, got {workers!r}")
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"check: progress must be a bool, got {progress!r}")
    start = time.perf_counter()
    try:
        import flint as fl
    except ImportError as exc:
        raise ImportError("check: needs python-flint (Arb ball arithmetic): pip install "
                          "'jaxcompress[check]' (python-flint==0.9.0)") from exc
    meta, arrays = read(path)
    bound, cores = arrays.get("tree_bound"), (len(os.sched_getaffinity(0)) if hasattr(
        os, "sched_getaffinity") else os.cpu_count() or 1)
    claims = int(np.isfinite(bound).sum()) if isinstance(bound, np.ndarray) and (
        bound.dtype == np.float64) else 0
    n = min(workers, claims // BATCH) if workers else min(cores, claims // (4 * BATCH))
    prec, fl.ctx.prec = fl.ctx.prec, PREC
    try:
        if n <= 1:
            return _prove(fl, meta, arrays, max_depth, start, progress=bool(progress))
        import concurrent.futures as cf
        import multiprocessing as mp
        with cf.ProcessPoolExecutor(n, mp_context=mp.get_context("spawn")) as pool:
            parts = list(pool.map(_part, *zip(*[(meta, arrays, max_depth, (i, n), bool(progress))
                                               for i in range(n)], strict=True)))
        failed = min((p for p in parts if not p.confirmed), default=parts[0],
                     key=lambda p: -1 if p.node is None else p.node)
        return dataclasses.replace(failed, boxes=sum(p.boxes for p in parts) - n + 1,
                                   depth=max(p.depth for p in parts),
                                   seconds=time.perf_counter() - start)
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        raise CertificateError(f"check: a malformed certificate ({type(exc).__name__}: "
                               f"{exc})") from exc
    finally:
        fl.ctx.prec = prec
