"""Domains: Ball, Box and Parameterization (sampling, Sobol and collocation nodes, projection,
centre and radius), the error estimate's points, and the one check of what a domain is."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.domains import check_domain
from jaxcompress.measure import ERROR_SKIP, error_points


@pytest.mark.parametrize("dim", [1, 2, 3, 4])
def test_ball_sampling_and_projection(dim):
    # the inputs made and the results checked on the host (on the device: a program per
    # operation and shape)
    c = np.arange(dim, dtype=np.float64) * 0.1
    ball = jc.Ball(dim, 0.7, center=jax.device_put(c))
    x = ball.sample(jax.random.PRNGKey(0), 20000)
    assert x.shape == (20000, dim)
    x = np.asarray(x)
    r = np.linalg.norm(x - c[None], axis=1)
    assert float(np.max(r)) <= 0.7 + 1e-12
    # uniform in the ball: P(|x - c| <= R/2) = 2^-dim
    assert abs(float(np.mean(r <= 0.35)) - 0.5**dim) < 0.02
    s = ball.sobol(1000)
    assert s.shape == (1000, dim)
    assert float(np.max(np.linalg.norm(np.asarray(s) - c[None], axis=1))) <= 0.7 + 1e-12
    np.testing.assert_array_equal(s, ball.sobol(1000))  # deterministic
    far = jax.device_put(c[None] + 5.0 * np.ones((3, dim)))
    p = np.asarray(ball.project(far))
    np.testing.assert_allclose(np.linalg.norm(p - c[None], axis=1), 0.7, rtol=1e-12)
    inside = ball.project(jax.device_put(x[:10]))
    np.testing.assert_array_equal(inside, x[:10])


def test_ball_bad_input():
    with pytest.raises(ValueError, match="radius"):
        jc.Ball(2, -1.0)
    with pytest.raises(ValueError, match="dim"):
        jc.Ball(0, 1.0)
    with pytest.raises(ValueError, match="center"):
        jc.Ball(2, 1.0, center=jnp.zeros(3))
    with pytest.raises(ValueError, match=r"center has shape \(3,\)"):
        jc.Ball(2, 1.0, center=[0.0, 0.0, 0.0])


def test_a_ball_with_a_tuple_centre_passes_through_jit():
    # a list or tuple centre is converted when the ball is built, so jit can flatten the ball
    # and rebuild it from tracers; a tuple of tracers built inside jit works too
    ball = jc.Ball(2, 0.5, center=(0.25, -0.5))
    key = jax.random.PRNGKey(0)
    x = jax.jit(lambda b: b.sample(key, 64))(ball)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(x) - [0.25, -0.5], axis=1).max(), 0.5,
                               rtol=0.05)
    far = jax.jit(lambda c: jc.Ball(2, 0.5, center=(c, -c)).project(jnp.full((1, 2), 9.0)))
    c = np.array([0.25, -0.25])
    v = 9.0 - c
    np.testing.assert_allclose(far(0.25), [c + 0.5 * v / np.linalg.norm(v)], rtol=1e-14)


def test_box_sampling_nodes_and_projection():
    box = jc.Box([-1.0, 2.0, 0.0], [1.0, 3.0, 0.1])
    assert box.dim == 3
    lo, hi = np.array([-1.0, 2.0, 0.0]), np.array([1.0, 3.0, 0.1])
    for pts in (box.sample(jax.random.PRNGKey(0), 500), box.sobol(100),
                box.nodes(64, "chebyshev"), box.nodes(30, "chebyshev_grid")):
        pts = np.asarray(pts)
        assert np.all(pts >= lo) and np.all(pts <= hi)
    assert box.nodes(30, "chebyshev_grid").shape == (64, 3)  # 4^3 >= 30
    assert box.nodes(50, "chebyshev").shape == (50, 3)
    x = jax.device_put(np.array([[5.0, 0.0, 0.05], [0.0, 2.5, -3.0]]))
    np.testing.assert_allclose(box.project(x), [[1.0, 2.0, 0.05], [0.0, 2.5, 0.0]])
    # sup_error accepts a box: a linear function's maximum sits in a corner
    lin = jax.device_put([{"kernel": np.ones((3, 1)), "bias": np.zeros((1,))},
                          {"kernel": np.ones((1, 1)), "bias": np.zeros((1,))}])
    zero = jax.device_put(jax.tree.map(np.zeros_like, lin))
    err = jc.sup_error(lin, zero, activation="identity", domain=box, key=jax.random.PRNGKey(0),
                       n_samples=256, local_search_steps=50)
    assert abs(float(err) - 4.1) < 1e-6


@pytest.mark.parametrize(
    "lo,hi,match",
    [([0.0, 1.0], [1.0, 1.0], r"lo < hi.*coordinate 1"),
     ([0.0, 2.0], [1.0, 1.0], r"lo < hi.*coordinate 1"),
     ([0.0, 0.0], [1.0, 1.0, 1.0], r"same length"),
     ([[0.0, 0.0]], [[1.0, 1.0]], r"1-D"),
     ([0.0, np.nan], [1.0, 1.0], r"finite")],
)
def test_box_validation(lo, hi, match):
    with pytest.raises(ValueError, match=match):
        jc.Box(lo, hi)

def test_parameterization_is_a_domain_of_its_images():
    def iota(u):
        return jnp.concatenate([jnp.cos(u), jnp.sin(u), u])

    U = jc.Box([0.0], [1.0])
    curve = jc.Parameterization(iota, U)
    assert curve.dim == 1 and curve.input_dim() == 3
    np.testing.assert_allclose(curve.center, [0.5])
    np.testing.assert_allclose(curve.radius, 0.5)
    nodes = curve.nodes(16)
    assert nodes.shape == (16, 3)
    nodes = np.asarray(nodes)
    np.testing.assert_allclose(nodes[:, 0] ** 2 + nodes[:, 1] ** 2, 1.0, rtol=1e-12)
    np.testing.assert_allclose(curve.sobol(8, skip=3), jax.vmap(iota)(U.sobol(8, skip=3)))
    check_domain(curve, 3, "test")
    with pytest.raises(ValueError, match="maps to inputs of size 3; the network takes inputs of "
                                         "size 2"):
        check_domain(curve, 2, "test")
    with pytest.raises(TypeError, match="must be a jaxcompress.Ball or jaxcompress.Box"):
        jc.Parameterization(iota, (0.0, 1.0))
    with pytest.raises(TypeError, match="fn must be callable"):
        jc.Parameterization(3, U)
    with pytest.raises(ValueError, match=r"fn failed on an input of shape \(1,\)"):
        jc.Parameterization(lambda u: u @ jnp.ones((4, 4)), U).input_dim()


def test_check_domain_is_the_one_place_that_decides():
    check_domain(jc.Ball(2, 1.0), 2, "test")
    check_domain(jc.Box([0, 0], [1, 1]), 2, "test")
    with pytest.raises(ValueError, match="the domain has dim 3; the network takes inputs of"):
        check_domain(jc.Ball(3, 1.0), 2, "test")
    for bad in ((0.0, 1.0), 1.0, None, "ball"):
        with pytest.raises(TypeError, match="domain must be a jaxcompress.Ball"):
            check_domain(bad, 2, "test")


@pytest.mark.parametrize("domain", [jc.Ball(2, 0.5, center=jnp.array([1.0, 0.0])),
                                    jc.Box([0.0, -1.0], [2.0, 1.0])], ids=["ball", "box"])
def test_error_points_are_fixed_points_of_the_domain_past_the_collocation_nodes(domain):
    a, b = error_points(domain, 64), error_points(domain, 64)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (64, 2)
    np.testing.assert_array_equal(a, domain.sobol(64, skip=ERROR_SKIP))
    # none of them is a collocation node of any realistic size (those start at index 0)
    nodes = np.asarray(domain.sobol(4096))
    assert np.min(np.linalg.norm(nodes[:, None] - np.asarray(a)[None], axis=-1)) > 0
    if isinstance(domain, jc.Ball):
        dist = np.linalg.norm(np.asarray(a) - np.asarray(domain.center)[None], axis=1)
        assert float(np.max(dist)) <= 0.5 + 1e-12
