r"""The check of a verification certificate, in Arb ball arithmetic (python-flint).

For the file's programs ``F_a``, ``F_b``, domain ``Omega``, proof tree, ``upper``, ``lower``
and ``argmax`` (``D = F_a - F_b``) it confirms

.. math::
   \sup_{x \in \Omega} \max_j |D_j(x)| \le \texttt{upper}, \qquad
   \max_j |D_j(\texttt{argmax})| \ge \texttt{lower}, \quad \texttt{argmax} \in \Omega,

or names the first node that fails, sharing nothing with the verifier but the file:
(1) the tree covers ``Omega``, in exact rationals (:func:`_cover`); (2) every leaf's claim
holds on its box ``x = c + h t``, ``t in [-1, 1]^d``, by the range of ``D``'s Taylor model
(:class:`_Models`), the leaf bisected where it is not proven; (3) ``argmax`` lies in
``Omega`` and ``|D_j(argmax)| >= lower`` for some ``j``. ``docs/verify.md`` states each step.
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
           "sqrt", "pow", "logaddexp")
_KINKS = ("max", "min", "abs")


class _Reject(Exception):
    def __init__(self, node, reason: str):
        super().__init__(reason)
        self.node, self.reason = node, reason


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """:func:`check`'s outcome: ``confirmed`` (``lower <= sup |F_a - F_b| <= upper`` proven),
    else the ``reason`` and the first ``node`` that failed; the file's ``upper``, ``lower``,
    ``leaves``; the ``boxes`` bounded (the root, leaves, pieces), the deepest split."""

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


def _balls(fl, values, *, wrap: bool = True) -> np.ndarray:  # wrap: numbers, else balls
    out = np.empty(len(values), dtype=object)
    out[:] = [fl.arb(v) for v in values] if wrap else values
    return out


def _parse(name: str, prog, arrays, dim: int, fl) -> tuple[list, int, list]:
    """``(ops, out, sizes)``: ops ``(kind, operands, extra)`` (value ids, constants as ball
    arrays, ``W`` a ball matrix), the output, the values' sizes; else :class:`CertificateError`."""
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
        operands = kind == "dot" or [v if isinstance(v, int) else _balls(
            fl, const(v, i).ravel().tolist()) for v in ins]
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
        elif kind in _SMOOTH + _KINKS + ("neg", "div", "add", "sub", "mul"):
            arity = 1 if kind in _SMOOTH[:-1] + ("neg", "abs") else 2
            with_const = kind in ("max", "min", "logaddexp", "div")
            if len(ins) != arity or not isinstance(ins[0], int) or (
                    with_const and not isinstance(ins[1], str)):
                bad(i, f"{kind} takes {arity} operands, a value first"
                    + (" and a constant" if with_const else ""))
            if any(isinstance(v, int) and sizes[v] != n for v in ins[1:]) or any(
                    isinstance(v, np.ndarray) and len(v) not in (1, n) for v in operands[1:]):
                bad(i, f"an operand whose size is not {n} (or 1, for a constant)")
            if kind == "pow" and not isinstance(extra, int):
                bad(i, "pow without an integer exponent y")
        else:
            bad(i, f"unknown operation {kind!r}")
        ops.append((kind, operands, extra))
        sizes.append(n)
    if not 0 <= out < len(sizes):
        raise CertificateError(f"check: program {name}: output {out} is not one of its values")
    return ops, out, sizes


