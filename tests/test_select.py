"""Tests for ``jaxcompress.select``: column selection against slow, obviously-right references.

References: ``scipy.linalg.qr(pivoting=True)`` (LAPACK geqp3) for the pivots and R factor, NumPy
least squares / determinants for the coefficients and volumes, and brute-force enumeration with
``itertools`` for the maximum-volume subset. Everything runs in float64.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from programs import programs_compiled

import jaxcompress as jc
import jaxcompress.select
from jaxcompress.select import coefficients_from_r

jax.config.update("jax_enable_x64", True)

ATOL = 1e-10
SHAPES = [(10, 40), (28, 100), (15, 15)]
QR_SELECTORS = ["pivoted_qr", "greedy_gs"]


def _gauss(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _scipy_pivots(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, r_mat, piv = scipy.linalg.qr(z, pivoting=True, mode="economic")
    return piv, r_mat


_select_jit = jax.jit(jc.select.select_columns, static_argnames=("m", "selector"))


def _selector(name: str, rtol=None, delta=None, max_swaps=None):
    if name == "maxvol":
        return jc.MaxVol(delta=1e-2 if delta is None else delta, max_swaps=max_swaps, rtol=rtol)
    return {"pivoted_qr": jc.PivotedQR, "greedy_gs": jc.select.GreedyGS,
            "exhaustive": jc.select.Exhaustive, "omp": jc.OMP}[name](rtol=rtol)


def _select(z: np.ndarray, m: int, *, selector: str = "pivoted_qr", radius=None, degrees=None,
            **kwargs) -> tuple[np.ndarray, np.ndarray, int, dict]:
    """``select_columns`` on a NumPy matrix, jit-compiled (one compilation per shape/setting);
    rows scaled by ``radius ** degrees`` when given."""
    # (device_put, not jnp.asarray: that compiles a copy program per shape)
    scale = None if degrees is None else jax.device_put(radius ** np.asarray(degrees, float))
    sel = _select_jit(jax.device_put(z), m=m, selector=_selector(selector, **kwargs),
                      scale=scale)
    return np.asarray(sel.perm), np.asarray(sel.coef), int(sel.rank), {"swaps": sel.swaps}


def _assert_is_permutation(perm: np.ndarray, n: int) -> None:
    assert perm.shape == (n,)
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))


def _reconstruction_error(z: np.ndarray, perm: np.ndarray, coef: np.ndarray) -> float:
    m = coef.shape[0]
    return float(np.max(np.abs(z[:, perm[:m]] @ coef - z[:, perm])))


def _qr_max_coef(z: np.ndarray, m: int) -> float:
    """max |C_ij| of the pivoted-QR interpolation coefficients (NumPy/SciPy reference)."""
    _, r_mat = _scipy_pivots(z)
    coef = scipy.linalg.solve_triangular(r_mat[:m, :m], r_mat[:m])
    return float(np.max(np.abs(coef)))


# --- pivots against scipy ------------------------------------------------------------------------


@pytest.mark.parametrize("selector", QR_SELECTORS)
@pytest.mark.parametrize("shape", SHAPES)
def test_pivots_match_scipy(shape: tuple[int, int], selector: str) -> None:
    z = _gauss(shape, seed=sum(shape))
    m = min(shape)
    perm, coef, rank, _ = _select(z, m, selector=selector)
    _assert_is_permutation(perm, shape[1])
    piv, _ = _scipy_pivots(z)
    np.testing.assert_array_equal(perm[:m], piv[:m])
    assert coef.shape == (m, shape[1])
    assert rank == m


@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_pivoted_qr_pivots_and_r_diagonal_match_scipy(shape: tuple[int, int]) -> None:
    z = _gauss(shape, seed=3 * sum(shape))
    m = min(shape) - 2
    greedy = jax.jit(jaxcompress.select.greedy_pivoted_qr, static_argnums=1)   # one program
    kept, diag = greedy(jax.device_put(z), m)
    kept, diag = np.asarray(kept), np.asarray(diag)
    piv, r_ref = _scipy_pivots(z)
    assert kept.shape == diag.shape == (m,)
    np.testing.assert_array_equal(kept, piv[:m])
    np.testing.assert_allclose(diag, np.abs(np.diag(r_ref)[:m]), rtol=0, atol=ATOL)
    # the pivots' residual norms are |R_ii| of the QR of the kept columns in pivot order
    r_kept = np.linalg.qr(z[:, kept])[1]
    np.testing.assert_allclose(diag, np.abs(np.diag(r_kept)), rtol=0, atol=ATOL)


@pytest.mark.parametrize("selector", QR_SELECTORS)
def test_pivots_match_scipy_for_fewer_columns(selector: str) -> None:
    z = _gauss((10, 40), seed=7)
    m = 7
    perm, coef, rank, _ = _select(z, m, selector=selector)
    piv, _ = _scipy_pivots(z)
    np.testing.assert_array_equal(perm[:m], piv[:m])
    assert coef.shape == (m, 40)
    assert rank == m
    # full column rank but m < D: coef is the least-squares fit of every column on the kept ones
    lstsq = np.linalg.lstsq(z[:, perm[:m]], z[:, perm], rcond=None)[0]
    np.testing.assert_allclose(coef, lstsq, atol=ATOL)


# --- coefficients ----------------------------------------------------------------------------


@pytest.mark.parametrize("selector", ["pivoted_qr", "greedy_gs", "maxvol"])
@pytest.mark.parametrize("shape", SHAPES)
def test_coefficients_reproduce_matrix(shape: tuple[int, int], selector: str) -> None:
    z = _gauss(shape, seed=5 * sum(shape))
    m = min(shape)
    perm, coef, rank, _ = _select(z, m, selector=selector)
    assert rank == m
    assert _reconstruction_error(z, perm, coef) < ATOL
    np.testing.assert_allclose(coef[:, :rank], np.eye(rank), rtol=0, atol=ATOL)


@pytest.mark.parametrize("k", [6, 10])
def test_coefficients_by_inverse_as_accurate_as_a_triangular_solve(k: int) -> None:
    # coefficients_from_r computes R11^{-1} R (inverse, then a matmul) instead of one triangular
    # solve with n right-hand sides: on real, badly conditioned derivative features (|R_ii|
    # spanning ~10 orders) its residual |Z_K C - Z| stays at the solve's rounding level
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 48, 200, 1])
    z = jc.features.derivative_features(params, activation="sigmoid", order=k)[1]
    m = jc.taylor.num_monomials(2, k)
    _, r_mat, perm = jax.lax.linalg.qr(z, pivoting=True, full_matrices=False)
    diag = np.abs(np.diagonal(np.asarray(r_mat)))
    assert diag[0] / diag[m - 1] > 1e6  # the case that matters: an ill-conditioned R11
    rank = jnp.int32(m)
    coef = np.asarray(jax.jit(coefficients_from_r)(r_mat[:m], rank))   # one program
    ref = scipy.linalg.solve_triangular(np.asarray(r_mat)[:m, :m], np.asarray(r_mat)[:m])
    zp = np.asarray(z)[:, np.asarray(perm)]
    res = np.max(np.abs(zp[:, :m] @ coef - zp))
    res_ref = np.max(np.abs(zp[:, :m] @ ref - zp))
    assert res <= 10 * res_ref + 1e-15 * np.max(np.abs(zp))
    np.testing.assert_allclose(coef[:, :m], np.eye(m), rtol=0, atol=1e-8)


# --- row scaling ---------------------------------------------------------------------------------


def _scaled_problem() -> tuple[np.ndarray, np.ndarray]:
    degrees = jc.taylor.monomials(2, 3).sum(axis=1)  # D_3 = 10 rows of degree 0..3
    return _gauss((degrees.shape[0], 24), seed=11), degrees


@pytest.mark.parametrize("selector", QR_SELECTORS)
@pytest.mark.parametrize("radius", [0.25, 3.0])
def test_row_scaling_selection_matches_scipy_on_scaled_matrix(selector: str,
                                                              radius: float) -> None:
    z, degrees = _scaled_problem()
    m = z.shape[0]
    scaled = z * radius ** degrees[:, None]
    perm, coef, rank, _ = _select(z, m, selector=selector, radius=radius, degrees=degrees)
    np.testing.assert_array_equal(perm[:m], _scipy_pivots(scaled)[0][:m])
    # the scaling matters here: the unscaled selection is a different set of columns
    assert set(perm[:m].tolist()) != set(_scipy_pivots(z)[0][:m].tolist())
    # ... but the coefficients solve the *unscaled* system Z_K C = Z exactly
    assert rank == m
    assert _reconstruction_error(z, perm, coef) < ATOL
    np.testing.assert_allclose(coef, np.linalg.solve(z[:, perm[:m]], z[:, perm]), atol=ATOL)


def test_row_scaling_leaves_coefficients_unchanged_for_same_columns() -> None:
    # For a square selection |det Z_K| only picks up the factor prod(r^deg) under row scaling, so
    # the maximum-volume subset is the same with and without scaling: same columns, and C must
    # then be identical (Z_K C = Z is invariant under row scaling).
    z = _gauss((4, 9), seed=2)
    degrees = np.array([0, 1, 1, 2])
    perm0, coef0, rank0, _ = _select(z, 4, selector="exhaustive")
    perm1, coef1, rank1, _ = _select(z, 4, selector="exhaustive", radius=5.0, degrees=degrees)
    assert rank0 == rank1 == 4
    np.testing.assert_array_equal(perm0, perm1)
    np.testing.assert_allclose(coef1, coef0, rtol=0, atol=ATOL)


# --- rank deficiency ---------------------------------------------------------------------------


def _low_rank(shape: tuple[int, int], rank: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((shape[0], rank)) @ rng.standard_normal((rank, shape[1]))


def _duplicated_columns() -> np.ndarray:
    base = _gauss((8, 5), seed=4)
    return np.concatenate([base, 2.0 * base[:, :3], base[:, 3:]], axis=1)  # (8, 13), rank 5


@pytest.mark.parametrize("selector", ["pivoted_qr", "greedy_gs", "maxvol"])
@pytest.mark.parametrize(
    ("z", "m", "expected_rank"),
    [(_low_rank((20, 50), 7, seed=0), 10, 7), (_duplicated_columns(), 8, 5)],
    ids=["rank7", "duplicates"],
)
def test_rank_deficient(z: np.ndarray, m: int, expected_rank: int, selector: str) -> None:
    perm, coef, rank, _ = _select(z, m, selector=selector)
    _assert_is_permutation(perm, z.shape[1])
    assert rank == expected_rank
    assert coef.shape == (m, z.shape[1])
    np.testing.assert_array_equal(coef[rank:], 0.0)  # surplus kept neurons: zero weight, exactly
    np.testing.assert_allclose(coef[:, :rank], np.eye(m, rank), rtol=0, atol=ATOL)
    assert _reconstruction_error(z, perm, coef) < ATOL
    # the basis columns are linearly independent
    assert np.linalg.matrix_rank(z[:, perm[:rank]]) == rank


def _graded(seed: int) -> np.ndarray:
    """(8, 20) with singular values 1 (x5) and 1e-7 (x3): full rank, but with a clear gap."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    v = np.linalg.qr(rng.standard_normal((20, 8)))[0]
    return u @ np.diag([1.0] * 5 + [1e-7] * 3) @ v.T


