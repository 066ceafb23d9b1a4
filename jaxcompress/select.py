"""Column selection and interpolation coefficients (Algorithm 1 of Wang, Wang & Ziyin 2026).

Given a feature matrix ``Z in R^{D x n}`` (rows: monomials, columns: neurons) choose ``m`` columns
``K`` and coefficients ``C in R^{m x n}`` with ``Z_K C = Z`` (exactly when ``rank Z <= m``), so
that ``sum_i v_i Z_i = sum_{j in K} (C v)_j Z_j``: the next layer's kernel becomes ``C @ kernel``.

Rows are scaled by ``r^{|alpha|}`` before selecting (``r`` = domain radius): row ``alpha`` of
``Z`` multiplies ``x^alpha``, whose size on the ball of radius ``r`` is ``r^{|alpha|}``, so the
scaled rows measure each Taylor term on the domain. The selection depends on this scaling;
``C`` does not (``Z_K C = Z`` is invariant under row scaling).

Every selector returns a :class:`Selection` in *pivot order*: ``perm`` is a permutation of the
``n`` columns whose first ``m`` entries are kept, ``rank`` of them form the basis, and
``coef`` (``m x n``, columns in pivot order) has ``coef[:, :rank] = I`` and zero rows past
``rank`` (surplus kept neurons get zero outgoing weight: static shapes, unchanged function).

Selectors:

``"pivoted_qr"``
    Businger-Golub column-pivoted QR (``jax.lax.linalg.qr(pivoting=True)``: LAPACK ``geqp3``).
    On TPU, where it is unavailable, the pure-JAX ``"greedy_gs"`` is used automatically.
``"greedy_gs"``
    The same greedy rule (largest remaining column norm) as a pure-JAX modified Gram-Schmidt with
    re-orthogonalisation, jit-able on every backend.
``"maxvol"``
    Pivoted-QR start, then Goreinov-Tyrtyshnikov swaps ``K_i <-> j`` while
    ``|C_ij| > 1 + delta``; each swap multiplies ``|det Z_K|`` by ``|C_ij|``, so it terminates
    with every ``|C_ij| <= 1 + delta`` (Lemma 10's bound for a (1+delta)-quasi maximal volume).
``"exhaustive"``
    The true maximum-volume subset by enumeration, for tiny problems only.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress.mlp import HIGHEST

__all__ = [
    "SELECTORS",
    "Selection",
    "coefficients_from_r",
    "greedy_pivoted_qr",
    "select_columns",
]

SELECTORS = ("pivoted_qr", "greedy_gs", "maxvol", "exhaustive")

#: Largest number of subsets the ``"exhaustive"`` selector will enumerate.
MAX_EXHAUSTIVE_SUBSETS = 200_000


class Selection(NamedTuple):
    """Result of a selector (pivot order; see the module docstring)."""

    perm: jax.Array  # (n,) int32: columns in pivot order; perm[:m] are kept
    coef: jax.Array  # (m, n): Z[:, perm[:m]] @ coef ~= Z[:, perm]
    rank: jax.Array  # () int32: numerical rank used (<= m)


def default_rtol(shape: tuple[int, int], dtype) -> float:
    """Relative threshold on ``|R_ii| / |R_00|`` below which a pivot counts as rank deficient."""
    return float(jnp.finfo(dtype).eps) * max(shape)


def _numerical_rank(diag: jax.Array, rtol) -> jax.Array:
    a = jnp.abs(diag)
    thresh = rtol * a[0]
    # pivoted QR has non-increasing |R_ii|; count the leading ones above the threshold
    above = jnp.cumprod((a > thresh).astype(jnp.int32))
    return jnp.sum(above).astype(jnp.int32)


def coefficients_from_r(r_mat: jax.Array, rank: jax.Array) -> jax.Array:
    """``coef`` from the ``(m, n)`` R factor of ``Z[:, perm] = Q R``, keeping ``rank`` pivots.

    Solves ``R11[:rank, :rank] coef[:rank] = R[:rank]`` and zeroes rows ``>= rank``, with static
    shapes: rows/columns past ``rank`` of ``R11`` are replaced by the identity.
    """
    m = r_mat.shape[0]
    idx = jnp.arange(m)
    live = idx < rank
    r11 = r_mat[:, :m]
    block = live[:, None] & live[None, :]
    r11 = jnp.where(block, r11, jnp.eye(m, dtype=r_mat.dtype))
    rhs = jnp.where(live[:, None], r_mat, 0)
    return jax.scipy.linalg.solve_triangular(r11, rhs, lower=False)


def greedy_pivoted_qr(z: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """Pure-JAX column-pivoted QR by greedy modified Gram-Schmidt (works on TPU).

    At step ``i`` the remaining column with the largest residual norm is moved to position
    ``i`` and the residuals of all columns are orthogonalised against it (twice, for
    stability). Equivalent to Businger-Golub pivoting in exact arithmetic.

    Returns:
      ``perm`` (n,) and ``R`` (m, n) with ``Z[:, perm] = Q R``.
    """
    dsz, n = z.shape
    dtype = z.dtype

    def step(i, carry):
        res, perm, r_mat = carry
        norms = jnp.sum(res * res, axis=0)
        norms = jnp.where(jnp.arange(n) < i, -1.0, norms)
        p = jnp.argmax(norms)
        # swap columns i and p everywhere
        swap = jnp.arange(n).at[i].set(p).at[p].set(i)
        res, perm, r_mat = res[:, swap], perm[swap], r_mat[:, swap]
        col = res[:, i]
        nrm = jnp.sqrt(jnp.sum(col * col))
        q = jnp.where(nrm > 0, col / jnp.where(nrm > 0, nrm, 1), 0)
        later = jnp.arange(n) > i
        proj = jnp.matmul(q, res, precision=HIGHEST)
        res = res - jnp.outer(q, jnp.where(later, proj, 0))
        proj2 = jnp.matmul(q, res, precision=HIGHEST)
        res = res - jnp.outer(q, jnp.where(later, proj2, 0))
        row = jnp.where(later, proj + proj2, 0).at[i].set(nrm)
        r_mat = r_mat.at[i].set(row)
        res = res.at[:, i].set(0)
        return res, perm, r_mat

    init = (z, jnp.arange(n, dtype=jnp.int32), jnp.zeros((m, n), dtype))
    _, perm, r_mat = jax.lax.fori_loop(0, m, step, init)
    del dsz
    return perm, r_mat


def _lapack_pivoted_qr(z: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    kwargs = {}
    if jax.default_backend() == "gpu":
        kwargs["use_magma"] = False  # the host geqp3 path: reproducible pivots
    _, r_mat, perm = jax.lax.linalg.qr(z, pivoting=True, full_matrices=False, **kwargs)
    return perm.astype(jnp.int32), _rows(r_mat, m)


def _rows(r_mat: jax.Array, m: int) -> jax.Array:
    """The first ``m`` rows of R, zero-padded when ``m`` exceeds its row count (m > D)."""
    if r_mat.shape[0] >= m:
        return r_mat[:m]
    return jnp.concatenate([r_mat, jnp.zeros((m - r_mat.shape[0], r_mat.shape[1]), r_mat.dtype)])


def _pivoted_qr(z: jax.Array, m: int, method: str) -> tuple[jax.Array, jax.Array]:
    if method == "pivoted_qr" and jax.default_backend() not in ("tpu",):
        return _lapack_pivoted_qr(z, m)
    return greedy_pivoted_qr(z, m)


def _r_of(z_perm: jax.Array, m: int) -> jax.Array:
    """R factor (m, n) of the unpivoted QR of ``z_perm``."""
    _, r_mat = jnp.linalg.qr(z_perm, mode="reduced")
    r_mat = _rows(r_mat, m)
    # normalise signs so the leading diagonal is positive (purely cosmetic, keeps R11 stable)
    sign = jnp.where(jnp.diagonal(r_mat[:, :m]) < 0, -1.0, 1.0).astype(r_mat.dtype)
    sign = jnp.concatenate([sign, jnp.ones((m - sign.shape[0],), r_mat.dtype)])
    return r_mat * sign[:, None]


def _maxvol(coef: jax.Array, perm: jax.Array, rank: jax.Array, delta, max_swaps: int):
    """Goreinov-Tyrtyshnikov swaps on the basis rows ``< rank`` of ``coef`` (pivot order)."""
    m, n = coef.shape
    rows = jnp.arange(m)

    def masked_abs(c):
        return jnp.where((rows < rank)[:, None], jnp.abs(c), 0)

    def cond(state):
        c, _, it = state
        return (jnp.max(masked_abs(c)) > 1 + delta) & (it < max_swaps)

    def body(state):
        c, p, it = state
        flat = jnp.argmax(masked_abs(c))
        i, j = flat // n, flat % n
        # Sherman-Morrison: column j enters the basis at row i.
        piv = c[i, j]
        u = c[:, j] - (rows == i).astype(c.dtype)
        c = c - jnp.outer(u, c[i] / piv)
        swap = jnp.arange(n).at[i].set(j).at[j].set(i)
        return c[:, swap], p[swap], it + 1

    _, perm, swaps = jax.lax.while_loop(cond, body, (coef, perm, jnp.int32(0)))
    return perm, swaps


def _exhaustive(z: jax.Array, m: int) -> jax.Array:
    dsz, n = z.shape
    n_sub = math.comb(n, m)
    if n_sub > MAX_EXHAUSTIVE_SUBSETS:
        raise ValueError(
            f"selector='exhaustive': choosing {m} of {n} neurons means {n_sub:,} subsets "
            f"(limit {MAX_EXHAUSTIVE_SUBSETS:,}); it is for tiny test problems only. Use "
            "selector='maxvol' for a (1 + delta)-quasi maximal volume in polynomial time."
        )
    subsets = jnp.asarray(np.array(list(itertools.combinations(range(n), m)), dtype=np.int32))

    def logvol(s):
        zs = z[:, s]
        gram = jnp.matmul(zs.T, zs, precision=HIGHEST)
        sign, logdet = jnp.linalg.slogdet(gram)
        return jnp.where(sign > 0, logdet, -jnp.inf)

    best = subsets[jnp.argmax(jax.vmap(logvol)(subsets))]
    rest_mask = jnp.ones((n,), bool).at[best].set(False)
    rest = jnp.argsort(~rest_mask, stable=True)[: n - m]  # the complement in increasing order
    del dsz
    return jnp.concatenate([best, rest.astype(jnp.int32)])


def select_columns(
    z: jax.Array,
    m: int,
    *,
    selector: str = "pivoted_qr",
    radius=1.0,
    degrees: np.ndarray | None = None,
    rtol: float | None = None,
    delta: float = 1e-2,
    max_swaps: int | None = None,
) -> tuple[Selection, dict[str, jax.Array]]:
    """Choose ``m`` of the ``n`` columns of ``z`` and the coefficients reproducing all columns.

    Args:
      z: features ``(D, n)``.
      m: number of columns to keep (static), ``1 <= m <= n``.
      selector: one of :data:`SELECTORS`.
      radius: the row scaling ``r`` (may be traced); rows are multiplied by ``r^{degrees}``.
      degrees: ``(D,)`` total degree of each row (default: no scaling).
      rtol: relative rank threshold on ``|R_ii| / |R_00|`` (default ``eps * max(D, n)``).
      delta: maxvol tolerance, ``|C_ij| <= 1 + delta`` at exit.
      max_swaps: cap on maxvol swaps (default ``50 * m``).

    Returns:
      The :class:`Selection` and a dict of diagnostics (``swaps`` for maxvol).
    """
    if selector not in SELECTORS:
        raise ValueError(f"selector must be one of {SELECTORS}, got {selector!r}")
    dsz, n = z.shape
    if not 1 <= m <= n:
        raise ValueError(f"select_columns: m must be in [1, {n}], got {m}")
    if degrees is not None:
        scale = jnp.asarray(radius, z.dtype) ** jnp.asarray(degrees, z.dtype)
        zs = z * scale[:, None]
    else:
        zs = z
    rtol = default_rtol((dsz, n), z.dtype) if rtol is None else rtol
    diag: dict[str, jax.Array] = {}
    if selector == "exhaustive":
        perm = _exhaustive(zs, m)
        r_mat = _r_of(zs[:, perm], m)
    else:
        perm, r_mat = _pivoted_qr(zs, m, "greedy_gs" if selector == "greedy_gs" else "pivoted_qr")
    # rank is judged on the full pivoted R (its diagonal is non-increasing in magnitude)
    rank = _numerical_rank(jnp.diagonal(r_mat[:, :m]), rtol)
    coef = coefficients_from_r(r_mat, rank)
    if selector == "maxvol":
        max_swaps = 50 * m if max_swaps is None else max_swaps
        perm, swaps = _maxvol(coef, perm, rank, delta, max_swaps)
        r_mat = _r_of(zs[:, perm], m)
        coef = coefficients_from_r(r_mat, rank)
        diag["swaps"] = swaps
    return Selection(perm=perm, coef=coef, rank=rank), diag
