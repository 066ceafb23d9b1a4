"""Tests for the pure-NumPy Sobol generator ``jaxcompress._sobol``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from jaxcompress._sobol import SOBOL_MAX_DIM, sobol


def _scipy_sobol(n: int, dim: int) -> np.ndarray:
    qmc = pytest.importorskip("scipy.stats.qmc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "balance properties" for n != 2^m
        return qmc.Sobol(d=dim, scramble=False).random(n)


def test_max_dim_is_at_least_16() -> None:
    assert SOBOL_MAX_DIM >= 16


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
@pytest.mark.parametrize("dim", range(1, 17))
def test_matches_scipy_exactly(n: int, dim: int) -> None:
    expected = _scipy_sobol(n, dim)
    got = sobol(n, dim)
    assert got.shape == (n, dim)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)


def test_first_points() -> None:
    np.testing.assert_array_equal(sobol(4, 1)[:, 0], [0.0, 0.5, 0.75, 0.25])
    np.testing.assert_array_equal(sobol(2, 3), [[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]])


@pytest.mark.parametrize("skip,n", [(0, 10), (1, 10), (5, 37), (64, 64), (1000, 300)])
def test_skip_equals_slicing(skip: int, n: int) -> None:
    full = sobol(skip + n, SOBOL_MAX_DIM)
    np.testing.assert_array_equal(sobol(n, SOBOL_MAX_DIM, skip=skip), full[skip:])


def test_zero_points() -> None:
    assert sobol(0, 3).shape == (0, 3)
    assert sobol(0, 3, skip=10).shape == (0, 3)


@pytest.mark.parametrize("m", [0, 1, 4, 10])
def test_range_and_stratification(m: int) -> None:
    n = 2**m
    x = sobol(n, SOBOL_MAX_DIM)
    assert np.all(x >= 0.0)
    assert np.all(x < 1.0)
    grid = np.arange(n) / n
    for k in range(SOBOL_MAX_DIM):
        np.testing.assert_array_equal(np.sort(x[:, k]), grid)


def test_range_long_sequence() -> None:
    x = sobol(5000, 4, skip=123)
    assert np.all((x >= 0.0) & (x < 1.0))


@pytest.mark.parametrize(
    "n,dim,skip,match",
    [
        (-1, 2, 0, r"sobol: n must be non-negative, got -1"),
        (4, 0, 0, r"sobol: dim must be between 1 and 16, got 0"),
        (4, 40, 0, r"sobol: dim must be between 1 and 16, got 40"),
        (4, 2, -3, r"sobol: skip must be non-negative, got -3"),
        (2, 1, 2**32 - 1, r"sobol: skip \+ n must be at most 2\*\*32"),
    ],
)
def test_bad_input_raises(n: int, dim: int, skip: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sobol(n, dim, skip=skip)
