"""sup_error finds known maxima; its arguments are checked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc


def _linear_net(a):
    # identity activation: F(x) = a . x
    a = jnp.asarray(a, jnp.float64)
    return [{"kernel": a[:, None], "bias": jnp.zeros(1)},
            {"kernel": jnp.ones((1, 1)), "bias": jnp.zeros(1)}]


def test_sup_error_local_search_finds_the_maximum():
    a = jnp.array([0.3, -1.2, 0.5])
    zero = _linear_net(jnp.zeros(3))
    dom = jc.Ball(3, 2.0)
    exact = 2.0 * float(jnp.linalg.norm(a))
    coarse = float(jc.sup_error(_linear_net(a), zero, activation="identity", domain=dom,
                                key=jax.random.PRNGKey(0), n_samples=32, local_search_steps=0))
    refined, point = jc.sup_error(_linear_net(a), zero, activation="identity", domain=dom,
                                  key=jax.random.PRNGKey(0), n_samples=32,
                                  local_search_steps=200, return_point=True)
    assert coarse < exact * (1 - 1e-3)  # 32 samples alone miss the maximum
    assert abs(float(refined) - exact) < 1e-6 * exact
    np.testing.assert_allclose(point, 2.0 * jnp.sign(point @ a) * a / jnp.linalg.norm(a),
                               atol=1e-3)


def test_sup_error_basic_properties():
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 16, 16, 3])
    dom = jc.Ball(2, 1.0)
    key = jax.random.PRNGKey(2)
    assert float(jc.sup_error(params, params, activation="tanh", domain=dom, key=key)) == 0.0
    shifted = [dict(layer) for layer in params]
    shifted[-1] = {"kernel": params[-1]["kernel"], "bias": params[-1]["bias"] + jnp.array(
        [0.0, -0.25, 0.1])}
    err = jc.sup_error(params, shifted, activation="tanh", domain=dom, key=key)
    assert abs(float(err) - 0.25) < 1e-12
    with pytest.raises(ValueError, match="dim"):
        jc.sup_error(params, params, activation="tanh", domain=jc.Ball(3, 1.0), key=key)


def test_sup_error_is_finite_at_zero_error_in_float32():
    # a zero gradient at every local-search start once gave 0 / 0 = NaN in float32
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 16, 16, 3], dtype=jnp.float32)
    err = jc.sup_error(params, params, activation="sigmoid", domain=jc.Ball(2, 1.0),
                       key=jax.random.PRNGKey(2), n_samples=64, local_search_steps=5)
    assert err.dtype == jnp.float32
    assert float(err) == 0.0
