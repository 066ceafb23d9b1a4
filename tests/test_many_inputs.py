"""Many inputs: quasi-random designs past 16 dimensions, the data domain ``jc.Points``, data
matching without an order, and the data profile."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress._sobol import SOBOL_MAX_DIM, kronecker, quasi_random, sobol
from jaxcompress.domains import BALL_REJECTION_MAX_DIM, _cube_to_ball, _gamma_p, _normal_quantile

ACT = "tanh"


def _surface(n, d=32, m=2, seed=0):
    """``n`` points of an analytic ``m``-dimensional surface in ``R^d`` (``x = sin(u W + c)``)."""
    rng = np.random.default_rng(seed)
    w, c = rng.standard_normal((m, d)), rng.uniform(0, 2 * np.pi, d)
    u = np.random.default_rng(seed + 1).uniform(-1, 1, (n, m))
    return np.sin(u @ w + c)


def _net(sizes, seed=0, scale=0.3):
    # scaled on the host (the same products; on the device, a program per shape)
    return [{"kernel": jax.device_put(scale * np.asarray(p["kernel"])), "bias": p["bias"]}
            for p in jc.init_mlp(jax.random.PRNGKey(seed), sizes)]


# --- designs past the Sobol table -----------------------------------------------------------------


def test_quasi_random_is_sobol_up_to_the_table_and_kronecker_beyond():
    np.testing.assert_array_equal(quasi_random(64, SOBOL_MAX_DIM, skip=3),
                                  sobol(64, SOBOL_MAX_DIM, skip=3))
    x = quasi_random(4096, 40)
    np.testing.assert_array_equal(x, kronecker(4096, 40))
    np.testing.assert_array_equal(kronecker(5, 40, skip=7), x[7:12])   # skip offsets into it
    assert x.shape == (4096, 40) and x.min() >= 0 and x.max() < 1
    np.testing.assert_array_equal(x[0], np.full(40, 0.5))
    # low discrepancy: every coordinate's empirical CDF within 1% of uniform (iid draws: ~2%)
    for t in (0.1, 0.37, 0.5, 0.81):
        assert np.max(np.abs(np.mean(x < t, axis=0) - t)) < 0.01
    # the steps are the fractional parts of the square roots of the primes
    np.testing.assert_allclose(kronecker(2, 3)[1], np.mod(0.5 + np.sqrt([2.0, 3.0, 5.0]), 1),
                               atol=1e-15)


def test_normal_quantile_and_incomplete_gamma():
    p = np.array([1e-10, 1e-3, 0.2, 0.5, 0.9, 0.999])
    want = np.array([-6.361340902404056, -3.090232306167813, -0.8416212335729143, 0.0,
                     1.2815515655446004, 3.090232306167813])
    np.testing.assert_allclose(_normal_quantile(p), want, rtol=1e-12, atol=1e-14)
    x = np.array([0.0, 0.3, 2.0, 40.0, 300.0])
    np.testing.assert_allclose(_gamma_p(1.0, x), 1 - np.exp(-x), atol=1e-15)
    np.testing.assert_allclose(_gamma_p(0.5, x), [math.erf(math.sqrt(v)) for v in x], atol=1e-14)


@pytest.mark.parametrize("dim", [BALL_REJECTION_MAX_DIM + 1, 32, 256])
def test_high_dimensional_ball_points_are_uniform_in_the_ball(dim):
    ball = jc.Ball(dim, 2.0, center=np.full(dim, 0.5))
    x = np.asarray(ball.sobol(2048))
    r = np.linalg.norm(x - 0.5, axis=1) / 2.0
    assert x.shape == (2048, dim) and r.max() <= 1 + 1e-12
    # uniform in the ball: r^d is uniform on [0, 1]
    assert np.max(np.abs(np.quantile(r**dim, [0.1, 0.5, 0.9]) - [0.1, 0.5, 0.9])) < 0.03
    # directions spread evenly: the mean point is near the centre
    assert np.max(np.abs(np.mean(x - 0.5, axis=0))) < 0.1
    np.testing.assert_array_equal(ball.sobol(16, skip=5), ball.sobol(16, skip=5))
    assert not np.array_equal(ball.sobol(16, skip=5), ball.sobol(16))


def test_cube_to_ball_maps_uniform_to_uniform():
    u = np.random.default_rng(0).uniform(size=(20000, 3))
    x = _cube_to_ball(u)
    r = np.linalg.norm(x, axis=1)
    assert r.max() <= 1 + 1e-12
    # the fraction inside radius t is t^3
    for t in (0.3, 0.6, 0.9):
        assert abs(np.mean(r < t) - t**3) < 0.015


def test_low_dimensional_balls_keep_the_papers_rejected_sobol_points():
    cube = 2 * sobol(64, 2) - 1
    want = cube[np.sum(cube**2, axis=1) <= 1][:10]
    np.testing.assert_array_equal(np.asarray(jc.Ball(2, 1.0).sobol(10)), want)


def test_boxes_past_sixteen_dimensions():
    box = jc.Box(-np.ones(64), 2 * np.ones(64))
    for kind in ("sobol", "chebyshev"):
        x = np.asarray(box.nodes(300, kind))
        assert x.shape == (300, 64) and x.min() >= -1 and x.max() <= 2


def test_no_method_refuses_an_input_dimension_above_sixteen():
    params = _net([32, 20, 20, 1])
    x = _surface(400)
    for method in (jc.derivative_matching(1), jc.collocation(1),
                   jc.data_matching(x, widths=[6, 6])):
        small, info = jc.compress(params, method, activation=ACT)
        assert np.isfinite(float(info.error_estimate))
        assert jc.layer_sizes(small)[0] == 32
    err = jc.sup_error(params, small, activation=ACT, domain=jc.Ball(32, 1.0),
                       key=jax.random.PRNGKey(0), n_samples=256, local_search_steps=5)
    assert np.isfinite(float(err))


# --- the data domain ------------------------------------------------------------------------------


def test_points_domain_measures_on_its_held_out_rows():
    x, held = _surface(200), _surface(50, seed=7)
    dom = jc.Points(x, held_out=held)
    assert dom.dim == 32 and dom.size == 200
    np.testing.assert_allclose(dom.center, x.mean(0))
    np.testing.assert_allclose(float(dom.radius), np.max(np.linalg.norm(x - x.mean(0), axis=1)))
    np.testing.assert_array_equal(dom.estimate_points(256), held)
    np.testing.assert_array_equal(dom.sobol(3, skip=199), x[[199, 0, 1]])  # cyclic
    assert dom.estimate_description() == "the 50 held-out data points"
    a, b = _net([32, 12, 1]), _net([32, 12, 1], seed=1)
    exact = np.max(np.abs(np.asarray(jc.apply(a, held, activation=ACT))
                          - np.asarray(jc.apply(b, held, activation=ACT))))
    got, point = jc.sup_error(a, b, activation=ACT, domain=dom, key=jax.random.PRNGKey(0),
                              return_point=True)
    assert float(got) == pytest.approx(exact, rel=1e-12)
    assert np.min(np.linalg.norm(held - np.asarray(point), axis=1)) == 0
    assert float(jc.error_estimate(a, b, activation=ACT, domain=dom)) == pytest.approx(exact)
    p = np.asarray(dom.project(jax.device_put(x[:3] + 1e-3)))
    np.testing.assert_array_equal(p, x[:3])


def test_points_domain_refuses_bad_input():
    with pytest.raises(ValueError, match=r"Points: x must be an \(N, d_in\) array"):
        jc.Points(np.zeros(5))
    with pytest.raises(ValueError, match=r"Points: held_out has 3 columns, x has 2"):
        jc.Points(np.zeros((4, 2)), held_out=np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"not finite|NaN|Inf"):
        jc.Points(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match=r"30 collocation nodes asked of a set of 10 points"):
        jc.Points(np.zeros((10, 2))).nodes(30)
    with pytest.raises(ValueError, match=r"the domain has dim 3; the network takes inputs of "
                                         r"size 2"):
        jc.compress(_net([2, 8, 1]), jc.collocation(1), activation=ACT,
                    domain=jc.Points(np.zeros((40, 3))))


# --- data matching without an order ---------------------------------------------------------------


def test_data_matching_needs_widths_rtol_or_an_order():
    x = _surface(64)
    with pytest.raises(ValueError, match=r"give the widths \(widths=\[...\]\), a rank tolerance"):
        jc.data_matching(x)
    with pytest.raises(ValueError, match=r"widths= or rtol=, not both"):
        jc.data_matching(x, widths=[3], rtol=1e-6)
    with pytest.raises(ValueError, match=r"holdout must be a fraction in \[0, 1\)"):
        jc.data_matching(x, widths=[3], holdout=1.0)
    with pytest.raises(ValueError, match=r"rtol must be a number in \(0, 1\)"):
        jc.data_matching(x, rtol=2.0)
    with pytest.raises(ValueError, match=r"x_eval has shape \(4, 5\); expected \(N, 32\)"):
        jc.compress(_net([32, 8, 1]), jc.data_matching(x, widths=[3], x_eval=np.zeros((4, 5))),
                    activation=ACT)


def test_data_matching_without_a_domain_fits_seven_eighths_and_measures_the_rest():
    params, x = _net([32, 16, 16, 1]), _surface(400)
    small, info = jc.compress(params, jc.data_matching(x, widths=[5, 5]), activation=ACT)
    held = x[7::8]
    want = np.max(np.abs(np.asarray(jc.apply(small, held, activation=ACT))
                         - np.asarray(jc.apply(params, held, activation=ACT))))
    assert float(info.error_estimate) == pytest.approx(want, rel=1e-10)
    assert info.estimated_on == "the 50 held-out data points"
    assert "on the 50 held-out data points" in info.summary()
    assert info.layers[0].order == jc.features.NO_ORDER
    assert info.layers[0].num_features == 350          # D: the rows fitted on
    assert "data_matching(widths," in info.method
    # x_eval: every row fitted, the estimate on x_eval
    x_eval = _surface(30, seed=9)
    _, info2 = jc.compress(params, jc.data_matching(x, widths=[5, 5], x_eval=x_eval),
                           activation=ACT)
    assert info2.estimated_on == "the 30 held-out data points"
    assert info2.layers[0].num_features == 400


def test_data_matching_rtol_widths_are_the_data_ranks_and_exact_to_them():
    params, x = _net([32, 24, 24, 1]), _surface(600, m=1)   # a curve: low numerical rank
    prof = jc.data_profile(params, x[np.arange(600) % 8 != 7], activation=ACT, rtol=1e-9)
    assert all(r < 24 for r in prof.widths)
    small, info = jc.compress(params, jc.data_matching(x, rtol=1e-9), activation=ACT)
    assert tuple(jc.layer_sizes(small)[1:-1]) == prof.widths
    scale = float(np.max(np.abs(np.asarray(jc.apply(params, x, activation=ACT)))))
    assert float(info.error_estimate) < 1e-6 * scale
    assert "rtol=1e-09" in info.method


def test_data_matching_under_jit_and_through_the_trace():
    params, x = _net([32, 16, 16, 1]), _surface(160)
    f = jax.jit(lambda p, x: jc.compress(p, jc.data_matching(x, widths=[4, 4]),
                                         activation=ACT)[1].error_estimate)
    _, info = jc.compress(params, jc.data_matching(x, widths=[4, 4]), activation=ACT)
    assert float(f(params, x)) == pytest.approx(float(info.error_estimate), rel=1e-9)
    with pytest.raises(TypeError, match=r"rtol=\.\.\.\) measures the ranks on the host"):
        jax.jit(lambda x: jc.compress(params, jc.data_matching(x, rtol=1e-6),
                                      activation=ACT)[0])(x)

    def fn(p, x):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.tanh(h @ p["w2"] + p["b2"]) @ p["w3"]

    tp = {"w1": params[0]["kernel"], "b1": params[0]["bias"], "w2": params[1]["kernel"],
          "b2": params[1]["bias"], "w3": params[2]["kernel"]}
    with jax.numpy_rank_promotion("allow"):
        small, tinfo = jc.compress(jc.trace(fn, tp, jnp.zeros((1, 32))),
                                   jc.data_matching(x, widths=[4, 4]))
        assert small.params["w1"].shape == (32, 4)
        assert tinfo.estimated_on == "the 20 held-out data points"
        assert np.isfinite(float(tinfo.error_estimate))


# --- the data profile -----------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 3])
def test_intrinsic_dimension_of_analytic_manifolds(m):
    x = _surface(3000, d=64, m=m, seed=m)
    assert abs(jc.profile.intrinsic_dimension(x) - m) < 0.25 * m
    noisy = x + 0.3 * np.random.default_rng(0).standard_normal(x.shape)
    # noise off the manifold looks full-dimensional
    assert jc.profile.intrinsic_dimension(noisy) > m + 2
    with pytest.raises(ValueError, match="at least 3 distinct points.*5 rows, 1 distinct"):
        jc.profile.intrinsic_dimension(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="at least 3 distinct points.*2 rows, 2 distinct"):
        jc.profile.intrinsic_dimension(np.eye(2, 3))
    ring = np.exp(2j * np.pi * np.arange(12) / 12)        # both neighbours equally near
    with pytest.raises(ValueError, match="TwoNN estimate is undefined.*regular grid"):
        jc.profile.intrinsic_dimension(np.stack([ring.real, ring.imag], axis=1))


def test_data_profile_report(tmp_path):
    params, x = _net([32, 24, 24, 1]), _surface(800)
    prof = jc.data_profile(params, x, activation=ACT, rtol=1e-6)
    assert round(prof.intrinsic_dim) == 2 and prof.num_points == 800 and prof.input_dim == 32
    for s in prof.sets:
        sv = s.singular_values
        assert np.all(np.diff(sv) <= 1e-12 * sv[0]) and s.rank == s.rank_at(1e-6)
    assert prof.ranks(1e-2) <= prof.widths
    assert prof.width_scale(6) == 28 and prof.width_scale(2, dim=32) == 561
    assert all(math.comb(2 + k, 2) >= r for k, r in zip(prof.orders(), prof.widths,
                                                         strict=True))
    text = str(prof)
    assert "intrinsic dimension ~ " in text and "hidden layer 2" in text
    assert prof.to_dict()["sets"][0]["rank"] == prof.widths[0]
    prof.plot(tmp_path / "profile.png")
    assert (tmp_path / "profile.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match=r"x has shape \(800, 31\); expected \(N, 32\)"):
        jc.data_profile(params, x[:, :31], activation=ACT)
    with pytest.raises(ValueError, match=r"rtol must be a number in \(0, 1\)"):
        jc.data_profile(params, x, activation=ACT, rtol=0.0)
