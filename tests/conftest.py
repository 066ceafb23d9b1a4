"""Strict JAX for every test: float64 available, silent rank promotion is an error."""

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)
