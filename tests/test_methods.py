"""Feature kinds beyond derivatives, baseline selectors, boxes and effective input dimension."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.compress import _compress_jit

POLY = "test_poly2_methods"
if POLY not in jc.registered_activations():
    # u + 0.3 u^2: a depth-L network of this activation is a polynomial of degree 2^L in x
    jc.register_activation(POLY, lambda u: u + 0.3 * u * u)


def _max_diff(pa, pb, act, x):
    diff = jc.apply(pa, x, activation=act) - jc.apply(pb, x, activation=act)
    return float(jnp.max(jnp.abs(diff)))


def _points(d, n=256, seed=7, radius=1.0):
    return jc.Ball(d, radius).sample(jax.random.PRNGKey(seed), n)


# --- the four properties of the issue -------------------------------------------------------------


@pytest.mark.parametrize("layer_order", ["backward", "forward"])
def test_collocation_with_dk_points_is_exact_on_polynomial_networks(layer_order):
    # degree 4 in x (two POLY layers), k = 4: N = D_4 = 15 unisolvent Sobol points of the disk
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 30, 30, 1])
    small, info = jc.compress(params, activation=POLY, order=4, features="collocation",
                              oversample=1, layer_order=layer_order)
    assert jc.layer_sizes(small) == [2, 15, 15, 1]
    assert [li.num_rows for li in info.layers] == [15, 15]
    assert info.features == "collocation"
    # a polynomial identity: exact far outside the domain too
    assert _max_diff(params, small, POLY, _points(2, radius=3.0)) < 1e-9


def test_data_features_reproduce_the_teacher_on_the_data():
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 40, 40, 1])
    x = jc.Ball(2, 1.0).sample(jax.random.PRNGKey(2), 10)  # 10 inputs, width D_3 = 10
    small, info = jc.compress(params, activation="sigmoid", order=3, features="data", data=x)
    assert jc.layer_sizes(small) == [2, 10, 10, 1]
    assert info.features == "data" and [li.num_rows for li in info.layers] == [10, 10]
    assert _max_diff(params, small, "sigmoid", x) < 1e-12
    # off the data it is only an interpolant
    assert _max_diff(params, small, "sigmoid", _points(2)) > 1e-8


@functools.partial(jax.jit, static_argnames=("act", "k"))
def _reference_backward(params, act, k, center, radius):
    """Algorithm 1 by hand: derivative features at ``center``, rows scaled by ``radius``."""
    feats = jc.derivative_features(params, activation=act, order=k, center=center)
    degrees = jc.monomials(params[0]["kernel"].shape[0], k).sum(axis=1)
    params = list(params)
    kept = {}
    for l in range(len(params) - 1, 0, -1):
        z = feats[l - 1]
        m = min(z.shape)
        params, info = jc.compress_layer(params, l, z, width=m, radius=radius, degrees=degrees)
        kept[l] = info.kept
    return params, kept


@pytest.mark.parametrize(
    "domain",
    [jc.Box([0.5, -2.0], [2.5, -1.0]), jc.Ball(2, 0.7, center=jnp.array([1.0, -0.5]))],
    ids=["box", "ball"],
)
def test_derivative_features_are_expanded_at_the_domain_centre(domain):
    params = jc.init_mlp(jax.random.PRNGKey(3), [2, 30, 25, 1])
    center = np.asarray(domain.center)
    radius = float(domain.radius)
    if isinstance(domain, jc.Box):
        np.testing.assert_allclose(center, [1.5, -1.5])
        np.testing.assert_allclose(radius, np.hypot(1.0, 0.5))
    small, info = jc.compress(params, activation="tanh", order=3, domain=domain)
    ref, kept = _reference_backward(params, "tanh", 3, jnp.asarray(center), radius)
    for a, b in zip(small, ref, strict=True):
        np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=1e-9, atol=1e-12)
    for l, li in enumerate(info.layers, start=1):
        np.testing.assert_array_equal(np.asarray(li.kept), np.asarray(kept[l]))
    # the origin expansion is a different (and here much worse) approximation on the domain
    at_origin, _ = jc.compress(params, activation="tanh", order=3, radius=radius)
    x = domain.sample(jax.random.PRNGKey(0), 512)
    assert _max_diff(params, small, "tanh", x) < _max_diff(params, at_origin, "tanh", x)


def test_bottleneck_gives_dk_from_the_narrow_layer_and_stays_exact():
    # d_in = 4 but layer 2 has width 1: layers 3 and 4 are polynomials in the scalar h^(2)
    params = jc.init_mlp(jax.random.PRNGKey(4), [4, 30, 1, 30, 30, 1])
    assert jc.features.bottleneck_sources([4, 30, 1, 30, 30, 1]) == (0, 0, 2, 2)
    small, info = jc.compress(params, activation=POLY, order=4, coordinates="bottleneck")
    assert jc.layer_sizes(small) == [4, 30, 1, 5, 5, 1]  # D_4 = C(1 + 4, 1) = 5
    assert [li.num_features for li in info.layers] == [70, 70, 5, 5]  # plain: D_4 = C(8, 4)
    assert [li.coord_dim for li in info.layers] == [4, 4, 1, 1]
    assert info.coordinates == "bottleneck"
    assert _max_diff(params, small, POLY, _points(4, radius=2.0)) < 1e-9


def test_bottleneck_on_an_analytic_network():
    params = jc.init_mlp(jax.random.PRNGKey(5), [3, 40, 2, 40, 40, 1])
    small, info = jc.compress(params, activation="sigmoid", order=4, coordinates="bottleneck")
    # layer 1: D_4 = C(3 + 4, 3) = 35; after the width-2 layer: D_4 = C(2 + 4, 2) = 15
    assert jc.layer_sizes(small) == [3, 35, 2, 15, 15, 1]
    assert _max_diff(params, small, "sigmoid", _points(3)) < 1e-7


def test_parameterization_is_exact_on_a_polynomial_curve():
    # iota(u) = (u, u^2, 1 - u): the network restricted to the curve is a polynomial of degree 4
    def iota(u):
        return jnp.concatenate([u, u * u, 1.0 - u])

    params = jc.init_mlp(jax.random.PRNGKey(6), [3, 30, 1])
    coords = jc.Parameterization(iota, jc.Box([-1.0], [1.0]))
    small, info = jc.compress(params, activation=POLY, order=4, coordinates=coords)
    assert jc.layer_sizes(small) == [3, 5, 1] and info.layers[0].num_features == 5
    x = jax.vmap(iota)(jnp.linspace(-2.0, 2.0, 101)[:, None])
    assert _max_diff(params, small, POLY, x) < 1e-10
    # collocation on iota of the nodes of U is exact as well
    small, _ = jc.compress(params, activation=POLY, order=4, coordinates=coords,
                           features="collocation", oversample=2)
    assert _max_diff(params, small, POLY, x) < 1e-9


# --- baselines ------------------------------------------------------------------------------------


def test_weight_norm_keeps_the_largest_outgoing_weights():
    params = jc.init_mlp(jax.random.PRNGKey(7), [2, 30, 1])
    small, info = jc.compress(params, activation="sigmoid", order=2, selector="weight_norm")
    norms = np.linalg.norm(np.asarray(params[1]["kernel"]), axis=1)
    np.testing.assert_array_equal(np.sort(np.asarray(info.layers[0].kept)),
                                  np.sort(np.argsort(-norms)[:6]))
    assert info.selector == "weight_norm"
    # least-squares re-weighting: the derivative features of the kept neurons still match
    z = jc.derivative_features(params, activation="sigmoid", order=2)[0]
    kept = np.asarray(info.layers[0].kept)
    np.testing.assert_allclose(z[:, kept] @ small[1]["kernel"], z @ params[1]["kernel"],
                               atol=1e-9)


def test_random_selector_depends_on_the_key_and_reweights():
    params = jc.init_mlp(jax.random.PRNGKey(8), [2, 40, 1])
    a, ia = jc.compress(params, activation="tanh", order=3, selector="random",
                        key=jax.random.PRNGKey(0))
    b, ib = jc.compress(params, activation="tanh", order=3, selector="random",
                        key=jax.random.PRNGKey(0))
    c, ic = jc.compress(params, activation="tanh", order=3, selector="random",
                        key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(ia.layers[0].kept, ib.layers[0].kept)
    assert not np.array_equal(np.sort(ia.layers[0].kept), np.sort(ic.layers[0].kept))
    assert float(ia.layers[0].residual) < 1e-10  # D_3 = 10 kept: exact derivative matching
    del a, b, c


def test_omp_keeps_the_columns_the_next_layer_uses():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((20, 30))
    z[:, [3, 7, 11]] *= 0.01  # small columns: pivoted QR would take them last
    out_kernel = np.zeros((30, 2))
    out_kernel[[3, 7, 11]] = rng.standard_normal((3, 2))
    sel, _ = jc.select_columns(jnp.asarray(z), 3, selector="omp", out_kernel=out_kernel)
    assert sorted(np.asarray(sel.perm[:3]).tolist()) == [3, 7, 11]
    kept_qr = jc.select_columns(jnp.asarray(z), 3, selector="pivoted_qr")[0].perm[:3]
    assert not set(np.asarray(kept_qr).tolist()) & {3, 7, 11}
    with pytest.raises(ValueError, match=r"selector='omp' needs out_kernel"):
        jc.select_columns(jnp.asarray(z), 3, selector="omp")


def test_forward_point_features_refit_to_the_teacher():
    # the last layer is the least-squares fit of the teacher's output at the points: the output
    # residual is orthogonal to the kept neurons' activations there
    params = jc.init_mlp(jax.random.PRNGKey(12), [2, 30, 30, 1])
    x = jc.Ball(2, 1.0).sobol(200)
    small, info = jc.compress(params, activation="tanh", order=2, features="data", data=x,
                              layer_order="forward", selector="omp")
    resid = jc.apply(small, x, activation="tanh") - jc.apply(params, x, activation="tanh")
    h_last = jc.features.point_features(small, x, activation="tanh")[-1]  # (200, 6)
    gram = np.asarray(h_last.T @ resid)
    assert np.max(np.abs(gram)) < 1e-10 * float(jnp.max(jnp.abs(h_last)))
    assert float(jnp.max(jnp.abs(resid))) > 1e-8  # width 6 is not exact
    assert info.layer_order == "forward"


# --- jit, vmap, one compilation per shape --------------------------------------------------------

_CASES = [
    ("taylor_multi", "pivoted_qr", {}),
    ("collocation", "pivoted_qr", {}),
    ("collocation", "maxvol", {}),
    ("collocation", "omp", {}),
    ("taylor", "omp", {}),
    ("data", "pivoted_qr", {"data": "x"}),
    ("taylor", "weight_norm", {}),
    ("collocation", "random", {"key": "key"}),
    ("taylor", "pivoted_qr", {"domain": "box"}),
]


def _kwargs(extra):
    out = {}
    for name, what in extra.items():
        out[name] = {"x": _points(2, 40, seed=3), "key": jax.random.PRNGKey(4),
                     "box": jc.Box([-1.0, 0.0], [1.0, 0.5])}[what]
    return out


@pytest.mark.parametrize("features,selector,extra", _CASES)
def test_every_option_runs_under_jit(features, selector, extra):
    params = jc.init_mlp(jax.random.PRNGKey(9), [2, 24, 24, 1])
    kwargs = _kwargs(extra)
    fn = functools.partial(jc.compress, activation="sigmoid", order=3, features=features,
                           selector=selector)
    ref, info = fn(params, **kwargs)
    assert (info.features, info.selector) == (features, selector)
    jitted, jinfo = jax.jit(fn)(params, **kwargs)
    assert jc.layer_sizes(ref) == jc.layer_sizes(jitted) == [2, 10, 10, 1]
    for a, b in zip(ref, jitted, strict=True):
        np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(info.layers[0].kept, jinfo.layers[0].kept)


def test_collocation_one_compilation_per_shape_and_vmap():
    fn = functools.partial(jc.compress, activation="tanh", order=3, features="collocation")
    teachers = [jc.init_mlp(jax.random.PRNGKey(30 + i), [2, 24, 24, 1]) for i in range(3)]
    fn(teachers[0])
    before = _compress_jit._cache_size()
    for t in teachers[1:]:
        fn(t)
    assert _compress_jit._cache_size() == before
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *teachers)
    batched, binfo = jax.vmap(fn)(stacked)
    assert binfo.layers[0].kept.shape == (3, 10)
    for i, t in enumerate(teachers):
        single, _ = fn(t)
        np.testing.assert_allclose(single[1]["kernel"], batched[1]["kernel"][i], rtol=1e-9,
                                   atol=1e-12)


def test_traced_box_and_data():
    params = jc.init_mlp(jax.random.PRNGKey(10), [2, 24, 1])
    f = jax.jit(lambda lo, hi: jc.compress(params, activation="tanh", order=2,
                                           features="collocation",
                                           domain=jc.Box(lo, hi))[0][1]["kernel"])
    a = f(jnp.array([-1.0, -1.0]), jnp.array([1.0, 0.0]))
    b = jc.compress(params, activation="tanh", order=2, features="collocation",
                    domain=jc.Box([-1.0, -1.0], [1.0, 0.0]))[0][1]["kernel"]
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


# --- collocation nodes and the Box domain ---------------------------------------------------------


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
    x = jnp.array([[5.0, 0.0, 0.05], [0.0, 2.5, -3.0]])
    np.testing.assert_allclose(box.project(x), [[1.0, 2.0, 0.05], [0.0, 2.5, 0.0]])
    # sup_error accepts a box: a linear function's maximum sits in a corner
    lin = [{"kernel": jnp.ones((3, 1)), "bias": jnp.zeros((1,))},
           {"kernel": jnp.ones((1, 1)), "bias": jnp.zeros((1,))}]
    zero = jax.tree.map(jnp.zeros_like, lin)
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


# --- errors ---------------------------------------------------------------------------------------


@pytest.fixture
def net():
    return jc.init_mlp(jax.random.PRNGKey(11), [2, 12, 12, 1])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"features": "data"}, r"features='data' needs data="),
        ({"features": "data", "data": np.zeros((5, 3))}, r"data has shape \(5, 3\); expected "
                                                         r"\(N, 2\)"),
        ({"data": np.zeros((5, 2))}, r"data= is only used by features='data'"),
        ({"radius": 2.0, "domain": jc.Ball(2, 1.0)}, r"either radius or domain"),
        ({"domain": jc.Ball(3, 1.0)}, r"domain has dim 3; the network takes inputs of size 2"),
        ({"features": "colocation"}, r"features must be one of .*'colocation'"),
        ({"selector": "magnitude"}, r"selector must be one of .*'magnitude'"),
        ({"features": "collocation", "nodes": "halton"}, r"nodes must be one of .*'halton'"),
        ({"features": "collocation", "nodes": "chebyshev"}, r"needs a Box domain"),
        ({"features": "collocation", "oversample": 0}, r"oversample must be a positive int"),
        ({"selector": "random"}, r"selector='random' needs key="),
        ({"key": jax.random.PRNGKey(0)}, r"key= is only used by selector='random'"),
        ({"features": "taylor_multi", "centers": np.zeros((3, 3))},
         r"centers has shape \(3, 3\); expected \(J, 2\)"),
        ({"centers": np.zeros((3, 2))}, r"centers= is only used by features='taylor_multi'"),
        ({"coordinates": "narrowest"}, r"coordinates must be None, 'bottleneck' or"),
        ({"coordinates": jc.Parameterization(lambda u: u, jc.Ball(1, 1.0))},
         r"parameterization maps \(1,\) to \(1,\); expected \(2,\)"),
        ({"coordinates": jc.Parameterization(lambda u: jnp.concatenate([u, u]), jc.Ball(1, 1.0)),
          "domain": jc.Ball(2, 1.0)}, r"leave domain and radius unset"),
        ({"coordinates": jc.Parameterization(lambda u: jnp.concatenate([u, u]), jc.Ball(1, 1.0)),
          "features": "jet"}, r"Parameterization supports features"),
    ],
)
def test_bad_combinations_raise_clear_errors(net, kwargs, match):
    with pytest.raises(ValueError, match=match):
        jc.compress(net, activation="sigmoid", order=2, **kwargs)


def test_domain_must_be_a_domain(net):
    with pytest.raises(TypeError, match=r"domain must be a jaxcompress.Ball or jaxcompress.Box"):
        jc.compress(net, activation="sigmoid", order=2, domain=(0.0, 1.0))
