"""Column selection and interpolation coefficients (Algorithm 1 of Wang, Wang & Ziyin 2026).

Given a feature matrix ``Z in R^{D x n}`` (rows: monomials or points, columns: neurons) a
*selector* chooses ``m`` columns ``K`` and coefficients ``C in R^{m x n}`` with ``Z_K C = Z``
(exactly when ``rank Z <= m``), so that ``sum_i v_i Z_i = sum_{j in K} (C v)_j Z_j``: the next
layer's kernel becomes ``C @ kernel`` (Algorithm 1, lines 8-12).

A selector is a small frozen object (lineax's solver objects are the model: ``lx.SVD(rcond=)``)
that validates its own fields and is called as

.. code-block:: python

    selection = selector(z, m, out_kernel=K_next, target=None, layer=l)

on the row-scaled features ``z`` (``D x n``), returning a :class:`Selection` in *pivot order*:
``perm`` is a permutation of the ``n`` columns whose first ``m`` entries are kept, ``rank`` of them
form the basis, and ``coef`` (``m x n``, columns in pivot order) has ``coef[:, :rank] = I`` and
zero rows past ``rank`` (surplus kept neurons get zero outgoing weight: static shapes, unchanged
function). The library's selectors are registered pytrees (settings static, arrays such as a
PRNG key traced); any hashable object with this call signature works too (see
:class:`Selector`).

Rows are scaled before selecting (by the caller): row ``alpha`` of derivative features by
``r^{|alpha|}`` (``r`` = domain radius) so the scaled rows measure each Taylor term on the domain.
The selection depends on this scaling; ``C`` does not (``Z_K C = Z`` is invariant under row
scaling).

Selectors:

:class:`PivotedQR`
    Businger-Golub column-pivoted QR (``jax.lax.linalg.qr(pivoting=True)``: LAPACK ``geqp3``).
    On TPU, where it is unavailable, the pure-JAX greedy Gram-Schmidt of :class:`GreedyGS`.
:class:`GreedyGS`
    The same greedy rule (largest remaining column norm) as a pure-JAX modified Gram-Schmidt with
    re-orthogonalisation, jit-able on every backend (:func:`greedy_pivoted_qr`).
:class:`MaxVol`
    Pivoted-QR start, then Goreinov-Tyrtyshnikov swaps ``K_i <-> j`` while
    ``|C_ij| > 1 + delta``; each swap multiplies ``|det Z_K|`` by ``|C_ij|``, so it terminates
    with every ``|C_ij| <= 1 + delta``: a (1 + delta)-quasi maximal volume, Lemma 10's bound
    ``|C_ij| <= 1`` up to ``delta``, in polynomial time.
:class:`Exhaustive`
    The true maximum-volume subset by enumeration (Algorithm 1, line 8), for tiny problems only.
:class:`OMP`
    Output-aware greedy forward selection (simultaneous orthogonal matching pursuit; ours, not the
    paper's): with ``T = Z W`` the next layer's pre-activation features (``W`` = ``out_kernel``),
    step ``i`` keeps the column whose residual ``r_j`` (orthogonalised against the kept ones)
    removes the most of the residual ``R_T`` of ``T``, i.e. maximises
    ``||r_j^T R_T||^2 / ||r_j||^2``. It spends the width on what the next layer actually uses;
    once ``T`` is fitted to rounding it continues with the pivoted-QR rule. Exact whenever
    ``rank Z <= m``, like the others.

Baselines (for honest comparisons; both re-weight by least squares on the selected columns):

:class:`WeightNorm`
    Keep the ``m`` columns with the largest outgoing-weight norms ``||K_{l+1}[i, :]||``
    (magnitude pruning).
:class:`RandomChoice`
    Keep ``m`` columns chosen uniformly at random (``fold_in(key, layer)`` per layer).

Re-weighting is least squares in every case: ``C = argmin ||Z_K C - Z||_F = Z_K^+ Z``. For the QR
selectors it is read off the pivoted R factor: with ``Z[:, perm] = Q [R11 R12; 0 R22]``,
``C = R11^{-1} [R11 R12]``, exact when ``rank Z <= m`` (derivative features, ``D_k <= m``) and the
least-squares fit when the rows outnumber the kept columns (point features). The baselines use the
SVD of ``Z_K`` (robust to rank-deficient random or magnitude picks).

Pivots below ``rtol |R_00|`` count as rank deficient; the default is :func:`default_rtol`,
``10 eps`` of the dtype, whatever the matrix size.

Distributed selection (columns split over a mesh axis, inside :func:`jax.shard_map`; used by
:mod:`jaxcompress.sharding`) is a method of the selector, :meth:`Selector.distributed_select`.
The greedy selectors have one implementation each, on one device or with a mesh axis
(:func:`greedy_pivoted_qr`, :func:`output_greedy`, :func:`maxvol`, each taking ``axis=``): each
step's choice is taken over every device's columns, so the sharded forms keep the neurons one
device keeps, in the same pivot order, whatever the number of devices (up to rounding and exact
ties): :class:`PivotedQR` and :class:`GreedyGS` (the greedy rule, which is ``geqp3``'s),
:class:`MaxVol` (then :func:`maxvol`'s swaps) and :class:`OMP`. Every step gathers one
``(value, global index)`` pair per device (:func:`global_argmax`) and sums one masked column
(:func:`gather_columns`). The others keep the default, the tournament of
:func:`tournament_select`, which is exact for :class:`WeightNorm` (a top-``m`` by norm) and may
depend on the device count for :class:`Exhaustive` and user selectors; :class:`RandomChoice`
has no sharded form.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import itertools
import math
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._checks import check_key
from jaxcompress.mlp import HIGHEST

__all__ = [
    "MAX_EXHAUSTIVE_SUBSETS",
    "RTOL_EPS",
    "SELECTORS",
    "TIE_EPS",
    "Exhaustive",
    "GreedyGS",
    "MaxVol",
    "OMP",
    "PivotedQR",
    "RandomChoice",
    "DistributedSelection",
    "Selection",
    "Selector",
    "WeightNorm",
    "as_selector",
    "basis_coefficients",
    "coefficients_from_r",
    "complete_perm",
    "default_rtol",
    "gather_columns",
    "global_argmax",
    "greedy_pivoted_qr",
    "lstsq_coefficients",
    "lstsq_tangent",
    "maxvol",
    "output_greedy",
    "select_columns",
    "tournament_select",
]

#: Scores of :func:`output_greedy` within ``TIE_EPS`` machine epsilons (relative) of the best
#: count as tied; the largest residual norm among them is taken.
TIE_EPS = 64.0
#: Largest number of subsets the ``Exhaustive`` selector will enumerate.
MAX_EXHAUSTIVE_SUBSETS = 200_000

#: The default relative rank threshold, in units of the dtype's machine epsilon.
RTOL_EPS = 10.0


class Selection(NamedTuple):
    """Result of a selector (pivot order; see the module docstring)."""

    perm: jax.Array  # (n,) int32: columns in pivot order; perm[:m] are kept
    coef: jax.Array  # (m, n): Z[:, perm[:m]] @ coef ~= Z[:, perm]
    rank: jax.Array  # () int32: numerical rank used (<= m)
    swaps: jax.Array  # () int32: maxvol swaps (0 for the other selectors)


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

    Computed as ``R11^{-1} R``: the ``m x m`` inverse by one triangular solve, then a matmul,
    which runs at the machine's GEMM rate where LAPACK's ``trsm`` with ``n`` right-hand sides
    does not (2-core development CPU, one thread, float64, ``m = 120``: 1.0 vs 2.6 ms at
    ``n = 1,024``, 1.6 vs 7.6 ms at ``n = 4,096``). The solve's error bound is
    ``c eps |R11^{-1}| |R11| |coef|``; the product's has ``|R11^{-1}| |R|`` in place of
    ``|coef| = |R11^{-1} R|`` (Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 3,
    8 and 14), larger only where ``R11^{-1} R`` cancels. Measured on derivative features with
    ``|R_11| / |R_mm|`` up to ``1e10``: residuals ``|Z_K C - Z|`` equal to rounding
    (``tests/test_select.py``), sup errors of compressed networks equal in float64 and within
    the float32 floor's noise.
    """
    m = r_mat.shape[0]
    idx = jnp.arange(m, dtype=jnp.int32)
    live = idx < rank
    r11 = r_mat[:, :m]
    block = live[:, None] & live[None, :]
    eye = jnp.eye(m, dtype=r_mat.dtype)
    r11 = jnp.where(block, r11, eye)
    rhs = jnp.where(live[:, None], r_mat, 0)
    inv = jax.scipy.linalg.solve_triangular(r11, eye, lower=False)
    return jnp.matmul(inv, rhs, precision=HIGHEST)