@pytest.mark.parametrize("selector", ["pivoted_qr", "greedy_gs"])
def test_rank_threshold(selector: str) -> None:
    z = _graded(seed=3)
    # default rtol (eps * max(D, n)): small but genuine directions count
    perm, coef, rank, _ = _select(z, 8, selector=selector)
    assert rank == 8
    assert _reconstruction_error(z, perm, coef) < ATOL
    # a coarser rtol cuts at the gap: surplus rows zero, reconstruction to the gap's size
    perm, coef, rank, _ = _select(z, 8, selector=selector, rtol=1e-4)
    assert rank == 5
    np.testing.assert_array_equal(coef[5:], 0.0)
    assert _reconstruction_error(z, perm, coef) < 1e-6


# --- maxvol --------------------------------------------------------------------------------------


def _qr_violating_matrix(shape: tuple[int, int], threshold: float) -> np.ndarray:
    """The first seeded Gaussian matrix whose pivoted-QR coefficients exceed ``threshold``."""
    for seed in range(500):
        z = _gauss(shape, seed)
        if _qr_max_coef(z, shape[0]) > threshold:
            return z
    raise AssertionError("no seed gives a pivoted-QR coefficient above the threshold")


@pytest.mark.parametrize("delta", [1e-2, 1e-1])
@pytest.mark.parametrize("nth", [0, 1])
def test_maxvol_bounds_coefficients_and_grows_volume(delta: float, nth: int) -> None:
    shape = (6, 30)
    found = []
    for seed in range(500):
        z = _gauss(shape, seed)
        if _qr_max_coef(z, shape[0]) > 1 + 2 * delta:
            found.append(z)
            if len(found) > nth:
                break
    z = found[nth]
    m = shape[0]
    perm_qr, coef_qr, _, _ = _select(z, m, selector="pivoted_qr")
    # the QR start violates the bound, so maxvol has work to do
    assert np.max(np.abs(coef_qr)) > 1 + delta
    perm, coef, rank, diag = _select(z, m, selector="maxvol", delta=delta)
    _assert_is_permutation(perm, shape[1])
    assert rank == m
    assert int(diag["swaps"]) >= 1
    assert np.max(np.abs(coef[:rank])) <= 1 + delta
    assert _reconstruction_error(z, perm, coef) < ATOL
    vol_qr = abs(np.linalg.det(z[:, perm_qr[:m]]))
    vol = abs(np.linalg.det(z[:, perm[:m]]))
    assert vol > vol_qr * (1 + delta)  # each swap multiplies the volume by |C_ij| > 1 + delta