def _series(fl, kind: str, v: np.ndarray, k, y, n: int) -> list:
    """``f^(j)(v) / j!``, ``j < n``, over the balls ``v`` (``k``: the constant, ``y``: the
    power): ``tanh``, the logistic by ``y' = 1 - y^2``, ``s' = s - s^2`` (``(j + 1) y_(j+1) =
    [j = 0] - sum_i y_i y_(j-i)``), softplus as its integral (increasing: over a wide ball from
    its ends), ``pow`` by the binomial series from the ends, the others by Arb's series."""
    def rising(f, x):
        y = f(x)
        return y if y.is_finite() else f(x.lower()).union(f(x.upper()))

    if kind in ("tanh", "logistic", "logaddexp"):
        w, tanh = v - k if kind == "logaddexp" else v, kind == "tanh"
        t = _balls(fl, [rising(lambda x: x.tanh() if tanh else 1 / (1 + (-x).exp()), x)
                        for x in w], wrap=False)
        c = [t, 1 - t * t if tanh else t - t * t]
        for j in range(1, n - 1):
            conv = sum((c[i] * c[j - i] for i in range(1, (j + 1) // 2)), c[0] * c[j])
            conv = conv + conv + (c[j // 2] * c[j // 2] if j % 2 == 0 else 0)
            c.append((-conv if tanh else c[j] - conv) / (j + 1))
        return c[:n] if kind != "logaddexp" else [k + _balls(fl, [rising(
            lambda x: x.exp().log1p(), x) for x in w], wrap=False)] + [
                a / (j + 1) for j, a in enumerate(c[:n - 1])]
    out = np.empty((len(v), n), dtype=object)
    for e, x in enumerate(v):
        if kind == "pow":  # (x + s)^y = sum_j binom(y, j) x^(y - j) s^j; |u|^e, u^e monotone
            def power(e, x=x):
                base = x.max(-x).nonnegative_part() if e % 2 == 0 else x
                p = math.prod([base.lower()] * abs(e), start=fl.arb(1)).union(
                    math.prod([base.upper()] * abs(e), start=fl.arb(1)))
                return p if e >= 0 else 1 / p

            binom = [math.prod(range(y - j + 1, y + 1)) // math.factorial(j) for j in range(n)]
            out[e] = [b * power(y - j) if b else fl.arb(0) for j, b in enumerate(binom)]
            continue
        s = fl.arb_series([x, 1], prec=n)
        try:  # a division by a series whose ball may hold 0 (log, sqrt): unbounded
            got = {"exp": s.exp, "expm1": lambda s=s: s.exp() - 1, "log": s.log, "sin": s.sin,
                   "log1p": lambda s=s: (1 + s).log(), "cos": s.cos, "erf": s.erf,
                   "erfc": s.erfc, "sqrt": s.sqrt}[kind]().coeffs()
        except ValueError:
            got = [fl.arb(0, math.inf)] * n
        out[e] = got + [fl.arb(0)] * (n - len(got))
    return list(out.T)


def _relax_max(fl, u, k):
    """``max(v, k) in lam v + mu`` on the ball ``u = [l, r]``: the chord ``lam = (r - k) / (r
    - l)``, ``mu = (1 - lam) k + [0, lam (k - l)]`` (``max(v, k) - lam v`` is convex)."""
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


class _Models:
    """``B`` boxes ``x = c + h t``, ``t in [-1, 1]^d``, on Taylor models of degree ``K``: a
    value of ``n`` entries is an ``(M, B n)`` ball array, row ``alpha`` (by degree) the
    coefficient of ``t^alpha``, ``u(t) in sum_alpha p_alpha t^alpha`` (the remainder in the
    constant's radius); ``x @ W`` is one ball-matrix product."""

    def __init__(self, fl, c: np.ndarray, h: np.ndarray, order: int):
        self.fl, self.K, (self.B, d) = fl, order, c.shape
        mono = sorted({tuple(map(e.count, range(d))) for p in range(order + 1)
                       for e in itertools.combinations_with_replacement(range(d), p)},
                      key=lambda e: (sum(e), [-v for v in e]))
        index, self.M, self.deg = {e: i for i, e in enumerate(mono)}, len(mono), np.array(
            [sum(e) for e in mono])
        upto = np.searchsorted(self.deg, np.arange(order + 1), side="right")
        self.pairs, self.plans = [(i, j, index[tuple(np.add(e, f))]) for i, e in enumerate(mono)
                                  for j, f in enumerate(mono[:upto[order - self.deg[i]]])], {}
        self.cuts = np.searchsorted(self.deg, np.arange(1, order + 1))
        self.T = _balls(fl, [fl.arb(0.5, 0.5) if all(v % 2 == 0 for v in e) else fl.arb(0, 1)
                             for e in mono], wrap=False)[:, None]
        self.x = self.zeros(d)
        self.x[0] = _balls(fl, c.ravel().tolist())
        for k in range(d):
            self.x[1 + k, k::d] = _balls(fl, h[:, k].tolist())

    def zeros(self, n: int) -> np.ndarray:
        return np.full((self.M, self.B * n), self.fl.arb(0), dtype=object)

    def constant(self, row: np.ndarray, n: int) -> np.ndarray:
        out = self.zeros(n)
        out[0] = np.resize(row, self.B * n)
        return out

    def spread(self, u: np.ndarray) -> np.ndarray:  # t^alpha: [0, 1] if alpha even, else +-1
        return (u[1:] * self.T[1:]).sum(axis=0) if self.M > 1 else u[0] * 0

    def sums(self, u: np.ndarray, lo: int = 0) -> list:
        """``A_p = sum_(|alpha| = p) |u_alpha|``, ``p = 0 .. K`` (none below ``lo``)."""
        return [0] * lo + [np.abs(row).sum(axis=0) for row in np.split(u, self.cuts)[lo:]]

    def truncated(self, u: np.ndarray, w: np.ndarray, lo=(0, 0), hi=(), b=None) -> tuple:
        """``(T, E)``: the terms of degree ``<= K`` of ``u w`` (of ``u``'s rows of degree
        ``lo[0] .. hi[0]`` and ``w``'s of ``lo[1] .. hi[1]``, the others zero) and a bound on
        the rest, ``E = sum_(p + q > K) A_p B_q`` (:meth:`sums`, ``b``: ``w``'s if known)."""
        (K, deg), hi = (self.K, self.deg), hi or (self.K, self.K)
        if (lo, hi) not in self.plans:
            left, right, to = (np.array(v) for v in zip(*[
                (i, j, k) for i, j, k in self.pairs
                if lo[0] <= deg[i] <= hi[0] and lo[1] <= deg[j] <= hi[1]], strict=True))
            self.plans[lo, hi] = left, right, [(k, to == k) for k in sorted(set(to.tolist()))]
        left, right, groups = self.plans[lo, hi]
        terms, out = u[left] * w[right], np.full(u.shape, self.fl.arb(0), dtype=object)
        for k, g in groups:
            out[k] = terms[g].sum(axis=0)
        pq = [(p, q) for p in range(max(1, lo[0]), hi[0] + 1)
              for q in range(max(K + 1 - p, lo[1]), hi[1] + 1)]
        a, b = (self.sums(u, lo[0]), b or self.sums(w, lo[1])) if pq else ((), ())
        return out, sum(a[p] * b[q] for p, q in pq)

    def product(self, u: np.ndarray, w: np.ndarray) -> np.ndarray:
        out, tail = self.truncated(u, w)
        out[0] = out[0] + tail * self.fl.arb(0, 1)
        return out

    def smooth(self, u: np.ndarray, series, top: int) -> np.ndarray:
        """``f(a + P) in sum_(j <= K) c_j P^j + f^(K+1)(U) / (K+1)! S^(K+1) + f'(U) (a - m)``,
        ``c_j = f^(j)(m) / j!`` at ``a``'s midpoint ``m``, ``U``, ``S`` the ranges of ``u``,
        ``P``; ``P^j = T_j + E_j``, ``T_j`` of degree ``<= K`` (``>= j``, ``<= j top``), ``|E_j|
        <= (dropped) + |E_(j-1)| sum_p A_p``. ``f(U)`` where it is narrower."""
        K, a, fl = self.K, u[0], self.fl
        mid, spread = _balls(fl, [v.mid() for v in a], wrap=False), self.spread(u)
        c, g = series(mid, K + 1), series(a + spread, K + 2)
        poly = u.copy()
        poly[0] = fl.arb(0)
        sums = self.sums(poly, 1)
        out, total, power, err = poly * c[1], sum(sums), poly, 0
        out[0] = c[0] + g[1] * (a - mid) + g[K + 1] * math.prod([spread] * (K + 1))
        for j in range(2, K + 1):
            power, tail = self.truncated(power, poly, (j - 1, 1), (
                min(K, (j - 1) * top), top), sums)
            err, rows = tail + err * total, self.deg >= j
            out[rows] = out[rows] + power[rows] * c[j]
            out[0] = out[0] + np.abs(c[j]) * err * fl.arb(0, 1)
        wide = np.array([not v.rad() <= r.rad() for v, r in zip(out[0], g[0], strict=True)])
        if wide.any():
            out[:, wide], out[0, wide] = fl.arb(0), g[0][wide]
        return out

    def kink(self, u: np.ndarray, relax, k: np.ndarray) -> np.ndarray:
        lm = [relax(self.fl, a + s, c) for a, s, c in zip(
            u[0], self.spread(u), np.resize(k, u.shape[1]), strict=True)]
        out = u * _balls(self.fl, [v[0] for v in lm], wrap=False)
        out[0] = out[0] + _balls(self.fl, [v[1] for v in lm], wrap=False)
        return out

    def dot(self, u: np.ndarray, w) -> np.ndarray:
        flat = self.fl.arb_mat(u.size // w.nrows(), w.nrows(), u.ravel().tolist()) * w
        return _balls(self.fl, flat.entries(), wrap=False).reshape(self.M, -1)

    def run(self, ops, dim: int, start=((), (), ())) -> tuple[list, list, list]:
        """The values of a program, their sizes, degrees (``start``: those of a prefix run)."""
        vals, sizes, tops = list(start[0]) or [self.x], list(start[1]) or [dim], list(
            start[2]) or [1]
        for kind, operands, extra in ops[len(vals) - 1:]:
            a = vals[operands[0]] if isinstance(operands[0], int) else None
            n, other = sizes[operands[0]] if a is not None else 0, ([*operands, None])[1]
            tops.append(self.K if kind in _SMOOTH or kind == "mul" and isinstance(other, int)
                        else max([tops[v] for v in operands if isinstance(v, int)], default=0))
            if kind == "dot":
                y, n = self.dot(a, other), other.ncols()
            elif kind == "concat":
                widths = [sizes[v] if isinstance(v, int) else len(v) for v in operands]
                y = np.concatenate([(vals[v] if isinstance(v, int) else self.constant(v, w))
                                    .reshape(self.M, self.B, w) for v, w in zip(
                                        operands, widths, strict=True)], axis=2)
                y, n = y.reshape(self.M, -1), sum(widths)
            elif kind == "slice":
                y = a.reshape(self.M, self.B, n)[:, :, extra[0]:extra[1]].reshape(self.M, -1)
                n = extra[1] - extra[0]
            elif kind in ("neg", "add", "sub"):
                b = 0 if kind == "neg" else vals[other] if isinstance(other, int) else \
                    self.constant(other, n)
                y = a + b if kind == "add" else b - a if kind == "neg" else a - b
            elif kind == "mul" and isinstance(other, int):
                y = self.product(a, vals[other])
            elif kind in ("mul", "div"):  # linear: every row scaled
                y = a * np.resize(other if kind == "mul" else 1 / other, self.B * n)
            elif kind in _KINKS:
                y = self.kink(a, _RELAX[kind], _balls(self.fl, [0]) if other is None else other)
            else:
                y = self.smooth(a, lambda v, m, kind=kind, k=other, y=extra: _series(
                    self.fl, kind, v, None if k is None else np.resize(k, len(v)), y, m),
                    tops[operands[0]])
            vals.append(y)
            sizes.append(n)
        return vals, sizes, tops


def _bound_boxes(fl, progs, c: np.ndarray, h: np.ndarray, claims, tail=(0, None)) -> list:
    """Per box: ``|D| <= claim`` proven on it, the bound, ``|D(c)| > claim`` proven. ``tail``:
    the programs' common first operations (run once), :func:`_linear_tail`'s map or None."""
    (shared, linear), (ops, out, sizes) = tail, progs[0]
    models, m = _Models(fl, c, h, ORDER.get(c.shape[1], 2)), sizes[out]
    if linear:
        va = models.run(ops[:shared], c.shape[1])[0]
        diff = models.dot(np.concatenate([va[v].reshape(models.M, models.B, -1)
                                          for v in linear[0]], axis=2).reshape(models.M, -1),
                          linear[1])
        diff[0] = diff[0] + np.resize(linear[2], diff.shape[1])
    else:
        va, sizes, tops = models.run(ops, c.shape[1])
        diff = va[out] - models.run(progs[1][0], c.shape[1], (
            va[:shared + 1], sizes[:shared + 1], tops[:shared + 1]))[0][progs[1][1]]
    at = diff[0]
    over = at + models.spread(diff)
    return [(all(v.abs_upper() <= claim for v in over[b * m:(b + 1) * m]),
             max(float(v.abs_upper()) if v.is_finite() else math.inf
                 for v in over[b * m:(b + 1) * m]),
             any(v.abs_lower() > claim for v in at[b * m:(b + 1) * m]))
            for b, claim in enumerate(claims)]


def _linear_tail(fl, progs, shared: int):
    """``(ids, A, d)``, ``D = [v_ids] A + d`` exactly, when both programs end in affine
    operations of the ``shared`` values ``v_ids`` (a variant of the last layers: their
    remainders cancel too), by running the ends on the identity; else None."""
    if any(kind in _SMOOTH + _KINKS or kind == "mul" and isinstance(operands[1], int)
           for ops, _, _ in progs for kind, operands, _ in ops[shared:]):
        return None
    ids = sorted({v for ops, out, _ in progs for v in [out] + [
        w for _, operands, _ in ops[shared:] for w in operands if isinstance(w, int)]
        if v <= shared})
    sizes = progs[0][2]
    cuts = np.cumsum([0] + [sizes[v] for v in ids])
    basis, start = _Models(fl, np.zeros((1, cuts[-1])), np.ones((1, cuts[-1])), 1), [None] * (
        shared + 1)
    for v, lo, hi in zip(ids, cuts, cuts[1:], strict=False):
        start[v] = basis.x[:, lo:hi]
    a, b = (basis.run(ops, 0, (start, sizes[:shared + 1], [1] * (shared + 1)))[0][out]
            for ops, out, _ in progs)
    return ids, fl.arb_mat(*a[1:].shape, (a[1:] - b[1:]).ravel().tolist()), a[0] - b[0]


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
        self.hull = (list(zip(self.a, self.b, strict=True)) if kind == "box" else
                     [(q - self.b[0], q + self.b[0]) for q in self.a])  # its bounding box

    def _dist2(self, box) -> list:
        return [max(Fraction(0), lo - q, q - hi) ** 2 for (lo, hi), q in zip(box, self.a,
                                                                              strict=True)]

    def meets(self, box) -> bool:
        if self.kind == "box":
            return all(lo <= u and hi >= L for (lo, hi), (L, u) in zip(box, self.hull,
                                                                       strict=True))
        return sum(self._dist2(box)) <= self.b[0] ** 2

    def clipped(self, parent, child) -> bool:
        """``child`` holds ``parent``'s part of the domain (of a ball: on axis ``i``, ``q_i -+
        sqrt(R^2 - m_i)``, ``m_i`` the squared distance on the others, compared squared)."""
        if not self.meets(parent):
            return True
        if self.kind == "box":
            return all(cl <= max(pl, L) and ch >= min(ph, u) for (pl, ph), (cl, ch), (L, u)
                       in zip(parent, child, self.hull, strict=True))
        d2, r2 = self._dist2(parent), self.b[0] ** 2
        for i, ((pl, ph), (cl, ch), q) in enumerate(zip(parent, child, self.a, strict=True)):
            s2 = r2 - (sum(d2) - d2[i])
            if not ((cl <= pl or (q - cl >= 0 and (q - cl) ** 2 >= s2))
                    and (ch >= ph or (ch - q >= 0 and (ch - q) ** 2 >= s2))):
                return False
        return True


def _box(c, h) -> list:
    return [(Fraction(a) - Fraction(r), Fraction(a) + Fraction(r))
            for a, r in zip(c.tolist(), h.tolist(), strict=True)]


def _cover(t: dict, dom: _Domain) -> list[int]:
    """The leaves, the tree proven to cover the domain (boxes ``c -+ h`` as fractions): the
    root holds it, two halves their parent (equal but on one axis, overlapping and spanning
    it), a clipped node its parent's part, a leaf claimed ``-inf`` misses it."""
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


def _claims(fl, progs, t: dict, leaves: list[int], max_depth: int, stats: dict, dom,
            tail) -> None:
    """Every finite claim: on the root box if it proves the least, else on each leaf, split
    where needed (``rho`` times its claim: ``2^k`` pieces, ``k ~ d log2(rho) / (K + 1)``)."""
    work = [(i, t["c"][i], t["h"][i], 0) for i in leaves if np.isfinite(t["bound"][i])]
    d, least = len(t["c"][0]), min([float(t["bound"][w[0]]) for w in work], default=0.0)
    stats["boxes"] += 1
    if work and _bound_boxes(fl, progs, t["c"][:1], t["h"][:1], [least], tail)[0][0]:
        return
    while work:
        batch, work = work[:BATCH], work[BATCH:]
        claims = [float(t["bound"][w[0]]) for w in batch]
        stats["boxes"] += len(batch)
        for (i, bc, bh, level), claim, (ok, own, counter) in zip(batch, claims, _bound_boxes(
                fl, progs, np.stack([w[1] for w in batch]), np.stack([w[2] for w in batch]),
                claims, tail), strict=True):
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
            for _ in range(min(max(1, int(d * math.log2(min(ratio, 2.0**30))
                                          / (ORDER.get(d, 2) + 1))), 2 * d, max_depth - level)):
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
    outs = [sizes[out] for _, out, sizes in progs]
    if outs[0] != outs[1]:
        raise CertificateError(f"check: the programs have {outs[0]} and {outs[1]} outputs")
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
            at = [p - q for p, q in zip(*[models.run(ops, dim)[0][out][0]
                                          for ops, out, _ in progs], strict=True)]
            if not any(v.abs_lower() >= lower for v in at):
                raise _Reject(None, f"lower {lower:.6e} is not attained at argmax: "
                              f"|F_a - F_b| there is {max(float(v.abs_upper()) for v in at):.6e}")
        _claims(fl, progs, t, leaves, max_depth, stats, dom,
                (shared, _linear_tail(fl, progs, shared)))
        ok, reason, node = True, "", None
    except _Reject as exc:
        ok, reason, node = False, exc.reason, exc.node
    return CheckReport(ok, reason, node, upper, lower, len(leaves), stats["boxes"],
                       stats["depth"], time.perf_counter() - start)


def check(path, *, max_depth: int = 24) -> CheckReport:
    """Confirm ``lower <= sup_(x in domain) max_j |F_a(x)_j - F_b(x)_j| <= upper`` for a
    certificate of :meth:`Verification.save <jaxcompress.verification.Verification.save>`
    in Arb ball arithmetic, or name the first node that fails: a :class:`CheckReport`.
    ``max_depth``: how often a leaf may be bisected. Raises :class:`CertificateError` for a
    missing, truncated, foreign, damaged or malformed file, ``ImportError`` without
    python-flint (``pip install 'jaxcompress[check]'``)."""
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
