"""Ball sampling and projection; sup_error finds known maxima."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc


@pytest.mark.parametrize("dim", [1, 2, 3, 4])
def test_ball_sampling_and_projection(dim):
    center = jnp.arange(dim, dtype=jnp.float64) * 0.1
    ball = jc.Ball(dim, 0.7, center=center)
    x = ball.sample(jax.random.PRNGKey(0), 20000)
    r = jnp.linalg.norm(x - center[None], axis=1)
    assert x.shape == (20000, dim) and float(jnp.max(r)) <= 0.7 + 1e-12
    # uniform in the ball: P(|x - c| <= R/2) = 2^-dim
    assert abs(float(jnp.mean(r <= 0.35)) - 0.5**dim) < 0.02
    s = ball.sobol(1000)
    assert s.shape == (1000, dim)
    assert float(jnp.max(jnp.linalg.norm(s - center[None], axis=1))) <= 0.7 + 1e-12
    np.testing.assert_array_equal(s, ball.sobol(1000))  # deterministic
    far = center[None] + 5.0 * jnp.ones((3, dim))
    p = ball.project(far)
    np.testing.assert_allclose(jnp.linalg.norm(p - center[None], axis=1), 0.7, rtol=1e-12)
    inside = ball.project(x[:10])
    np.testing.assert_array_equal(inside, x[:10])


def test_ball_bad_input():
    with pytest.raises(ValueError, match="radius"):
        jc.Ball(2, -1.0)
    with pytest.raises(ValueError, match="dim"):
        jc.Ball(0, 1.0)
    with pytest.raises(ValueError, match="center"):
        jc.Ball(2, 1.0, center=jnp.zeros(3))


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