def _geqp3(z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(Q, R, perm)`` of LAPACK's column-pivoted QR, ``Z[:, perm] = Q R`` (thin)."""
    kwargs = {}
    if jax.default_backend() == "gpu":
        kwargs["use_magma"] = False  # the host geqp3 path: reproducible pivots
    q, r_mat, perm = jax.lax.linalg.qr(z, pivoting=True, full_matrices=False, **kwargs)
    return q, r_mat, perm.astype(jnp.int32)


def _lapack_pivoted_qr(z: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    _, r_mat, perm = _geqp3(z)
    return perm, _rows(r_mat, m)


# Upstream (JAX <= 0.10.2 at least): the JVP rule of ``jax.lax.linalg.qr(x, pivoting=True)`` on a
# wide matrix (rows < columns, as every ``D_k x d`` feature matrix is) permutes the tangent's
# columns but takes the trailing block ``X2`` of ``dR2 = dQ^T X2 + Q^T dX2`` from the *unpermuted*
# primal, so ``dR`` is wrong. Reproduction (``tests/test_derivatives.py::test_upstream_...``):
#
#     a = jax.random.normal(jax.random.PRNGKey(3), (3, 6))
#     r = lambda a: jax.lax.linalg.qr(a, pivoting=True, full_matrices=False)[1]
#     jax.jvp(r, (a,), (da,))  # differs from central differences by O(1); 6 x 3 and 4 x 4 agree
#
# The selection below therefore carries its own JVP: the derivative of the least-squares
# coefficients with the pivots (and the rank) held fixed. Once JAX's rule is fixed the custom
# rule can go: ``_lapack_selection`` is then ``_qr_selection(*_lapack_pivoted_qr(z, m)...)``.
def _lapack_selection(z: jax.Array, m: int, rtol) -> Selection:
    # rtol may be traced (a selector's pytree leaf): an argument of the rule, not a
    # nondifferentiable one (JAX refuses a tracer there under differentiation)
    return _lapack_selection_rule(z, jnp.asarray(rtol, z.dtype), m)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _lapack_selection_rule(z: jax.Array, rtol: jax.Array, m: int) -> Selection:
    perm, r_mat = _lapack_pivoted_qr(z, m)
    return _qr_selection(r_mat, perm, m, rtol)


@_lapack_selection_rule.defjvp
def _lapack_selection_jvp(m, primals, tangents):
    # the threshold only moves the rank, a step function: no tangent of its own
    (z, rtol), (dz, _) = primals, tangents
    q, r_full, perm = _geqp3(z)
    out = _qr_selection(_rows(r_full, m), perm, m, rtol)
    dcoef = lstsq_tangent(z[:, perm], dz[:, perm], q, _rows(r_full, m), out.coef, out.rank)
    # perm, rank and swaps are integers: their tangents are float0
    zeros = jax.tree.map(lambda a: np.zeros(np.shape(a), jax.dtypes.float0), out)
    return out, zeros._replace(coef=dcoef)


def lstsq_tangent(z_perm: jax.Array, dz_perm: jax.Array, q: jax.Array, r_mat: jax.Array,
                  coef: jax.Array, rank: jax.Array) -> jax.Array:
    r"""The tangent of ``C = Z_K^+ Z`` for a tangent ``dZ``, the kept columns and rank held fixed.

    ``z_perm = Z[:, perm]`` with its first ``rank`` columns ``B = Z_K`` the basis, ``q`` and
    ``r_mat`` (``m x n``) from ``Z[:, perm] = Q R`` (so ``B = Q_r R_11``), ``coef`` the primal
    ``C`` (``m x n``, zero rows past ``rank``). For ``B`` of full column rank
    (Golub & Pereyra 1973),

    .. math::
       d(B^+) = -B^+\,dB\,B^+ + (B^T B)^{-1} dB^T (I - B B^+),

    so with ``B^+ = R_{11}^{-1} Q_r^T`` and the residual ``E = Z - B C``,

    .. math::
       dC = R_{11}^{-1}\left(Q_r^T (dZ - dB\,C) + R_{11}^{-T} dB^T E\right).

    Rows and columns past ``rank`` are masked as in :func:`coefficients_from_r` (their rows of
    ``dC`` are zero). Linear in ``dZ``, so reverse mode transposes it.
    """
    m = coef.shape[0]
    live = jnp.arange(m, dtype=jnp.int32) < rank
    q_m = q[:, :m] if q.shape[1] >= m else jnp.pad(q, ((0, 0), (0, m - q.shape[1])))
    q_m = jnp.where(live[None, :], q_m, 0)
    basis = jnp.where(live[None, :], z_perm[:, :m], 0)
    d_basis = jnp.where(live[None, :], dz_perm[:, :m], 0)
    eye = jnp.eye(m, dtype=r_mat.dtype)
    r11 = jnp.where(live[:, None] & live[None, :], r_mat[:, :m], eye)
    resid = z_perm - jnp.matmul(basis, coef, precision=HIGHEST)
    moved = dz_perm - jnp.matmul(d_basis, coef, precision=HIGHEST)
    rhs = jnp.matmul(q_m.T, moved, precision=HIGHEST) + jax.scipy.linalg.solve_triangular(
        r11, jnp.matmul(d_basis.T, resid, precision=HIGHEST), trans="T", lower=False)
    return jax.scipy.linalg.solve_triangular(r11, rhs, lower=False)


def _rows(r_mat: jax.Array, m: int) -> jax.Array:
    """The first ``m`` rows of R, zero-padded when ``m`` exceeds its row count (m > D)."""
    if r_mat.shape[0] >= m:
        return r_mat[:m]
    return jnp.concatenate([r_mat, jnp.zeros((m - r_mat.shape[0], r_mat.shape[1]), r_mat.dtype)])


def _r_of(z_perm: jax.Array, m: int) -> jax.Array:
    """R factor (m, n) of the unpivoted QR of ``z_perm``."""
    _, r_mat = jnp.linalg.qr(z_perm, mode="reduced")
    r_mat = _rows(r_mat, m)
    # normalise signs so the leading diagonal is positive (purely cosmetic, keeps R11 stable)
    sign = jnp.where(jnp.diagonal(r_mat[:, :m]) < 0, -1.0, 1.0).astype(r_mat.dtype)
    sign = jnp.concatenate([sign, jnp.ones((m - sign.shape[0],), r_mat.dtype)])
    return r_mat * sign[:, None]


def _exhaustive(z: jax.Array, m: int) -> jax.Array:
    dsz, n = z.shape
    n_sub = math.comb(n, m)
    if n_sub > MAX_EXHAUSTIVE_SUBSETS:
        raise ValueError(
            f"Exhaustive: choosing {m} of {n} neurons means {n_sub:,} subsets "
            f"(limit {MAX_EXHAUSTIVE_SUBSETS:,}); it is for tiny test problems only. Use "
            "jc.MaxVol() for a (1 + delta)-quasi maximal volume in polynomial time."
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
    z: jax.Array, perm: jax.Array, m: int, rtol, *, rhs: jax.Array | None = None,
    live: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Least-squares coefficients for a given column order: ``C = Z_K^+ Z[:, perm]``.

    ``K = perm[:m]``. The pseudo-inverse comes from the SVD of ``Z_K`` with singular values
    below ``rtol * s_max`` dropped, so rank-deficient picks (duplicated or dead neurons) give the
    minimum-norm solution instead of a blow-up. With ``rhs`` (``(D, t)``) it returns
    ``Z_K^+ rhs`` instead. With ``live`` (a traced count ``<= m``) only ``perm[:live]`` are
    used: the other columns of ``Z_K`` are zeroed, so their rows of ``C`` are zero (a width
    chosen at run time inside a program compiled for ``m``).

    Returns:
      ``coef`` ``(m, n)`` (columns in the order of ``perm``; ``(m, t)`` with ``rhs``) and the
      numerical rank of ``Z_K``.
    """
    z_perm = z[:, perm]
    zk = z_perm[:, :m]
    if live is not None:
        zk = jnp.where(jnp.arange(m, dtype=jnp.int32) < live, zk, 0)
    if rhs is not None:
        z_perm = rhs
    u, s, vt = jnp.linalg.svd(zk, full_matrices=False)  # zk = u diag(s) vt, s descending
    keep = s > rtol * s[0]
    s_inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    coef = jnp.matmul(vt.T * s_inv[None, :], jnp.matmul(u.T, z_perm, precision=HIGHEST),
                      precision=HIGHEST)
    return coef, jnp.sum(keep).astype(jnp.int32)


# ------------------------------------------------------------------------------------------------
# The greedy selectors: one implementation, on one device or with the columns split over a mesh
# axis (inside jax.shard_map)
# ------------------------------------------------------------------------------------------------


class DistributedSelection(NamedTuple):
    """Result of :meth:`Selector.distributed_select`, the same on every device."""

    kept: jax.Array  # (m,) int32: the kept columns' global indices, in pivot order
    rank: jax.Array  # () int32: numerical rank used (<= m)
    swaps: jax.Array  # () int32: maxvol swaps (0 for the other selectors)


def _offset(n_loc: int, axis: str | None) -> jax.Array:
    """The global index of this device's first column (devices hold contiguous blocks; ``0``
    on one device, ``axis=None``)."""
    if axis is None:
        return jnp.int32(0)
    return jax.lax.axis_index(axis).astype(jnp.int32) * n_loc


def global_argmax(score: jax.Array, axis: str | None = None) -> tuple[jax.Array, jax.Array]:
    """``(value, global index)`` of the largest of the scores of every device's columns.

    One ``all_gather`` of one ``(value, index)`` pair per device (none on one device). Ties go
    to the smallest global index, as LAPACK's ``idamax`` takes the first: each device's
    :func:`jnp.argmax` takes its first maximum, and devices hold increasing blocks of columns.
    """
    p = jnp.argmax(score).astype(jnp.int32)
    if axis is None:
        return score[p], p
    vals = jax.lax.all_gather(score[p], axis)
    idx = jax.lax.all_gather(_offset(score.shape[0], axis) + p, axis)
    best = jnp.argmax(vals)
    return vals[best], idx[best]


def gather_columns(z: jax.Array, idx: jax.Array, axis: str | None = None) -> jax.Array:
    """The columns of global indices ``idx`` (``(m,)``, replicated) of the split ``z``.

    Each device contributes the columns it owns (zeros elsewhere) to one ``psum``:
    ``rows x m`` numbers, on every device (``z[:, idx]`` on one device).
    """
    if axis is None:
        return z[:, idx]
    n_loc = z.shape[1]
    local = idx - _offset(n_loc, axis)
    mine = (local >= 0) & (local < n_loc)
    cols = jnp.where(mine[None, :], z[:, jnp.clip(local, 0, n_loc - 1)], 0)
    return jax.lax.psum(cols, axis)


def _owned(n_loc: int, g: jax.Array, axis: str | None) -> jax.Array:
    """``(n_loc,)`` bool: which of this device's columns has global index ``g``."""
    return _offset(n_loc, axis) + jnp.arange(n_loc, dtype=jnp.int32) == g


def _orthogonalise(res: jax.Array, q: jax.Array, live: jax.Array) -> jax.Array:
    """``res`` minus its projection on the unit vector ``q`` in the ``live`` columns, twice
    (modified Gram-Schmidt with one re-orthogonalisation; twice is enough, Kahan-Parlett)."""
    live = live.astype(res.dtype)
    for _ in range(2):
        res = res - jnp.outer(q, jnp.matmul(q, res, precision=HIGHEST) * live)
    return res


def _unit(col: jax.Array) -> tuple[jax.Array, jax.Array]:
    nrm = jnp.sqrt(jnp.sum(col * col))
    return jnp.where(nrm > 0, col / jnp.where(nrm > 0, nrm, 1), 0), nrm


def greedy_pivoted_qr(z: jax.Array, m: int, axis: str | None = None
                      ) -> tuple[jax.Array, jax.Array]:
    """Greedy column-pivoted QR (modified Gram-Schmidt, re-orthogonalised): pure JAX, on one
    device or with the columns of ``z`` split over the mesh axis ``axis``.

    Step ``i`` takes the remaining column with the largest residual norm (over *all* devices:
    :func:`global_argmax`, one all-gather of one pair per device), broadcasts it (one ``psum``
    of a masked column) and every device orthogonalises its own remaining columns against it.
    The pivots are Businger-Golub's, which LAPACK ``geqp3`` computes with downdated norms: the
    same whatever the number of devices, up to rounding and exact ties. Inside
    :func:`jax.shard_map` ``z`` (``rows x n_loc``) is this device's block of columns.

    Returns:
      ``kept`` ``(m,)`` (global) column indices in pivot order and ``diag`` ``(m,)``, the
      pivots' residual norms ``|R_ii|`` (zero past the row count, where LAPACK's R has no
      rows).
    """
    rows, n_loc = z.shape

    def step(i, carry):
        res, taken, kept, diag = carry
        norms = jnp.sum(res * res, axis=0)
        _, g = global_argmax(jnp.where(taken, -1.0, norms), axis)
        q, nrm = _unit(gather_columns(res, g[None], axis)[:, 0])
        mine = _owned(n_loc, g, axis)
        taken = taken | mine
        res = jnp.where(mine[None, :], 0, _orthogonalise(res, q, ~taken))
        return res, taken, kept.at[i].set(g), diag.at[i].set(jnp.where(i < rows, nrm, 0))

    init = (z, jnp.zeros((n_loc,), bool), jnp.zeros((m,), jnp.int32), jnp.zeros((m,), z.dtype))
    _, _, kept, diag = jax.lax.fori_loop(0, m, step, init)
    return kept, diag


def output_greedy(z: jax.Array, target: jax.Array, m: int, rtol, axis: str | None = None
                  ) -> tuple[jax.Array, jax.Array]:
    """Greedy forward selection of ``m`` columns of ``z`` to fit ``target`` (:class:`OMP`), on
    one device or with the columns split over the mesh axis ``axis``.

    Step ``i`` keeps the column whose residual ``r_j`` (orthogonalised against the kept ones)
    removes the most of the residual ``R_T`` of ``target``, ``||r_j^T R_T||^2 / ||r_j||^2``
    (ties to rounding, :data:`TIE_EPS`, to the largest residual norm); once ``target`` is fitted
    to ``rtol`` it continues with the pivoted-QR rule (the largest residual norm). Columns whose
    residual norm falls below ``rtol`` times the largest column norm count as dependent and are
    taken last. Inside :func:`jax.shard_map` ``z`` (``rows x n_loc``) is this device's block and
    ``target`` (``rows x t``) is replicated: each step scores this device's columns, takes the
    global best (:func:`global_argmax`), broadcasts it and orthogonalises the local columns and
    the target residual (every device applies the same update to its copy of the target).

    Returns:
      ``kept`` ``(m,)`` (global) indices in the order chosen and ``diag`` ``(m,)``, the chosen
      columns' residual norms (the ``|R_ii|`` of the kept columns in that order).
    """
    rows, n_loc = z.shape
    col2 = jnp.sum(z * z, axis=0)
    tiny, eps = jnp.finfo(z.dtype).tiny, jnp.finfo(z.dtype).eps
    # a threshold for comparisons only (pmax has no derivative rule)
    max2 = jax.lax.stop_gradient(jnp.max(col2))
    max2 = max2 if axis is None else jax.lax.pmax(max2, axis)
    floor = (rtol * rtol) * max2
    t_norm2 = jnp.sum(target * target)

    def step(i, carry):
        zr, rt, taken, kept, diag = carry
        n2 = jnp.sum(zr * zr, axis=0)
        proj = jnp.matmul(zr.T, rt, precision=HIGHEST)
        gain = jnp.sum(proj * proj, axis=1) / jnp.maximum(n2, tiny)
        valid = ~taken & (n2 > floor)
        fitted = jnp.sum(rt * rt) <= (rtol * rtol) * t_norm2
        score = jnp.where(fitted, n2, gain)
        score = jnp.where(valid, score, jnp.where(taken, -2.0, -1.0 + n2 / (max2 + tiny)))
        # equal gains (to rounding) go to the largest residual norm, the pivoted-QR rule: with
        # one direction of the rows left (the last pick at D_k rows) every column's gain is
        # |R_T|^2, and rounding alone would choose
        top, _ = global_argmax(score, axis)
        near = score >= top - TIE_EPS * eps * jnp.abs(top)
        _, g = global_argmax(jnp.where(near, n2, -1.0), axis)
        q, nrm = _unit(gather_columns(zr, g[None], axis)[:, 0])
        mine = _owned(n_loc, g, axis)
        taken = taken | mine
        zr = jnp.where(mine[None, :], 0, _orthogonalise(zr, q, ~taken))
        rt = _orthogonalise(rt, q, jnp.ones((rt.shape[1],), bool))
        return zr, rt, taken, kept.at[i].set(g), diag.at[i].set(jnp.where(i < rows, nrm, 0))

    init = (z, target, jnp.zeros((n_loc,), bool), jnp.zeros((m,), jnp.int32),
            jnp.zeros((m,), z.dtype))
    _, _, _, kept, diag = jax.lax.fori_loop(0, m, step, init)
    return kept, diag


def basis_coefficients(basis: jax.Array, z: jax.Array, rank, rtol,
                       baseline: bool) -> tuple[jax.Array, jax.Array]:
    """``C`` (``m x n``) with ``basis C = z`` and which of its ``m`` rows count.

    QR selectors (``baseline=False``): from the unpivoted QR ``basis = Q R``, ``C`` solves
    ``R11 C = Q^T z`` on the first ``rank`` rows (:func:`coefficients_from_r`) and is zero past
    them; baselines: the SVD least-squares fit (:func:`lstsq_coefficients`), every row counts.
    With the basis replicated and ``z`` one device's columns, this is that device's share of
    the re-weighting (:mod:`jaxcompress.sharding`).
    """
    width = basis.shape[1]
    if baseline:
        coef, _ = lstsq_coefficients(basis, jnp.arange(width, dtype=jnp.int32), width, rtol,
                                     rhs=z)
        return coef, jnp.ones((width,), bool)
    q, r = jnp.linalg.qr(basis, mode="reduced")
    rows = r.shape[0]
    rhs = jnp.matmul(q.T, z, precision=HIGHEST)
    if rows < width:  # fewer feature rows than kept neurons: pad with zero rows
        pad = width - rows
        r = jnp.concatenate([r, jnp.zeros((pad, width), r.dtype)])
        rhs = jnp.concatenate([rhs, jnp.zeros((pad, rhs.shape[1]), rhs.dtype)])
    coef = coefficients_from_r(jnp.concatenate([r, rhs], axis=1), rank)
    return coef[:, width:], jnp.arange(width, dtype=jnp.int32) < rank


def maxvol(z: jax.Array, kept: jax.Array, rank, delta, max_swaps: int, rtol,
           axis: str | None = None) -> tuple[jax.Array, jax.Array]:
    """Goreinov-Tyrtyshnikov swaps from the basis ``kept``, on one device or with the columns
    of ``z`` split over the mesh axis ``axis``.

    With ``C`` the coefficients of every column against the basis ``Z_K``
    (:func:`basis_coefficients`; each device holds its own columns' ``m x n_loc``), while the
    largest ``|C_ij|`` (rows ``< rank``, over every device) exceeds ``1 + delta``, column ``j``
    enters the basis at row ``i``: its coefficient column is broadcast (one ``psum``) and every
    device applies the Sherman-Morrison update ``C <- C - (c_j - e_i) C_i / C_ij`` to its own
    columns. Each swap multiplies ``|det Z_K|`` by ``|C_ij| > 1 + delta``, so it terminates with
    every ``|C_ij| <= 1 + delta`` (Lemma 10's bound up to ``delta``).

    Returns:
      the kept (global) indices after the swaps and the number of swaps.
    """
    m = kept.shape[0]
    n_loc = z.shape[1]
    coef, _ = basis_coefficients(gather_columns(z, kept, axis), z, rank, rtol, False)
    rows = jnp.arange(m, dtype=jnp.int32)
    live = (rows < rank)[:, None]

    def cond(state):
        c, _, it = state
        biggest = jnp.max(jnp.where(live, jnp.abs(c), 0))
        biggest = biggest if axis is None else jax.lax.pmax(biggest, axis)
        return (biggest > 1 + delta) & (it < max_swaps)

    def body(state):
        c, kept, it = state
        best = jnp.max(jnp.where(live, jnp.abs(c), 0), axis=0)  # (n_loc,): best row per column
        _, g = global_argmax(best, axis)
        mine = _owned(n_loc, g, axis)
        cj = jnp.sum(jnp.where(mine[None, :], c, 0), axis=1)  # (m,)
        cj = cj if axis is None else jax.lax.psum(cj, axis)
        i = jnp.argmax(jnp.where(rows < rank, jnp.abs(cj), 0)).astype(jnp.int32)
        u = cj - (rows == i).astype(c.dtype)
        c = c - jnp.outer(u, c[i] / cj[i])
        # a surplus kept column (a row past the rank) entering the basis trades places with
        # the column it replaces, which stays kept: the kept columns stay distinct
        inside = kept == g
        swapped = jnp.where(inside, kept[i], kept).at[i].set(g)
        return c, swapped, it + 1

    _, kept, swaps = jax.lax.while_loop(cond, body, (coef, kept, jnp.int32(0)))
    return kept, swaps


def complete_perm(kept: jax.Array, n: int, order: jax.Array | None = None) -> jax.Array:
    """The pivot order of a selection: the ``m`` kept columns in their order, then the other
    ``n - m`` in the order of ``order`` (a permutation of the ``n`` columns; default
    increasing)."""
    order = jnp.arange(n, dtype=jnp.int32) if order is None else order.astype(jnp.int32)
    kept_col = jnp.zeros((n,), bool).at[kept].set(True)
    rest = order[jnp.argsort(kept_col[order], stable=True)[: n - kept.shape[0]]]
    return jnp.concatenate([kept.astype(jnp.int32), rest])


def tournament_select(selector: Selector, z: jax.Array, m: int, *, axis: str,
                      out_kernel: jax.Array, target: jax.Array, layer: int,
                      candidates: int = 2) -> DistributedSelection:
    """Tournament selection (Grigori, Demmel & Xiang 2011): the default distributed form.

    Inside :func:`jax.shard_map`: every device runs ``selector`` on its own columns ``z`` and
    nominates ``min(candidates * m, n_loc)`` of them; the candidates (and their rows of
    ``out_kernel``) are gathered and ``selector`` runs again among them, identically on every
    device. Exact when ``rank z <= m`` (any basis of the column space reproduces every
    column); otherwise the first pivot is the global one and later ones may differ from one
    device's, so the choice may depend on the number of devices.
    """
    n_loc = z.shape[1]
    cand = min(candidates * m, n_loc)
    zr, tr = reduce_rows(z, target)
    nominated = selector(zr, cand, out_kernel=out_kernel, target=tr, layer=layer)
    pick = nominated.perm[:cand]
    cands = jax.lax.all_gather(z[:, pick], axis, axis=1, tiled=True)
    cand_k = jax.lax.all_gather(out_kernel[pick], axis, axis=0, tiled=True)
    cand_idx = jax.lax.all_gather(_offset(n_loc, axis) + pick, axis, axis=0, tiled=True)
    cr, ctr = reduce_rows(cands, target)
    final = selector(cr, m, out_kernel=cand_k, target=ctr, layer=layer)
    return DistributedSelection(kept=cand_idx[final.perm[:m]], rank=final.rank, swaps=final.swaps)


# ------------------------------------------------------------------------------------------------
# Selector objects
# ------------------------------------------------------------------------------------------------


class Selector(abc.ABC):
    """The protocol of a selector: what :func:`jaxcompress.compress` needs of one.

    A selector has a ``name`` (shown in ``CompressInfo``) and is called as
    ``selector(z, m, *, out_kernel, target, layer) -> Selection`` on the row-scaled features
    ``z`` (``rows x n``) with ``1 <= m <= n`` static; ``out_kernel`` (``n x t``) is the next
    layer's kernel, ``target`` (``rows x t``, or ``None``) what the kept columns must reproduce
    when it is not ``z @ out_kernel`` (forward order with point features), ``layer`` the 1-based
    hidden layer. The result must satisfy the :class:`Selection` contract (pivot order,
    ``coef[:, :rank] = I``, zero rows past ``rank``); :func:`coefficients_from_r` and
    :func:`lstsq_coefficients` build ``coef`` from a pivoted R factor or from any column order.

    Declared with defaults (override what applies): :attr:`rtol`, :attr:`baseline`,
    :attr:`distributable`, :attr:`device_independent`, :meth:`check` and
    :meth:`distributed_select` (the sharded form; default: a tournament). A subclass must be
    hashable (it is part of the compiled configuration) or a registered pytree (its arrays
    traced): a frozen dataclass works, and :func:`selector_dataclass` registers one with its
    array fields traced.
    """

    #: The relative rank threshold (``None``: :func:`default_rtol` of the dtype); also used by
    #: the least-squares re-weighting of forward order. The library's selectors trace it (a
    #: pytree leaf): another value runs the same compiled program.
    rtol: float | None = None
    #: ``True`` for baselines whose coefficients come from an SVD least-squares fit (every row of
    #: ``coef`` counts for ``max |C|``), ``False`` for QR selectors (rows past the rank are zero).
    baseline: bool = False
    #: Whether the selector has a sharded form (:meth:`distributed_select`); a random choice has
    #: none (it would depend on the number of devices).
    distributable: bool = True
    #: Whether :meth:`distributed_select` keeps the neurons one device keeps (up to rounding and
    #: exact ties) whatever the number of devices; ``False`` for the default tournament.
    device_independent: bool = False
    #: Whether the choice is a greedy prefix that ignores the next layer's kernel: the first
    #: ``w`` columns chosen for ``m >= w`` are those chosen for ``w``, and rows of zeros change
    #: nothing (pivoted QR, greedy Gram-Schmidt). The tolerance search then evaluates every
    #: candidate order in one compiled program (lower orders as masked rows).
    prefix_stable: bool = False
    #: Whether the first ``w`` of ``m >= w`` columns chosen are those chosen for ``w``, and rows
    #: of zeros in ``z`` and the target alike change nothing, the next layer's kernel allowed
    #: (the prefix-stable selectors and OMP's greedy fit of the target): the order searches'
    #: candidates then run masked, every order of a bucket in one compiled program
    #: (:func:`jaxcompress.driver.masked_runs`).
    greedy_prefix: bool = False

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """How the selector is shown in ``CompressInfo.selector``."""

    @abc.abstractmethod
    def __call__(self, z: jax.Array, m: int, *, out_kernel: jax.Array | None = None,
                 target: jax.Array | None = None, layer: int = 0) -> Selection:
        """Choose ``m`` columns of ``z`` (see the class docstring)."""

    def check(self, n: int, m: int, where: str) -> None:
        """Refuse, eagerly and before compiling, a size the selector cannot handle."""
        del n, m, where

    def check_inputs(self, n: int, out_kernel, target) -> None:
        """Refuse, eagerly and before tracing, inputs the selector cannot use (e.g. no next
        layer's kernel for a selector that needs one); :func:`select_columns` calls it before
        its compiled program, ``__call__`` again inside it."""
        del n, out_kernel, target

    def distributed_select(self, z: jax.Array, m: int, *, axis: str, out_kernel: jax.Array,
                           target: jax.Array, layer: int = 0) -> DistributedSelection:
        """Choose ``m`` columns of ``z`` whose columns are split over the mesh axis ``axis``.

        Called inside :func:`jax.shard_map` (by :func:`jaxcompress.sharding.tournament`) on every
        device: ``z`` (``rows x n_loc``, row-scaled) is this device's contiguous block of
        columns (device ``r`` holds global columns ``r n_loc .. (r + 1) n_loc - 1``),
        ``out_kernel`` (``n_loc x t``) its rows of the next kernel, ``target`` (``rows x t``,
        replicated) what the kept columns must reproduce (``z @ out_kernel`` summed over the
        devices unless the caller says otherwise). Returns the same
        :class:`DistributedSelection` on every device.

        The default is the tournament (:func:`tournament_select`), whose choice may depend on
        the number of devices; :class:`PivotedQR`, :class:`GreedyGS`, :class:`MaxVol` and
        :class:`OMP` override it with their greedy rule taken over every device's columns at
        each step (:attr:`device_independent`).
        """
        return tournament_select(self, z, m, axis=axis, out_kernel=out_kernel, target=target,
                                 layer=layer)


def selector_dataclass(cls=None, *, data_fields: tuple[str, ...] = ()):
    """Make ``cls`` a frozen dataclass registered as a pytree (``data_fields`` traced).

    Every other field is static configuration (hashed into the compilation cache key).
    Registered as a custom node, not with ``jax.tree_util.register_dataclass``: in JAX 0.10 the
    structures of two *different* dataclasses registered that way compare equal when their
    static fields do (``PivotedQR()`` and ``OMP()``: both ``rtol=None``), so ``jax.jit``'s cache
    could hand one selector's compiled program to the other when their hashes met in its table
    (seen twice in full test runs: ``select_columns(..., "omp")`` ran pivoted QR's program).
    JAX rebuilds a selector without calling ``__init__``: the checks of ``__post_init__`` are for
    the values a user gives, not for tracers and placeholders.
    """

    def wrap(cls):
        cls = dataclasses.dataclass(frozen=True)(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        data = [n for n in names if n in data_fields]
        meta = [n for n in names if n not in data_fields]

        def flatten_with_keys(obj):
            return ([(jax.tree_util.GetAttrKey(n), getattr(obj, n)) for n in data],
                    tuple(getattr(obj, n) for n in meta))

        def flatten(obj):
            return [getattr(obj, n) for n in data], tuple(getattr(obj, n) for n in meta)

        def unflatten(static, children):
            # no __init__: the checks of __post_init__ are for values a user gives; JAX
            # rebuilds selectors with tracers and placeholders (ShapeDtypeStruct, ArgInfo)
            obj = object.__new__(cls)
            for name, value in (*zip(meta, static, strict=True),
                                *zip(data, children, strict=True)):
                object.__setattr__(obj, name, value)
            return obj

        jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
        return cls

    return wrap if cls is None else wrap(cls)


def _check_rtol(rtol, where: str) -> None:
    if rtol is None or isinstance(rtol, jax.core.Tracer):   # traced: checked where it was given
        return
    if isinstance(rtol, bool) or np.ndim(rtol) != 0 or not 0 <= float(rtol) < 1:
        raise ValueError(f"{where}: rtol must be a number in [0, 1) (a relative rank threshold; "
                         f"default 10 eps of the dtype), got {rtol!r}")


def _rtol(rtol, dtype):
    """The rank threshold: the dtype's default, a given number, or a traced one (the
    selectors' ``rtol`` is a pytree leaf: another value runs the same compiled program) cast
    to ``dtype`` as a Python number would be."""
    if rtol is None:
        return default_rtol(dtype)
    if isinstance(rtol, jax.Array):   # a tracer too
        return jnp.asarray(rtol, dtype)
    return float(rtol)


def _distributed_qr(z, m, axis, rtol) -> DistributedSelection:
    kept, diag = greedy_pivoted_qr(z, m, axis)
    return DistributedSelection(kept=kept, rank=_numerical_rank(diag, rtol), swaps=jnp.int32(0))


def _greedy_selection(z, m, rtol) -> Selection:
    """:func:`greedy_pivoted_qr` on one device as a :class:`Selection` (the coefficients from
    the kept basis, as the sharded step computes them: :func:`basis_coefficients`)."""
    kept, diag = greedy_pivoted_qr(z, m)
    rank = _numerical_rank(diag, rtol)
    perm = complete_perm(kept, z.shape[1])
    coef, _ = basis_coefficients(z[:, kept], z[:, perm], rank, rtol, False)
    return Selection(perm=perm, coef=coef, rank=rank, swaps=jnp.int32(0))


def _qr_selection(r_mat, perm, m, rtol) -> Selection:
    # rank is judged on the full pivoted R (its diagonal is non-increasing in magnitude)
    rank = _numerical_rank(jnp.diagonal(r_mat[:, :m]), rtol)
    return Selection(perm=perm, coef=coefficients_from_r(r_mat, rank), rank=rank,
                     swaps=jnp.int32(0))


@functools.partial(selector_dataclass, data_fields=("rtol",))
class PivotedQR(Selector):
    """Column-pivoted QR (Businger-Golub; LAPACK ``geqp3``, greedy Gram-Schmidt on TPU).

    Args:
      rtol: relative rank threshold on ``|R_ii| / |R_00|`` (default :func:`default_rtol`).
    """

    rtol: float | None = None
    name: ClassVar[str] = "pivoted_qr"
    device_independent: ClassVar[bool] = True
    prefix_stable: ClassVar[bool] = True
    greedy_prefix: ClassVar[bool] = True

    def __post_init__(self):
        _check_rtol(self.rtol, "PivotedQR")

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        rtol = _rtol(self.rtol, z.dtype)
        if jax.default_backend() == "tpu":
            return _greedy_selection(z, m, rtol)
        return _lapack_selection(z, m, rtol)

    def distributed_select(self, z, m, *, axis, out_kernel=None, target=None,
                           layer=0) -> DistributedSelection:
        # geqp3's pivot rule, taken over every device (the greedy rule: same pivots to rounding)
        return _distributed_qr(z, m, axis, _rtol(self.rtol, z.dtype))


@functools.partial(selector_dataclass, data_fields=("rtol",))
class GreedyGS(Selector):
    """Greedy pivoted Gram-Schmidt (:func:`greedy_pivoted_qr`): pivoted QR in pure JAX.

    Args:
      rtol: relative rank threshold (default :func:`default_rtol`).
    """

    rtol: float | None = None
    name: ClassVar[str] = "greedy_gs"
    device_independent: ClassVar[bool] = True
    prefix_stable: ClassVar[bool] = True
    greedy_prefix: ClassVar[bool] = True

    def __post_init__(self):
        _check_rtol(self.rtol, "GreedyGS")

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        return _greedy_selection(z, m, _rtol(self.rtol, z.dtype))

    def distributed_select(self, z, m, *, axis, out_kernel=None, target=None,
                           layer=0) -> DistributedSelection:
        return _distributed_qr(z, m, axis, _rtol(self.rtol, z.dtype))


@functools.partial(selector_dataclass, data_fields=("delta", "rtol"))
class MaxVol(Selector):
    """Pivoted QR, then maxvol swaps until every ``|C_ij| <= 1 + delta`` (Lemma 10).

    Args:
      delta: the tolerance ``delta >= 0`` of the coefficient bound ``|C_ij| <= 1 + delta``
        (traced, as ``rtol``: another value runs the same compiled program).
      max_swaps: cap on the swaps (default ``50 m``); each swap multiplies the volume by more
        than ``1 + delta``, so the cap is rarely reached.
      rtol: relative rank threshold (default :func:`default_rtol`).
    """

    delta: float = 1e-2
    max_swaps: int | None = None
    rtol: float | None = None
    name: ClassVar[str] = "maxvol"
    device_independent: ClassVar[bool] = True

    def __post_init__(self):
        _check_rtol(self.rtol, "MaxVol")
        if isinstance(self.delta, bool) or not (np.ndim(self.delta) == 0
                                                and 0 <= float(self.delta) < math.inf):
            raise ValueError(f"MaxVol: delta must be a finite number >= 0, got {self.delta!r}")
        if self.max_swaps is not None and (isinstance(self.max_swaps, bool)
                                           or not isinstance(self.max_swaps, int)
                                           or self.max_swaps < 0):
            raise ValueError(f"MaxVol: max_swaps must be an int >= 0, got {self.max_swaps!r}")

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        rtol = _rtol(self.rtol, z.dtype)
        start = PivotedQR(rtol=rtol)(z, m)
        max_swaps = 50 * m if self.max_swaps is None else self.max_swaps
        kept, swaps = maxvol(z, start.perm[:m], start.rank, self.delta, max_swaps, rtol)
        perm = complete_perm(kept, z.shape[1], start.perm)
        r_mat = _r_of(z[:, perm], m)
        return Selection(perm=perm, coef=coefficients_from_r(r_mat, start.rank),
                         rank=start.rank, swaps=swaps)

    def distributed_select(self, z, m, *, axis, out_kernel=None, target=None,
                           layer=0) -> DistributedSelection:
        rtol = _rtol(self.rtol, z.dtype)
        start = _distributed_qr(z, m, axis, rtol)
        max_swaps = 50 * m if self.max_swaps is None else self.max_swaps
        kept, swaps = maxvol(z, start.kept, start.rank, self.delta, max_swaps, rtol, axis)
        return DistributedSelection(kept=kept, rank=start.rank, swaps=swaps)


@functools.partial(selector_dataclass, data_fields=("rtol",))
class Exhaustive(Selector):
    """The maximum-volume subset by enumeration (Algorithm 1, line 8): tiny problems only.

    Args:
      rtol: relative rank threshold (default :func:`default_rtol`).
    """

    rtol: float | None = None
    name: ClassVar[str] = "exhaustive"

    def __post_init__(self):
        _check_rtol(self.rtol, "Exhaustive")

    def check(self, n: int, m: int, where: str) -> None:
        if math.comb(n, m) > MAX_EXHAUSTIVE_SUBSETS:
            raise ValueError(
                f"{where}: the exhaustive selector would enumerate C({n}, {m}) = "
                f"{math.comb(n, m):,} subsets (limit {MAX_EXHAUSTIVE_SUBSETS:,}); it is for tiny "
                "problems only. Use jc.MaxVol() for a (1 + delta)-quasi maximal volume in "
                "polynomial time."
            )

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        self.check(z.shape[1], m, "Exhaustive")
        perm = _exhaustive(z, m)
        return _qr_selection(_r_of(z[:, perm], m), perm, m, _rtol(self.rtol, z.dtype))


@functools.partial(selector_dataclass, data_fields=("rtol",))
class OMP(Selector):
    """Output-aware greedy selection (see the module docstring; ours, not the paper's).

    Args:
      rtol: relative threshold: columns whose residual norm falls below ``rtol`` times the
        largest column norm count as dependent, and the target counts as fitted once its
        residual is below ``rtol`` times its norm (default :func:`default_rtol`).
    """

    rtol: float | None = None
    name: ClassVar[str] = "omp"
    device_independent: ClassVar[bool] = True
    greedy_prefix: ClassVar[bool] = True

    def __post_init__(self):
        _check_rtol(self.rtol, "OMP")

    def check_inputs(self, n, out_kernel, target) -> None:
        if target is None:
            _needs_out_kernel("OMP", n, out_kernel, " (the next layer's kernel)")

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        rtol = _rtol(self.rtol, z.dtype)
        self.check_inputs(z.shape[1], out_kernel, target)
        if target is None:
            target = jnp.matmul(z, jnp.asarray(out_kernel, z.dtype), precision=HIGHEST)
        kept, _ = output_greedy(z, jnp.asarray(target, z.dtype), m, rtol)
        perm = complete_perm(kept, z.shape[1])
        return _qr_selection(_r_of(z[:, perm], m), perm, m, rtol)

    def distributed_select(self, z, m, *, axis, out_kernel=None, target=None,
                           layer=0) -> DistributedSelection:
        rtol = _rtol(self.rtol, z.dtype)
        if target is None:
            target = jax.lax.psum(jnp.matmul(z, jnp.asarray(out_kernel, z.dtype),
                                             precision=HIGHEST), axis)
        kept, diag = output_greedy(z, jnp.asarray(target, z.dtype), m, rtol, axis)
        return DistributedSelection(kept=kept, rank=_numerical_rank(diag, rtol),
                                    swaps=jnp.int32(0))


def _lstsq_selection(z, perm, m, rtol) -> Selection:
    coef, rank = lstsq_coefficients(z, perm, m, rtol)
    return Selection(perm=perm, coef=coef, rank=rank, swaps=jnp.int32(0))


@functools.partial(selector_dataclass, data_fields=("rtol",))
class WeightNorm(Selector):
    """Baseline: keep the largest outgoing-weight norms ``||K_{l+1}[i, :]||`` (magnitude pruning).

    Args:
      rtol: singular values of ``Z_K`` below ``rtol s_max`` are dropped in the least-squares
        re-weighting (default :func:`default_rtol`).
    """

    rtol: float | None = None
    name: ClassVar[str] = "weight_norm"
    baseline: ClassVar[bool] = True
    #: its tournament is exact: every device nominates its ``2m`` largest norms, which contain
    #: its share of the global ``m`` largest, and the final round sorts them again
    device_independent: ClassVar[bool] = True

    def __post_init__(self):
        _check_rtol(self.rtol, "WeightNorm")

    def check_inputs(self, n, out_kernel, target) -> None:
        _needs_out_kernel("WeightNorm", n, out_kernel)

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        self.check_inputs(z.shape[1], out_kernel, target)
        out_kernel = jnp.asarray(out_kernel, z.dtype)
        scores = jnp.sqrt(jnp.sum(out_kernel * out_kernel, axis=1))
        perm = jnp.argsort(-scores, stable=True).astype(jnp.int32)
        return _lstsq_selection(z, perm, m, _rtol(self.rtol, z.dtype))


@functools.partial(selector_dataclass, data_fields=("key", "rtol"))
class RandomChoice(Selector):
    """Baseline: keep ``m`` columns chosen uniformly at random.

    Args:
      key: a PRNG key (traced); hidden layer ``l`` uses ``jax.random.fold_in(key, l)``.
      rtol: as for :class:`WeightNorm`.
    """

    key: jax.Array
    rtol: float | None = None
    name: ClassVar[str] = "random"
    baseline: ClassVar[bool] = True
    distributable: ClassVar[bool] = False

    def __post_init__(self):
        _check_rtol(self.rtol, "RandomChoice")
        key = self.key
        # user input is checked; tracers and pytree placeholders (what jax.tree_util puts in a
        # leaf's place while it maps over in_axes and the like) pass through
        if key is None or isinstance(key, (bool, int, float, complex, list, tuple, np.ndarray,
                                           np.generic)) or (
                isinstance(key, jax.Array) and not isinstance(key, jax.core.Tracer)):
            check_key(key, "RandomChoice")

    def check(self, n: int, m: int, where: str) -> None:
        if self.key is None:
            raise ValueError(f"{where}: RandomChoice needs a PRNG key, e.g. "
                             "jc.select.RandomChoice(jax.random.PRNGKey(0))")

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0) -> Selection:
        key = jax.random.fold_in(self.key, layer)
        perm = jax.random.permutation(key, z.shape[1]).astype(jnp.int32)
        return _lstsq_selection(z, perm, m, _rtol(self.rtol, z.dtype))


#: Selector names accepted wherever a selector is (``"omp"`` means ``OMP()``), for convenience.
SELECTORS: dict[str, Any] = {cls.name: cls for cls in (
    PivotedQR, GreedyGS, MaxVol, Exhaustive, OMP, WeightNorm)}


def _needs_out_kernel(name: str, n: int, out_kernel, what: str = "") -> None:
    if out_kernel is None or np.shape(out_kernel)[:1] != (n,):
        raise ValueError(f"{name}: needs out_kernel of shape ({n}, t){what}, got "
                         f"{None if out_kernel is None else np.shape(out_kernel)}")


def as_selector(selector, where: str = "select") -> Selector:
    """A selector object: ``selector`` itself, or the default object of a selector name."""
    if isinstance(selector, str):
        if selector == "random":
            raise ValueError(f"{where}: the random baseline needs a key: pass "
                             "jc.select.RandomChoice(jax.random.PRNGKey(0))")
        if selector not in SELECTORS:
            raise ValueError(f"{where}: selector must be one of {sorted(SELECTORS)} or a "
                             f"selector object (e.g. jc.MaxVol(delta=0.01)), got {selector!r}")
        return SELECTORS[selector]()
    if not isinstance(selector, Selector):
        raise TypeError(f"{where}: a selector is a name or an instance of a "
                        "jaxcompress.select.Selector subclass "
                        "(a 'name' and __call__(z, m, *, out_kernel, target, layer) -> Selection; "
                        f"see jaxcompress.select.Selector), got {type(selector).__name__}")
    return selector


def reduce_rows(z: jax.Array, target: jax.Array | None = None):
    """``(R, Q^T target)`` for ``z = Q R`` when ``z`` has more than twice as many rows as columns.

    Point features have one row per point: ``Z = Q R`` with ``R`` (``n x n``) has the same column
    inner products, so every selector gives the same pivots and coefficients on ``R`` (and
    ``Z_K^+ Z = R_K^+ R``), at a fraction of the cost. Otherwise returns the inputs.
    """
    dsz, n = z.shape
    if dsz <= 2 * n:
        return z, target
    if target is None:
        return jnp.linalg.qr(z, mode="r"), None
    q, r = jnp.linalg.qr(z, mode="reduced")
    return r, jnp.matmul(q.T, jnp.asarray(target, z.dtype), precision=HIGHEST)


def select_columns(
    z: jax.Array,
    m: int,
    selector="pivoted_qr",
    *,
    scale: jax.Array | None = None,
    out_kernel: jax.Array | None = None,
    target: jax.Array | None = None,
    layer: int = 0,
) -> Selection:
    """Choose ``m`` of the ``n`` columns of ``z`` and the coefficients reproducing all columns.

    Args:
      z: features ``(D, n)``.
      m: number of columns to keep (static), ``1 <= m <= n``.
      selector: a selector object (:class:`PivotedQR`, :class:`MaxVol`, ...) or its name.
      scale: ``(D,)`` row weights applied before selecting (e.g. ``r^{|alpha|}``; default none).
      out_kernel: ``(n, t)`` the next layer's kernel (for :class:`OMP` and :class:`WeightNorm`).
      target: ``(D, t)`` what the kept columns must reproduce instead of ``z @ out_kernel`` (rows
        scaled like ``z``'s).
      layer: the hidden layer (seeds :class:`RandomChoice`).

    Returns:
      The :class:`Selection`; ``coef`` reproduces the *unscaled* ``z`` as well (row scaling does
      not change ``Z_K C = Z``).
    """
    sel = as_selector(selector, "select_columns")
    n = z.shape[1]
    if not 1 <= m <= n:
        raise ValueError(f"select_columns: m must be in [1, {n}], got {m}")
    sel.check(n, m, "select_columns")
    sel.check_inputs(n, out_kernel, target)
    arrays = (z, scale, out_kernel, target)
    # one compiled program per shape and configuration, also under a bare jax.vmap (op by op, a
    # first eager call compiled a program per operation: 29 for pivoted QR of a 28 x 64
    # matrix); inside the caller's jax.jit it is a call in the caller's program
    if jax.tree_util.tree_leaves(sel) != [sel]:   # a registered pytree: its arrays traced
        return _select_jit(*arrays, sel, m=m, layer=layer)
    try:
        hash(sel)
    except TypeError:   # neither a pytree nor hashable: op by op
        return _select(*arrays, sel, m=m, layer=layer)
    return _select_static(*arrays, m=m, layer=layer, sel=sel)


def _select(z, scale, out_kernel, target, sel, *, m, layer) -> Selection:
    if scale is not None:
        z = z * jnp.asarray(scale, z.dtype)[:, None]
        if target is not None:
            target = jnp.asarray(target, z.dtype) * jnp.asarray(scale, z.dtype)[:, None]
    z, target = reduce_rows(z, target)
    return sel(z, m, out_kernel=out_kernel, target=target, layer=layer)


_select_jit = jax.jit(_select, static_argnames=("m", "layer"))


@functools.partial(jax.jit, static_argnames=("m", "layer", "sel"))
def _select_static(z, scale, out_kernel, target, *, m, layer, sel) -> Selection:
    return _select(z, scale, out_kernel, target, sel, m=m, layer=layer)