def test_maxvol_without_violation_keeps_qr_selection() -> None:
    z = _gauss((6, 30), seed=0)
    assert _qr_max_coef(z, 6) <= 1.0 + 1e-12
    perm_qr, _, _, _ = _select(z, 6, selector="pivoted_qr")
    perm, _, _, diag = _select(z, 6, selector="maxvol")
    assert int(diag["swaps"]) == 0
    np.testing.assert_array_equal(perm, perm_qr)


# --- exhaustive ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_exhaustive_is_brute_force_max_volume(seed: int) -> None:
    z = _gauss((4, 9), seed)
    vols = {c: abs(np.linalg.det(z[:, c])) for c in itertools.combinations(range(9), 4)}
    best = max(vols, key=vols.get)
    perm, coef, rank, _ = _select(z, 4, selector="exhaustive")
    _assert_is_permutation(perm, 9)
    assert tuple(sorted(perm[:4].tolist())) == best
    assert rank == 4
    assert _reconstruction_error(z, perm, coef) < ATOL
    # the maximum-volume basis has all |C_ij| <= 1 (Cramer's rule)
    assert np.max(np.abs(coef)) <= 1 + 1e-12
    # no other selector can beat the true maximum volume
    perm_qr, _, _, _ = _select(z, 4, selector="pivoted_qr")
    assert vols[best] >= vols[tuple(sorted(perm_qr[:4].tolist()))]


