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


def test_every_compression_of_one_teacher_is_measured_by_one_program():
    """A width is a shape: the narrower network is padded with zero neurons to the other's
    widths (the same function), so a search's candidates share one compiled program."""
    from jaxcompress import measure

    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 20, 20, 1], dtype=jnp.float64)
    dom = jc.Ball(2, 1.0)
    smalls = [jc.compress(teacher, jc.derivative_matching(k), activation="tanh",
                          domain=dom)[0] for k in (2, 3)]
    padded = measure._same_widths(teacher, smalls[0])[1]
    assert jc.layer_sizes(padded) == [2, 20, 20, 1]
    x = dom.sobol(64)
    np.testing.assert_allclose(jc.apply(padded, x, activation="tanh"),
                               jc.apply(smalls[0], x, activation="tanh"), rtol=0, atol=1e-15)
    before = measure._sup_error._cache_size()
    errs = [float(jc.sup_error(teacher, s, activation="tanh", domain=dom,
                               key=jax.random.PRNGKey(1), n_samples=64, local_search_steps=3))
            for s in smalls]
    assert measure._sup_error._cache_size() - before <= 1
    assert errs[1] < errs[0]


def test_psnr_against_a_hand_computation():
    """PSNR = 10 log10(R^2 / MSE): a network shifted by 0.05 has MSE 0.0025 against it on any
    points; the peak R is the reference's range on the fixed Sobol points (or data_range)."""
    a = jnp.array([0.3, -1.2])
    dom = jc.Ball(2, 1.0)
    shifted = _linear_net(a)
    shifted[-1] = {"kernel": shifted[-1]["kernel"], "bias": jnp.array([0.05])}
    x = np.asarray(jc.measure.error_points(dom, 512, jnp.float64))
    ref = x @ np.asarray(a)
    expected = 10 * np.log10((ref.max() - ref.min()) ** 2 / 0.05 ** 2)
    got = jc.measure.psnr(_linear_net(a), shifted, activation="identity", domain=dom,
                          n_points=512)
    assert float(got) == pytest.approx(expected, rel=1e-10)
    fixed = jc.measure.psnr(_linear_net(a), shifted, activation="identity", domain=dom,
                            n_points=512, data_range=2.0)
    assert float(fixed) == pytest.approx(10 * np.log10(4 / 0.0025), rel=1e-10)   # 32.04 dB
    assert float(jc.measure.psnr(shifted, shifted, activation="identity", domain=dom)) == np.inf
    with pytest.raises(ValueError, match=r"psnr: data_range must be None .* got -1"):
        jc.measure.psnr(shifted, shifted, activation="identity", domain=dom, data_range=-1)


def test_psnr_drop_is_the_db_lost_against_the_teacher_on_the_data():
    """Twice the teacher's error on the data is 20 log10(2) = 6.02 dB lost; the teacher loses
    nothing."""
    x = np.linspace(-1, 1, 64)[:, None]
    y = np.sin(3 * x)
    metric = jc.measure.psnr_drop(lambda x: np.sin(3 * x) + 0.01, x, y, data_range=1.0)
    assert metric(lambda x: np.sin(3 * x) + 0.02) == pytest.approx(20 * np.log10(2), rel=1e-9)
    assert metric(lambda x: np.sin(3 * x) + 0.01) == 0.0 and metric.__name__ == "psnr_drop"
    with pytest.raises(ValueError, match=r"psnr_drop: the teacher gives values of shape "
                                         r"\(64, 2\) at x; y has shape \(64, 1\)"):
        jc.measure.psnr_drop(lambda x: np.concatenate([x, x], 1), x, y)
