r"""Taylor models: what the bound interpreter computes with.

Over one input box ``{c + h * t : t in [-1, 1]^d}`` every value ``v(x)`` of the program that
depends on ``x`` is held as a **Taylor model** (Berz & Makino's Taylor-model arithmetic, the
multivariate counterpart of autobound's Taylor enclosures):

.. math::
   v(c + h \odot t) \in \sum_{|\alpha| \le K} a_\alpha\, t^\alpha + [-r, r]
   \qquad \text{for every } t \in [-1, 1]^d,

a polynomial of degree ``K`` in the normalised box coordinates ``t`` (coefficients ``coef`` of
shape ``(M, *shape)``, ``M = C(d + K, d)`` monomials in graded order, the constant first and the
``d`` linear monomials next) and a remainder radius ``rad >= 0`` of shape ``shape``. Linear
operations act on the coefficients exactly; a product keeps the terms of degree ``<= K`` and
bounds the rest into the remainder; a smooth function is composed through its Taylor series and
a Lagrange remainder (:mod:`jaxcompress.verification.smooth`). Because the polynomial carries the
dependence on ``x``, the two programs of a difference ``F_a - F_b`` share it: their common
behaviour cancels in the coefficients and only the remainders, ``O(h^(K+1))``, add up.

**Rounding.** The coefficients are computed in float64 with round-to-nearest. Every operation
here adds to the remainder a bound on the rounding error it made (Higham's
``gamma_n = n u / (1 - n u)`` for sums of ``n`` products, ``u = 2^-53``), computed from the
absolute sums ``sum_alpha |a_alpha|``, and rounds the radii it sums upwards (:func:`up`). So a
Taylor model encloses the exact real-arithmetic value as long as the elementary functions of the
platform are as accurate as :data:`~jaxcompress.verification.smooth.FUNCTION_ULPS` says.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["TINY", "UNIT_ROUNDOFF", "Monomials", "Pred", "TaylorModel", "gamma", "up"]

#: ``u = 2^-53``, the unit roundoff of float64.
UNIT_ROUNDOFF = 2.0**-53
#: An absolute margin added to every rounded radius: covers underflow (a product that lands in
#: the subnormal range loses its relative accuracy, never more than ``2^-1074`` absolute).
TINY = 2.0**-1000


def gamma(n: int) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: the relative error bound of a sum of ``n`` terms
    (or a product of ``n`` factors) in float64."""
    return n * UNIT_ROUNDOFF / (1.0 - n * UNIT_ROUNDOFF)


def up(x: jax.Array, n: int = 4) -> jax.Array:
    """``x >= 0`` rounded upwards: ``x (1 + gamma_(n+2)) + TINY`` covers the rounding of a sum
    of ``n`` non-negative terms that produced ``x`` (and of this multiplication)."""
    return x * (1.0 + gamma(n + 2)) + TINY


class TaylorModel(NamedTuple):
    """A polynomial in the box coordinates ``t in [-1, 1]^d`` plus a remainder radius.

    Attributes:
      coef: ``(M, *shape)`` coefficients over the monomials of :class:`Monomials` (graded order:
        the constant ``coef[0]``, then ``t_1 .. t_d``, then degree 2, ...).
      rad: ``shape``, the remainder radius ``r >= 0``: the value lies in ``poly(t) + [-r, r]``.
      gen: ``(G, *shape)`` or None: the coefficients of the program's **remainder symbols**
        ``e_1 .. e_G``, each a function of ``x`` with values in ``[-1, 1]``, shared by every
        value of one program (:meth:`~jaxcompress.verification.rules.RuleContext.fresh`). The
        value lies in ``poly(t) + sum_g gen_g e_g + [-r, r]``; a linear map of values maps
        their symbols' coefficients exactly, so remainders that cancel through a layer cancel
        (affine arithmetic's noise symbols, DeepZ's zonotopes; ours: as the remainder of a
        Taylor model). Values made before a symbol existed have fewer rows: missing rows are
        zeros (:func:`align`).
    """

    coef: jax.Array
    rad: jax.Array
    gen: jax.Array | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.rad.shape)