def test_exhaustive_refuses_large_problem() -> None:
    z = jnp.zeros((20, 200))
    with pytest.raises(ValueError, match=r"exhaustive.*subsets.*MaxVol"):
        jc.select.select_columns(z, 20, "exhaustive")


# --- jit / vmap ----------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", ["pivoted_qr", "greedy_gs", "maxvol"])
def test_select_under_jit_matches_eager(selector: str) -> None:
    z = jnp.asarray(_qr_violating_matrix((6, 30), 1.1))
    jitted = jax.jit(jc.select.select_columns, static_argnames=("m", "selector"))
    got = jitted(z, m=6, selector=_selector(selector))
    want = jc.select.select_columns(z, 6, _selector(selector))
    np.testing.assert_array_equal(np.asarray(got.perm), np.asarray(want.perm))
    np.testing.assert_allclose(np.asarray(got.coef), np.asarray(want.coef), rtol=0, atol=ATOL)
    assert int(got.rank) == int(want.rank) == 6


@pytest.mark.parametrize("selector", ["pivoted_qr", "greedy_gs", "maxvol"])
def test_select_under_vmap_matches_loop(selector: str) -> None:
    batch = np.stack([_gauss((6, 30), 6), _low_rank((6, 30), 4, seed=9), _gauss((6, 30), 46)])

    def one(z):
        return jc.select.select_columns(z, 6, _selector(selector))

    got = jax.vmap(one)(jnp.asarray(batch))
    assert got.perm.shape == (3, 30) and got.coef.shape == (3, 6, 30) and got.rank.shape == (3,)
    np.testing.assert_array_equal(np.asarray(got.rank), [6, 4, 6])
    for b in range(3):
        perm, coef, rank, _ = _select(batch[b], 6, selector=selector)
        np.testing.assert_array_equal(np.asarray(got.perm)[b], perm)
        np.testing.assert_allclose(np.asarray(got.coef)[b], coef, rtol=0, atol=ATOL)
        assert int(np.asarray(got.rank)[b]) == rank


# --- argument errors -----------------------------------------------------------------------------


def test_bad_selector_name() -> None:
    with pytest.raises(ValueError, match=r"selector must be one of .*'nope'"):
        jc.select.select_columns(jnp.ones((3, 4)), 2, "nope")


