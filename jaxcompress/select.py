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

``"omp"``
    Output-aware greedy forward selection (simultaneous orthogonal matching pursuit): with
    ``T = Z W`` the next layer's pre-activation features (``W`` = ``out_kernel``, the next
    layer's kernel), step ``i`` keeps the column whose residual ``r_j`` (orthogonalised against
    the kept ones) removes the most of the residual ``R_T`` of ``T``, i.e. maximises
    ``||r_j^T R_T||^2 / ||r_j||^2``. It spends the width on what the next layer actually uses,
    where ``"pivoted_qr"`` tries to reproduce every column of ``Z`` alike; when ``T`` is fitted
    to rounding it continues with the pivoted-QR rule. Exact whenever ``rank Z <= m``, like the
    others.

Baselines (for honest comparisons; both re-weight by least squares on the selected columns):

``"weight_norm"``
    Keep the ``m`` columns with the largest ``scores`` (in :func:`jaxcompress.compress`: the
    outgoing-weight norm ``||K_{l+1}[i, :]||`` of each neuron, i.e. magnitude pruning).
``"random"``
    Keep ``m`` columns chosen uniformly at random with a PRNG ``key``.

Re-weighting is least squares in every case: with ``K`` the kept columns,
``C = argmin ||Z_K C - Z||_F = Z_K^+ Z`` (rows scaled as above). For the QR selectors this is read
off the pivoted R factor: with ``Z[:, perm] = Q [R11 R12; 0 R22]``, ``C = R11^{-1} [R11 R12]``,
exact when ``rank Z <= m`` (derivative features, ``D_k <= m``) and the least-squares fit when the
rows outnumber the kept columns (point features: one row per collocation or data point). The
baselines use the SVD of ``Z_K`` (robust to rank-deficient random or magnitude picks).
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
    "BASELINE_SELECTORS",
    "RTOL_EPS",
    "SELECTORS",
    "Selection",
    "coefficients_from_r",
    "default_rtol",
    "greedy_pivoted_qr",
    "lstsq_coefficients",
    "output_greedy",
    "select_columns",
]

#: Selectors that ignore the features when choosing (they still re-weight by least squares).
BASELINE_SELECTORS = ("weight_norm", "random")
SELECTORS = ("pivoted_qr", "greedy_gs", "maxvol", "exhaustive", "omp") + BASELINE_SELECTORS

#: Largest number of subsets the ``"exhaustive"`` selector will enumerate.
MAX_EXHAUSTIVE_SUBSETS = 200_000


class Selection(NamedTuple):
    """Result of a selector (pivot order; see the module docstring)."""

    perm: jax.Array  # (n,) int32: columns in pivot order; perm[:m] are kept
    coef: jax.Array  # (m, n): Z[:, perm[:m]] @ coef ~= Z[:, perm]
    rank: jax.Array  # () int32: numerical rank used (<= m)


#: The default relative rank threshold, in units of the dtype's machine epsilon.
RTOL_EPS = 10.0


def default_rtol(dtype) -> float:
    """``10 eps``: the relative threshold on ``|R_ii| / |R_00|`` below which a pivot is dropped.

    It depends on the dtype only, never on the matrix size. Rounding perturbs each column of
    ``Z`` relative to its own norm (Householder QR is column-wise backward stable), so the
    pivots of an exactly rank-deficient ``Z`` sit at ``c eps |R_00|`` with ``c`` of order one
    whatever the width: measured on duplicated neurons, a polynomial activation and constant
    (dead) neurons, ``d_in = 1..3``, in float32 and float64, every pivot past the rank was below
    ``1e-5 eps`` or exactly zero. numpy's matrix-rank tolerance ``eps * max(D, n)`` grows with
    the width ``n`` instead and, in float32, drops genuine high-order Taylor directions of wide
    layers: ``[2, w, 1]`` sigmoid at ``k = 8`` on the unit disk had sup error 1.1e-6, 4.1e-6,
    1.2e-5, 2.3e-4 at ``w = 256, 1024, 4096, 16384`` with it, and 9.1e-8 to 2.9e-7 with
    ``10 eps`` (``benchmarks/width_independence.py``). Thresholds from ``0.5 eps`` to
    ``30 eps`` gave the same errors within 2x on the Fig 1, Fig 2 and ``[2, w, 1]`` networks;
    ``10 eps`` is in the middle of that range.
    """
    return RTOL_EPS * float(jnp.finfo(dtype).eps)


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