class Pred(NamedTuple):
    """A comparison of values that depend on ``x``: ``may_true`` / ``may_false`` where the
    predicate is true / false at some point of the box (both: undecided there)."""

    may_true: jax.Array
    may_false: jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class Monomials:
    """The monomials ``t^alpha``, ``|alpha| <= order``, in ``dim`` variables and the tables of
    the truncated product (host-side NumPy, built once per ``(dim, order)``: :meth:`of`).

    Attributes:
      exps: ``(M, dim)`` exponents, graded (degree 0, the ``dim`` linear ones in variable order,
        then degree 2, ...).
      degree: ``(M,)`` total degrees.
      even: ``(M,)`` whether every exponent is even and the monomial is not the constant: then
        ``t^alpha in [0, 1]`` on the box, else ``t^alpha in [-1, 1]``.
      pair_a, pair_b: ``(M, L)`` indices: ``coef_out[g] = sum_l A[pair_a[g, l]] B[pair_b[g, l]]``
        is the part of degree ``<= order`` of a product (index ``M`` is a zero row: padding).
      even_index: the indices of the even monomials.
      blocks: ``(start, stop)`` of the monomials of each degree (contiguous in graded order).
    """

    dim: int
    order: int
    exps: np.ndarray
    degree: np.ndarray
    even: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    even_index: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]

    def product_terms(self, low_a: int = 0, low_b: int = 0
                      ) -> tuple[tuple[tuple[int, int], ...], ...]:
        """For each monomial ``g``, the pairs ``(i, j)`` with ``t^i t^j = t^g``, ``deg i >=
        low_a`` and ``deg j >= low_b`` (the terms of a truncated product)."""
        return _product_terms(self, low_a, low_b)

    def product_indices(self, low_a: int = 0, low_b: int = 0
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """:meth:`product_terms` flattened: ``(ia, ib, ig, width)`` with
        ``coef_out = segment_sum(A[ia] * B[ib], ig)`` (``ig`` sorted) and ``width`` the largest
        number of terms of one output coefficient."""
        return _product_indices(self, low_a, low_b)

    @property
    def size(self) -> int:
        """``M = C(dim + order, dim)``."""
        return int(self.exps.shape[0])

    @staticmethod
    @functools.cache
    def of(dim: int, order: int) -> Monomials:
        """The tables for ``dim`` variables and degree ``order`` (cached)."""
        exps = []
        for deg in range(order + 1):
            # descending lexicographic order: (1, 0, ...) first, so t_i is monomial 1 + i
            exps.extend(sorted((e for e in itertools.product(range(deg + 1), repeat=dim)
                                if sum(e) == deg), reverse=True))
        exps_arr = np.array(exps, dtype=np.int64).reshape(len(exps), dim)
        index = {tuple(e): i for i, e in enumerate(exps)}
        m = len(exps)
        pairs = []
        for g in exps:
            lst = []
            for a in itertools.product(*[range(k + 1) for k in g]):
                b = tuple(gi - ai for gi, ai in zip(g, a, strict=True))
                lst.append((index[a], index[b]))
            pairs.append(lst)
        width = max(len(p) for p in pairs)
        pa = np.full((m, width), m, dtype=np.int32)
        pb = np.full((m, width), m, dtype=np.int32)
        for i, lst in enumerate(pairs):
            for j, (a, b) in enumerate(lst):
                pa[i, j], pb[i, j] = a, b
        degree = exps_arr.sum(axis=1)
        even = np.all(exps_arr % 2 == 0, axis=1) & (degree > 0)
        for arr in (exps_arr, degree, even, pa, pb):
            arr.setflags(write=False)
        blocks = tuple((int(np.argmax(degree == k)), int(np.argmax(degree == k))
                        + int(np.sum(degree == k))) for k in range(order + 1))
        return Monomials(dim=dim, order=order, exps=exps_arr, degree=degree, even=even,
                         pair_a=pa, pair_b=pb,
                         even_index=tuple(int(i) for i in np.flatnonzero(even)), blocks=blocks)


@functools.cache
def _product_terms(mono: Monomials, low_a: int, low_b: int):
    out = []
    for g in range(mono.size):
        out.append(tuple((int(i), int(j)) for i, j in zip(mono.pair_a[g], mono.pair_b[g],
                                                           strict=True)
                         if i < mono.size and mono.degree[i] >= low_a
                         and mono.degree[j] >= low_b))
    return tuple(out)


@functools.cache
def _product_indices(mono: Monomials, low_a: int, low_b: int):
    terms = mono.product_terms(low_a, low_b)
    ia = np.array([i for t in terms for i, _ in t], dtype=np.int32)
    ib = np.array([j for t in terms for _, j in t], dtype=np.int32)
    ig = np.array([g for g, t in enumerate(terms) for _ in t], dtype=np.int32)
    for arr in (ia, ib, ig):
        arr.setflags(write=False)
    return ia, ib, ig, max((len(t) for t in terms), default=1)


#: Up to this many pairs of monomials a product is written out term by term (XLA fuses the
#: terms into one loop: the fastest on a CPU); beyond, a gather of the pairs and a sorted
#: segment sum (compiles in a fraction of the time, runs about 1.5x slower: measured on
#: ``d = 3, K = 5``, 780 pairs: 1.8 s / 5.5 s to compile, 8 / 5.4 ms per call).
UNROLL_PAIRS = 128


def truncated_product(a: jax.Array, b: jax.Array, mono: Monomials, low_a: int = 0,
                      low_b: int = 0) -> jax.Array:
    """The coefficients of degree ``<= order`` of the product of two polynomials (coefficient
    arrays ``(M, *shape)``), from the pairs of monomials that can meet."""
    ia, ib, ig, _ = mono.product_indices(low_a, low_b)
    if ia.size == 0:
        return jnp.zeros_like(a)
    if ia.size > UNROLL_PAIRS:
        return jax.ops.segment_sum(a[ia] * b[ib], ig, num_segments=mono.size,
                                   indices_are_sorted=True)
    rows = [None] * mono.size
    ra = {i: a[i] for i in set(ia.tolist())}  # each coefficient sliced once
    rb = {j: b[j] for j in set(ib.tolist())}
    for i, j, g in zip(ia.tolist(), ib.tolist(), ig.tolist(), strict=True):
        t = ra[i] * rb[j]
        rows[g] = t if rows[g] is None else rows[g] + t
    zero = jnp.zeros_like(a[0])
    return jnp.stack([zero if r is None else r for r in rows])


# ------------------------------------------------------------------------------------------
# construction and bounds


def constant(value: jax.Array, mono: Monomials) -> TaylorModel:
    """A value that does not depend on ``x`` (float64), as a Taylor model."""
    value = jnp.asarray(value, jnp.float64)
    zeros = jnp.zeros((mono.size - 1,) + value.shape, jnp.float64)
    return TaylorModel(jnp.concatenate([value[None], zeros], axis=0), jnp.zeros_like(value))


def from_interval(lo: jax.Array, hi: jax.Array, mono: Monomials) -> TaylorModel:
    """The Taylor model ``mid + [-half, half]`` enclosing ``[lo, hi]`` (no dependence on ``x``
    is kept: the fallback of interval arithmetic)."""
    lo = jnp.asarray(lo, jnp.float64)
    hi = jnp.asarray(hi, jnp.float64)
    mid = 0.5 * lo + 0.5 * hi
    half = up(jnp.maximum(hi - mid, mid - lo))
    t = constant(mid, mono)
    return TaylorModel(t.coef, half)


def abs_sum(t: TaylorModel) -> jax.Array:
    """``sum_alpha |a_alpha|``: a bound on ``|poly(t)|`` over the box."""
    return jnp.sum(jnp.abs(t.coef), axis=0)


def gen_abs(t: TaylorModel) -> jax.Array:
    """``sum_g |gen_g|``: a bound on the symbolic part of the remainder (0 without symbols)."""
    if t.gen is None:
        return jnp.zeros_like(t.rad)
    return jnp.sum(jnp.abs(t.gen), axis=0)


def abs_total(t: TaylorModel) -> jax.Array:
    """``sum_alpha |a_alpha| + sum_g |gen_g|``: the scale of every coefficient an operation
    rounds (the rounding of a linear map is bounded from it)."""
    return abs_sum(t) + gen_abs(t)


def n_symbols(t) -> int:
    """``G``: the rows of ``t.gen`` (0 without symbols)."""
    return 0 if not isinstance(t, TaylorModel) or t.gen is None else int(t.gen.shape[0])


def pad_gen(t: TaylorModel, size: int) -> jax.Array | None:
    """``t.gen`` with zero rows appended up to ``size`` symbols (None when ``size`` is 0)."""
    if size == 0:
        return None
    if t.gen is None:
        return jnp.zeros((size,) + t.shape, jnp.float64)
    extra = size - t.gen.shape[0]
    if extra == 0:
        return t.gen
    return jnp.concatenate([t.gen, jnp.zeros((extra,) + t.shape, t.gen.dtype)], axis=0)


def align(*ts: TaylorModel) -> list:
    """The symbols' coefficients of ``ts`` with equal row counts (None when none has any)."""
    size = max(n_symbols(t) for t in ts)
    return [pad_gen(t, size) for t in ts]


def materialize(x: jax.Array) -> jax.Array:
    """``x`` unchanged, computed once: a value per entry that is about to be broadcast over
    the symbols' rows (``G`` times its size) is made the result of a cumulative sum (``0 +
    x``, exact), which XLA does not fuse into the broadcast's consumer: fused, the whole
    computation of ``x`` — a Taylor series' remainder, a derivative's range — would run
    again for every row (measured: 200x slower on a ``(8, 768, 1, 256)`` product).
    ``optimization_barrier`` does not survive XLA's CPU pipeline to the fusion pass, and a
    ``max`` over two copies is simplified away."""
    if x.dtype == jnp.bool_:
        return materialize(x.astype(jnp.float64)) > 0.5
    return jnp.cumsum(jnp.stack([jnp.zeros_like(x), x]), axis=0)[1]


def collapse(t: TaylorModel) -> TaylorModel:
    """``t`` without symbols: their part bounded into the remainder radius (sound for any
    value of the symbols; what an operation that does not carry symbols starts from)."""
    if t.gen is None:
        return t
    return TaylorModel(t.coef, up(t.rad + gen_abs(t), n_symbols(t) + 1))


def poly_range(coef: jax.Array, mono: Monomials) -> tuple[jax.Array, jax.Array]:
    r"""An enclosure ``[lo, hi]`` of the polynomial over ``t in [-1, 1]^d``.

    .. math::
       a_0 + \sum_{\alpha\ \mathrm{even}} \min(a_\alpha, 0) - \sum_{\alpha\ \mathrm{odd}}
       |a_\alpha| \;\le\; p(t) \;\le\; a_0 + \sum_{\alpha\ \mathrm{even}} \max(a_\alpha, 0)
       + \sum_{\alpha\ \mathrm{odd}} |a_\alpha|

    (``t^alpha in [0, 1]`` when every exponent is even), widened by the rounding of the sums.
    """
    total = jnp.sum(jnp.abs(coef[1:]), axis=0) if mono.size > 1 else jnp.zeros_like(coef[0])
    lo = hi = coef[0]
    spread = total
    for i in mono.even_index:
        lo = lo + jnp.minimum(coef[i], 0.0)
        hi = hi + jnp.maximum(coef[i], 0.0)
        spread = spread - jnp.abs(coef[i])
    spread = jnp.maximum(spread, 0.0)
    err = gamma(mono.size + 4) * (total + jnp.abs(coef[0])) + TINY
    return lo - spread - err, hi + spread + err


def subbox_shifts(mono: Monomials, parts: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The polynomial re-expanded on each of the ``parts^d`` equal sub-boxes of
    ``[-1, 1]^d``: ``(A, colsum)`` with ``A[s] @ coef`` the coefficients of ``p(a_s + s / parts)``
    in the sub-box's own coordinates ``s in [-1, 1]^d`` (``a_s`` its centre), from

    .. math::
       (a + b s)^k = \sum_{j \le k} \binom{k}{j} a^{k - j} b^j s^j, \qquad
       A_{\beta\alpha} = \prod_i \binom{\alpha_i}{\beta_i}\, a_i^{\alpha_i - \beta_i}\,
       b^{\beta_i} \quad (\beta \le \alpha),

    each entry a quotient of integers rounded once to float64 (exact for ``parts`` a power of
    two); ``colsum[s, alpha] = sum_beta |A[s, beta, alpha]|`` bounds the rounding of the
    product. A shift never raises the degree, so the re-expansion is exact up to rounding.
    Cached per ``(mono, parts)`` (host-side NumPy)."""
    return _subbox_shifts(mono, parts)


@functools.cache
def _subbox_shifts(mono: Monomials, parts: int):
    exps = [tuple(int(v) for v in e) for e in mono.exps]
    centres = [2 * j + 1 - parts for j in range(parts)]   # a = centre / parts
    boxes = list(itertools.product(centres, repeat=mono.dim))
    a = np.zeros((len(boxes), mono.size, mono.size))
    for col, alpha in enumerate(exps):
        den = parts ** sum(alpha)
        for row, beta in enumerate(exps):
            if any(b > al for b, al in zip(beta, alpha, strict=True)):
                continue
            binom = math.prod(math.comb(al, b) for al, b in zip(alpha, beta, strict=True))
            for s, centre in enumerate(boxes):
                num = binom * math.prod(c ** (al - b) for c, al, b
                                        in zip(centre, alpha, beta, strict=True))
                a[s, row, col] = num / den          # int / int: correctly rounded
    a.setflags(write=False)
    colsum = np.abs(a).sum(axis=1)
    colsum.setflags(write=False)
    return a, colsum


def refined_range(coef: jax.Array, mono: Monomials, parts: int
                  ) -> tuple[jax.Array, jax.Array]:
    """An enclosure ``[lo, hi]`` of the polynomial over ``[-1, 1]^d`` (``coef``: ``(M, n)``),
    the union of :func:`poly_range`'s on the ``parts^d`` sub-boxes (:func:`subbox_shifts`),
    intersected with its range on the whole box: the sum of absolute coefficients overstates
    the range of a polynomial whose terms cancel, and less so on smaller boxes, where the
    low degrees dominate. The re-expansion's rounding (at most ``gamma_(M+3) sum_alpha
    colsum_alpha |a_alpha|`` per sub-box, the entries of ``A`` rounded once) widens each."""
    lo0, hi0 = poly_range(coef, mono)
    if parts < 2 or mono.order < 2:
        return lo0, hi0
    a, colsum = subbox_shifts(mono, parts)
    shifted = jnp.einsum("sba,an->bsn", jnp.asarray(a), coef, precision=jax.lax.Precision.HIGHEST)
    lo, hi = poly_range(shifted, mono)
    err = up(gamma(mono.size + 3) * (jnp.asarray(colsum) @ jnp.abs(coef)), mono.size)
    return (jnp.maximum(lo0, jnp.min(lo - err, axis=0)),
            jnp.minimum(hi0, jnp.max(hi + err, axis=0)))


def degree_norms(coef: jax.Array, mono: Monomials) -> list[jax.Array]:
    """``||p_k|| = sum_{|alpha| = k} |a_alpha|`` for ``k = 0 .. order`` (bounds on each
    degree's part of the polynomial over the box)."""
    return [jnp.sum(jnp.abs(coef[a:b]), axis=0) for a, b in mono.blocks]


def bounds(t: TaylorModel, mono: Monomials, parts: int = 1) -> tuple[jax.Array, jax.Array]:
    """An enclosure ``[lo, hi]`` of the Taylor model's values over the box (``parts > 1``: its
    polynomial's range on sub-boxes, :func:`refined_range`)."""
    lo, hi = poly_range(t.coef, mono) if parts < 2 else refined_range(t.coef, mono, parts)
    rad = up(t.rad + gen_abs(t), n_symbols(t) + 1)
    return lo - rad, hi + rad


def broadcast(v, shape: tuple[int, ...], mono: Monomials):
    """A constant array or a Taylor model broadcast to ``shape`` (leading axes added, size-1
    axes stretched: NumPy's rules, written out so that strict rank promotion holds)."""
    if isinstance(v, TaylorModel):
        if v.shape == tuple(shape):
            return v
        pad = len(shape) - len(v.shape)
        rad = jnp.broadcast_to(v.rad.reshape((1,) * pad + v.shape), shape)
        coef = jnp.broadcast_to(v.coef.reshape((mono.size,) + (1,) * pad + v.shape),
                                (mono.size,) + tuple(shape))
        gen = None if v.gen is None else jnp.broadcast_to(
            v.gen.reshape((v.gen.shape[0],) + (1,) * pad + v.shape),
            (v.gen.shape[0],) + tuple(shape))
        return TaylorModel(coef, rad, gen)
    v = jnp.asarray(v)
    if v.shape == tuple(shape):
        return v
    return jnp.broadcast_to(v.reshape((1,) * (len(shape) - v.ndim) + v.shape), shape)


def lift(v, mono: Monomials) -> TaylorModel:
    """A Taylor model, whether ``v`` is one or a constant array."""
    return v if isinstance(v, TaylorModel) else constant(v, mono)


# ------------------------------------------------------------------------------------------
# linear operations


def add(a: TaylorModel, b: TaylorModel) -> TaylorModel:
    """``a + b`` (same shapes)."""
    coef = a.coef + b.coef
    ga, gb = align(a, b)
    gen = None if ga is None else ga + gb
    out = TaylorModel(coef, a.rad, gen)
    return TaylorModel(coef, up(a.rad + b.rad + UNIT_ROUNDOFF * abs_total(out),
                                coef.shape[0] + n_symbols(out) + 2), gen)


def neg(a: TaylorModel) -> TaylorModel:
    """``-a`` (exact)."""
    return TaylorModel(-a.coef, a.rad, None if a.gen is None else -a.gen)


def sub(a: TaylorModel, b: TaylorModel) -> TaylorModel:
    """``a - b`` (same shapes)."""
    return add(a, neg(b))


def add_constant(a: TaylorModel, c: jax.Array) -> TaylorModel:
    """``a + c`` for a constant ``c`` of ``a``'s shape."""
    c0 = a.coef[0] + c
    coef = jnp.concatenate([c0[None], a.coef[1:]], axis=0)
    return TaylorModel(coef, up(a.rad + UNIT_ROUNDOFF * jnp.abs(c0)), a.gen)


def scale(a: TaylorModel, w: jax.Array) -> TaylorModel:
    """``a * w`` elementwise for a constant ``w`` of ``a``'s shape."""
    out = TaylorModel(a.coef * w[None], a.rad, None if a.gen is None else a.gen * w[None])
    return TaylorModel(out.coef, up(a.rad * jnp.abs(w) + UNIT_ROUNDOFF * abs_total(out),
                                    out.coef.shape[0] + n_symbols(out) + 2), out.gen)


def divide(a: TaylorModel, w: jax.Array) -> TaylorModel:
    """``a / w`` elementwise for a constant ``w`` of ``a``'s shape (each coefficient rounded
    once)."""
    out = TaylorModel(a.coef / w[None], a.rad, None if a.gen is None else a.gen / w[None])
    return TaylorModel(out.coef, up(a.rad / jnp.abs(w) + UNIT_ROUNDOFF * abs_total(out),
                                    out.coef.shape[0] + n_symbols(out) + 2), out.gen)


def linear(fn: Callable[[jax.Array], jax.Array], a: TaylorModel, *, terms: int = 1
           ) -> TaylorModel:
    """A linear map that only selects, moves and sums entries (reshape, transpose, slice,
    broadcast, concatenate of one operand, reduce_sum, ...), applied to every coefficient.

    ``fn`` applied to the radius bounds the mapped remainder (a sum of ``|r_i|`` bounds a sum of
    values in ``[-r_i, r_i]``); ``terms`` is the largest number of entries ``fn`` sums into one
    (1: a pure rearrangement, exact).
    """
    coef = jax.vmap(fn)(a.coef)
    gen = None if a.gen is None else jax.vmap(fn)(a.gen)
    rad = fn(a.rad)
    if terms > 1:
        rad = up(rad + gamma(terms) * fn(abs_total(a)), terms)
    return TaylorModel(coef, rad, gen)


# ------------------------------------------------------------------------------------------
# products


def bilinear(op: Callable[[jax.Array, jax.Array], jax.Array], a, b, mono: Monomials, *,
             terms: int = 1) -> TaylorModel:
    r"""``op(a, b)`` for a bilinear ``op`` (elementwise product, ``dot_general``, a
    convolution), with at least one of ``a``, ``b`` a Taylor model.

    ``terms`` is the number of products ``op`` sums into one output entry (1 for the
    elementwise product, the contraction size for ``dot_general``); ``op`` must satisfy
    ``|op(x, y)| <= op(|x|, |y|)`` entrywise (true of every sum of products). For two Taylor
    models

    .. math::
       (p + [-r]) (q + [-s]) \subseteq (pq)_{\le K}
       + \Big[\pm\Big(\sum_{i + j > K} \|p_i\|\,\|q_j\| + \bar p\, s + r\, \bar q + r s\Big)\Big]

    where ``p_i`` is the degree-``i`` part of ``p``, ``||p_i||`` the sum of its absolute
    coefficients and ``bar p = ||p||`` (a bound on ``|p|`` over the box).
    """
    if not isinstance(b, TaylorModel):
        w = jnp.asarray(b, jnp.float64)
        coef = jax.vmap(lambda c: op(c, w))(a.coef)
        gen = None if a.gen is None else jax.vmap(lambda c: op(c, w))(a.gen)
        absw = jnp.abs(w)
        rad = op(a.rad + gamma(terms) * abs_total(a), absw)
        return TaylorModel(coef, up(rad, terms + 2), gen)
    if not isinstance(a, TaylorModel):
        w = jnp.asarray(a, jnp.float64)
        coef = jax.vmap(lambda c: op(w, c))(b.coef)
        gen = None if b.gen is None else jax.vmap(lambda c: op(w, c))(b.gen)
        rad = op(jnp.abs(w), b.rad + gamma(terms) * abs_total(b))
        return TaylorModel(coef, up(rad, terms + 2), gen)
    a, b = collapse(a), collapse(b)
    ia, ib, ig, width = mono.product_indices()
    coef = jax.ops.segment_sum(jax.vmap(op)(a.coef[ia], b.coef[ib]), ig,
                               num_segments=mono.size, indices_are_sorted=True)
    # degree magnitudes ||p_i|| and the products of degree > K
    deg_a = jnp.stack(degree_norms(a.coef, mono))
    deg_b = jnp.stack(degree_norms(b.coef, mono))
    k = mono.order
    high_pairs = [(i, j) for i in range(k + 1) for j in range(k + 1) if i + j > k]
    if high_pairs:
        ia = np.array([p[0] for p in high_pairs])
        ib = np.array([p[1] for p in high_pairs])
        high = jnp.sum(jax.vmap(op)(deg_a[ia], deg_b[ib]), axis=0)
    else:
        high = jnp.zeros(coef.shape[1:], jnp.float64)
    sa, sb = abs_sum(a), abs_sum(b)
    rounding = gamma(terms * width + 2) * op(sa, sb)
    rad = high + op(sa, b.rad) + op(a.rad, sb + b.rad) + rounding
    return TaylorModel(coef, up(rad, 8))


def multiply(a, b, mono: Monomials, *, low_a: int = 0, low_b: int = 0) -> TaylorModel:
    """``a * b`` elementwise (same shapes; at least one a Taylor model).

    ``low_a`` / ``low_b``: the lowest degree present in ``a`` / ``b``'s polynomial (known
    statically: a power ``v^j`` of a polynomial without constant term starts at degree ``j``),
    so that only the pairs of monomials that can meet are multiplied
    (:func:`truncated_product`).
    """
    if not (isinstance(a, TaylorModel) and isinstance(b, TaylorModel)):
        return bilinear(jnp.multiply, a, b, mono)
    a, b = collapse(a), collapse(b)
    coef = truncated_product(a.coef, b.coef, mono, low_a, low_b)
    k = mono.order
    deg_a = degree_norms(a.coef, mono)
    deg_b = degree_norms(b.coef, mono)
    high = jnp.zeros(a.shape, jnp.float64)
    for i in range(low_a, k + 1):
        for j in range(low_b, k + 1):
            if i + j > k:
                high = high + deg_a[i] * deg_b[j]
    sa = sum(deg_a[low_a:])
    sb = sum(deg_b[low_b:])
    width = mono.product_indices(low_a, low_b)[3]
    rad = high + sa * b.rad + a.rad * (sb + b.rad) + gamma(width + 2) * sa * sb
    return TaylorModel(coef, up(rad, 8))


# ------------------------------------------------------------------------------------------
# piecewise-linear functions: linear relaxations


def relu(a: TaylorModel, mono: Monomials) -> TaylorModel:
    r"""``max(a, 0)``: exact where the sign of ``a`` is known on the box; else the chord
    relaxation (DeepZ's zonotope ReLU; CROWN's upper line)

    .. math::
       \max(u, 0) \in \lambda u + [e_-, e_+], \quad \lambda = \frac{h}{h - l},
       \quad u \in [l, h],\ l < 0 < h,

    with ``[e_-, e_+]`` the range of ``max(u, 0) - lambda u`` (its extremes are at ``l``, ``0``
    and ``h``: computed from the rounded ``lambda``, so it holds whatever ``lambda`` is).
    """
    lo, hi = bounds(a, mono)
    lam = jnp.clip(hi / jnp.where(hi - lo > 0, hi - lo, 1.0), 0.0, 1.0)
    return _piecewise(a, lo, hi, lam, lambda u: jnp.maximum(u, 0.0), mono,
                      jnp.where(lo >= 0, 1.0, jnp.where(hi <= 0, 0.0, jnp.nan)))


def absolute(a: TaylorModel, mono: Monomials) -> TaylorModel:
    r"""``|a|``: exact where the sign is known; else ``|u| in s u + [e_-, e_+]`` with the chord
    slope ``s = (h + l) / (h - l)``."""
    lo, hi = bounds(a, mono)
    s = jnp.clip((hi + lo) / jnp.where(hi - lo > 0, hi - lo, 1.0), -1.0, 1.0)
    return _piecewise(a, lo, hi, s, jnp.abs, mono,
                      jnp.where(lo >= 0, 1.0, jnp.where(hi <= 0, -1.0, jnp.nan)))


def _piecewise(a: TaylorModel, lo, hi, slope, fn, mono: Monomials, exact_slope) -> TaylorModel:
    """``fn(a)`` for a convex piecewise-linear ``fn`` with one kink at 0: ``exact_slope`` where
    the sign is known (NaN elsewhere), the relaxation ``slope * u + [e_-, e_+]`` elsewhere."""
    known = ~jnp.isnan(exact_slope)
    lam = jnp.where(known, jnp.nan_to_num(exact_slope), slope)
    if a.gen is not None:  # broadcast over the symbols' rows: computed once per entry
        lam = materialize(lam)
    # e(u) = fn(u) - lam u is piecewise linear: its extremes over [lo, hi] are at lo, 0, hi
    e_lo = fn(lo) - lam * lo
    e_hi = fn(hi) - lam * hi
    e_max = jnp.maximum(jnp.maximum(e_lo, e_hi), 0.0)
    e_min = jnp.minimum(jnp.minimum(e_lo, e_hi), 0.0)
    e_max = jnp.where(known, 0.0, e_max)
    e_min = jnp.where(known, 0.0, e_min)
    mid = 0.5 * e_min + 0.5 * e_max
    half = jnp.maximum(e_max - mid, mid - e_min)
    scaled = scale(a, lam)
    coef = jnp.concatenate([(scaled.coef[0] + mid)[None], scaled.coef[1:]], axis=0)
    err = gamma(4) * (jnp.abs(lo) + jnp.abs(hi) + jnp.abs(mid)) + TINY
    return TaylorModel(coef, up(scaled.rad + half + err), scaled.gen)


def hull(a: TaylorModel, b: TaylorModel, mono: Monomials) -> TaylorModel:
    """A Taylor model enclosing both ``a`` and ``b`` at every point: ``a`` plus the range of
    ``b - a`` joined with 0 (a ``select`` whose predicate the box does not decide)."""
    lo, hi = bounds(sub(b, a), mono)
    lo = jnp.minimum(lo, 0.0)
    hi = jnp.maximum(hi, 0.0)
    mid = 0.5 * lo + 0.5 * hi
    half = jnp.maximum(hi - mid, mid - lo)
    coef = jnp.concatenate([(a.coef[0] + mid)[None], a.coef[1:]], axis=0)
    # a(x) + (b - a)(x) with (b - a)(x) in [lo, hi]: a's symbols stay as they are
    return TaylorModel(coef, up(a.rad + half + UNIT_ROUNDOFF * (jnp.abs(coef[0]) + half)),
                       a.gen)


def select(pred: jax.Array, on_false: TaylorModel, on_true: TaylorModel) -> TaylorModel:
    """Entrywise choice between two Taylor models by a known boolean ``pred``."""
    gf, gt = align(on_false, on_true)
    return TaylorModel(jnp.where(pred[None], on_true.coef, on_false.coef),
                       jnp.where(pred, on_true.rad, on_false.rad),
                       None if gf is None else jnp.where(pred[None], gt, gf))


def power(a: TaylorModel, n: int, mono: Monomials) -> TaylorModel:
    """``a ** n`` for an integer ``n >= 1`` by repeated squaring."""
    result = None
    base = a
    while n:
        if n & 1:
            result = base if result is None else multiply(result, base, mono)
        n >>= 1
        if n:
            base = multiply(base, base, mono)
    return result


def as_float(x) -> jax.Array:
    """A constant as float64 (exact for float32, float16 and small integers)."""
    return jnp.asarray(x, jnp.float64)