@pytest.mark.parametrize("m", [0, 5])
def test_bad_number_of_columns(m: int) -> None:
    with pytest.raises(ValueError, match=r"m must be in \[1, 4\]"):
        jc.select.select_columns(jnp.ones((3, 4)), m)


@pytest.mark.parametrize("selector", ["pivoted_qr", "greedy_gs", "maxvol", "exhaustive"])
def test_more_columns_than_rows(selector: str) -> None:
    # m > D is allowed by select_columns (1 <= m <= n) and reached by compress(widths=...): the
    # R factor has only D rows, yet coef must still have m rows, the surplus ones zero
    z = _gauss((3, 7), seed=0)
    m = 5
    perm, coef, rank, _ = _select(z, m, selector=selector)
    _assert_is_permutation(perm, 7)
    assert rank == 3
    assert coef.shape == (m, 7)
    np.testing.assert_array_equal(coef[rank:], 0.0)
    np.testing.assert_allclose(coef[:, :rank], np.eye(m, rank), rtol=0, atol=ATOL)
    assert _reconstruction_error(z, perm, coef) < ATOL


def test_selectors_of_different_classes_have_different_structures() -> None:
    """``jax.jit`` keys its compiled programs by the pytree structure of the arguments: two
    selector classes with the same static fields must not compare equal there (registered
    with ``jax.tree_util.register_dataclass``, JAX 0.10 compared ``PivotedQR()`` and ``OMP()``
    equal, both ``rtol=None``, and once ran pivoted QR's program for ``"omp"``). A selector
    still flattens to its array fields, with their names as key paths, and back."""
    sels = [jc.select.PivotedQR(), jc.select.GreedyGS(), jc.MaxVol(), jc.select.Exhaustive(),
            jc.OMP(), jc.select.WeightNorm(), jc.select.RandomChoice(jax.random.PRNGKey(0))]
    structs = [jax.tree_util.tree_structure(s) for s in sels]
    for (i, a), (j, b) in itertools.product(enumerate(structs), repeat=2):
        assert (a == b) == (i == j), (sels[i], sels[j])
    assert jax.tree_util.tree_structure(jc.OMP(rtol=1e-3)) != structs[4]
    choice = sels[-1]
    (path, leaf), = jax.tree_util.tree_flatten_with_path(choice)[0]
    assert jax.tree_util.keystr(path) == ".key" and leaf is choice.key
    assert jax.tree.map(lambda a: a, choice) == choice
    assert jax.tree.map(lambda a: a, sels[4]) == sels[4] and jax.tree.leaves(sels[4]) == []


def test_another_rank_threshold_runs_the_same_program() -> None:
    """A selector's ``rtol`` (and maxvol's ``delta``) is a pytree leaf, traced: compressing with
    another value compiles nothing (static, it compiled a program per value), the ranks follow
    the value, a bad value is still refused before tracing, and the derivative through pivoted
    QR's own JVP rule runs with the threshold traced (a nondifferentiable argument there
    refused it)."""
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1])
    ball = jc.Ball(2, 1.0)

    def run(sel, params=teacher):
        return jc.compress(params, jc.derivative_matching(4, selector=sel), activation="tanh",
                           domain=ball)

    run(jc.select.WeightNorm(rtol=1e-9))
    (_, loose), names = programs_compiled(lambda: run(jc.select.WeightNorm(rtol=1e-3)))
    assert names == []
    tight = run(jc.select.WeightNorm(rtol=1e-9))[1]
    assert [int(li.rank) for li in tight.layers] == [15, 15]
    assert [int(li.rank) for li in loose.layers] == [14, 14]
    with pytest.raises(ValueError, match="rtol must be a number in"):
        run(jc.select.PivotedQR(rtol=2.0))
    # maxvol's coefficient bound delta too
    run(jc.MaxVol(delta=0.01))
    (_, exact), names = programs_compiled(lambda: run(jc.MaxVol(delta=0.0)))
    assert names == [] and max(int(li.swaps) for li in exact.layers) > 0
    with pytest.raises(ValueError, match="delta must be a finite number"):
        jc.MaxVol(delta=-1.0)

    def loss(params, rtol):
        small, _ = run(jc.select.PivotedQR(rtol=rtol), params)
        return jnp.sum(jc.apply(small, jnp.ones((3, 2)), activation="tanh") ** 2)

    grad = jax.jit(jax.grad(loss))(teacher, 1e-8)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grad))