def output_greedy(z: jax.Array, target: jax.Array, m: int, rtol) -> jax.Array:
    """Greedy forward selection of ``m`` columns of ``z`` to fit ``target`` (see ``"omp"``).

    Args:
      z: ``(D, n)`` features.
      target: ``(D, t)`` what the kept columns must reproduce (``z @ out_kernel``).
      m: columns to keep (static).
      rtol: columns whose residual norm is below ``rtol`` times the largest column norm count as
        dependent and are taken last.

    Returns:
      ``perm`` ``(n,)`` in pivot order (``perm[:m]`` kept, in the order chosen).
    """
    dsz, n = z.shape
    col2 = jnp.sum(z * z, axis=0)
    floor = (rtol * rtol) * jnp.max(col2)
    t_norm2 = jnp.sum(target * target)
    tiny = jnp.finfo(z.dtype).tiny

    def step(i, carry):
        zr, rt, perm = carry
        n2 = jnp.sum(zr * zr, axis=0)
        proj = jnp.matmul(zr.T, rt, precision=HIGHEST)  # (n, t)
        gain = jnp.sum(proj * proj, axis=1) / jnp.maximum(n2, tiny)
        taken = jnp.arange(n) < i
        valid = ~taken & (n2 > floor)
        fitted = jnp.sum(rt * rt) <= (rtol * rtol) * t_norm2
        # target fitted to rounding: fall back to the pivoted-QR rule (largest residual norm)
        score = jnp.where(fitted, n2, gain)
        score = jnp.where(valid, score, jnp.where(taken, -2.0, -1.0 + n2 / jnp.max(col2 + tiny)))
        p = jnp.argmax(score)
        swap = jnp.arange(n).at[i].set(p).at[p].set(i)
        zr, perm = zr[:, swap], perm[swap]
        col = zr[:, i]
        nrm = jnp.sqrt(jnp.sum(col * col))
        q = jnp.where(nrm > 0, col / jnp.where(nrm > 0, nrm, 1), 0)
        later = (jnp.arange(n) > i).astype(z.dtype)
        for _ in range(2):  # twice is enough (Kahan-Parlett)
            zr = zr - jnp.outer(q, jnp.matmul(q, zr, precision=HIGHEST) * later)
            rt = rt - jnp.outer(q, jnp.matmul(q, rt, precision=HIGHEST))
        zr = zr.at[:, i].set(0)
        return zr, rt, perm

    init = (z, target, jnp.arange(n, dtype=jnp.int32))
    _, _, perm = jax.lax.fori_loop(0, m, step, init)
    del dsz
    return perm


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


def lstsq_coefficients(
    z: jax.Array, perm: jax.Array, m: int, rtol, *, rhs: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Least-squares coefficients for a given column order: ``C = Z_K^+ Z[:, perm]``.

    ``K = perm[:m]``. The pseudo-inverse comes from the SVD of ``Z_K`` with singular values
    below ``rtol * s_max`` dropped, so rank-deficient picks (duplicated or dead neurons) give the
    minimum-norm solution instead of a blow-up. With ``rhs`` (``(D, t)``) it returns
    ``Z_K^+ rhs`` instead.

    Returns:
      ``coef`` ``(m, n)`` (columns in the order of ``perm``; ``(m, t)`` with ``rhs``) and the
      numerical rank of ``Z_K``.
    """
    z_perm = z[:, perm]
    zk = z_perm[:, :m]
    if rhs is not None:
        z_perm = rhs
    u, s, vt = jnp.linalg.svd(zk, full_matrices=False)  # zk = u diag(s) vt, s descending
    keep = s > rtol * s[0]
    s_inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    coef = jnp.matmul(vt.T * s_inv[None, :], jnp.matmul(u.T, z_perm, precision=HIGHEST),
                      precision=HIGHEST)
    return coef, jnp.sum(keep).astype(jnp.int32)


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
    scores: jax.Array | None = None,
    key: jax.Array | None = None,
    out_kernel: jax.Array | None = None,
    target: jax.Array | None = None,
) -> tuple[Selection, dict[str, jax.Array]]:
    """Choose ``m`` of the ``n`` columns of ``z`` and the coefficients reproducing all columns.

    Args:
      z: features ``(D, n)``.
      m: number of columns to keep (static), ``1 <= m <= n``.
      selector: one of :data:`SELECTORS`.
      radius: the row scaling ``r`` (may be traced); rows are multiplied by ``r^{degrees}``.
      degrees: ``(D,)`` total degree of each row (default: no scaling).
      rtol: relative rank threshold on ``|R_ii| / |R_00|`` (default
        :func:`default_rtol`: ``10 eps`` of ``z``'s dtype, whatever its size).
      delta: maxvol tolerance, ``|C_ij| <= 1 + delta`` at exit.
      max_swaps: cap on maxvol swaps (default ``50 * m``).
      scores: ``(n,)`` column scores for ``"weight_norm"`` (the largest ``m`` are kept).
      key: a PRNG key for ``"random"``.
      out_kernel: ``(n, t)`` the next layer's kernel, for ``"omp"`` (it fits ``z @ out_kernel``).
      target: ``(D, t)`` for ``"omp"``: fit this instead of ``z @ out_kernel`` (rows already
        scaled like ``z``'s).

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
    rtol = default_rtol(z.dtype) if rtol is None else rtol
    diag: dict[str, jax.Array] = {}
    if dsz > 2 * n and selector not in BASELINE_SELECTORS:
        # Many more rows than columns (point features): Z = Q R with R (n x n) has the same
        # column inner products, so every selector gives the same pivots and coefficients on R,
        # at a fraction of the cost (one BLAS-3 QR instead of a column-pivoted one on Z).
        if target is None:
            zs = jnp.linalg.qr(zs, mode="r")
        else:
            q, zs = jnp.linalg.qr(zs, mode="reduced")
            target = jnp.matmul(q.T, jnp.asarray(target, zs.dtype), precision=HIGHEST)
    if selector in BASELINE_SELECTORS:
        if selector == "weight_norm":
            if scores is None or np.shape(scores) != (n,):
                raise ValueError(
                    f"select_columns: selector='weight_norm' needs scores of shape ({n},) (one "
                    f"per column, e.g. outgoing-weight norms), got "
                    f"{None if scores is None else np.shape(scores)}"
                )
            perm = jnp.argsort(-jnp.asarray(scores), stable=True).astype(jnp.int32)
        else:
            if key is None:
                raise ValueError("select_columns: selector='random' needs a PRNG key (key=...)")
            perm = jax.random.permutation(key, n).astype(jnp.int32)
        coef, rank = lstsq_coefficients(zs, perm, m, rtol)
        return Selection(perm=perm, coef=coef, rank=rank), diag
    if selector in ("exhaustive", "omp"):
        if selector == "exhaustive":
            perm = _exhaustive(zs, m)
        elif target is not None:
            perm = output_greedy(zs, jnp.asarray(target, zs.dtype), m, rtol)
        else:
            if out_kernel is None or np.shape(out_kernel)[:1] != (n,):
                raise ValueError(
                    f"select_columns: selector='omp' needs out_kernel of shape ({n}, t) (the "
                    f"next layer's kernel), got "
                    f"{None if out_kernel is None else np.shape(out_kernel)}"
                )
            target = jnp.matmul(zs, jnp.asarray(out_kernel, zs.dtype), precision=HIGHEST)
            perm = output_greedy(zs, target, m, rtol)
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
