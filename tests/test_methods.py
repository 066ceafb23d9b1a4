"""Methods as values: feature maps beyond derivatives, selectors, best_of, boxes, effective
input dimension, user-written feature maps and selectors."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.driver import run_jit

POLY = "test_poly2_methods"
if POLY not in jc.activations.registered_activations():
    # u + 0.3 u^2: a depth-L network of this activation is a polynomial of degree 2^L in x
    jc.register_activation(POLY, lambda u: u + 0.3 * u * u)


def _max_diff(pa, pb, act, x):
    diff = np.asarray(jc.apply(pa, x, activation=act)) - np.asarray(jc.apply(pb, x, activation=act))
    return float(np.max(np.abs(diff)))


def _points(d, n=256, seed=7, radius=1.0):
    return jc.Ball(d, radius).sample(jax.random.PRNGKey(seed), n)


# --- the four properties of the issue -------------------------------------------------------------


@pytest.mark.parametrize("layer_order", ["backward", "forward"])
def test_collocation_with_dk_points_is_exact_on_polynomial_networks(layer_order):
    # degree 4 in x (two POLY layers), k = 4: N = D_4 = 15 unisolvent Sobol points of the disk
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 30, 30, 1])
    method = jc.collocation(4, oversample=1, layer_order=layer_order)
    small, info = jc.compress(params, method, activation=POLY)
    assert jc.layer_sizes(small) == [2, 15, 15, 1]
    assert [li.num_rows for li in info.layers] == [15, 15]
    assert info.features == "collocation"
    # a polynomial identity: exact far outside the domain too
    assert _max_diff(params, small, POLY, _points(2, radius=3.0)) < 1e-9


def test_data_features_reproduce_the_teacher_on_the_data():
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 40, 40, 1])
    x = jc.Ball(2, 1.0).sample(jax.random.PRNGKey(2), 10)  # 10 inputs, width D_3 = 10
    small, info = jc.compress(params, jc.data_matching(x, order=3, selector="pivoted_qr",
                                                       layer_order="backward"),
                              activation="sigmoid")
    assert jc.layer_sizes(small) == [2, 10, 10, 1]
    assert info.features == "data" and [li.num_rows for li in info.layers] == [10, 10]
    assert _max_diff(params, small, "sigmoid", x) < 1e-12
    # off the data it is only an interpolant
    assert _max_diff(params, small, "sigmoid", _points(2)) > 1e-8


@functools.partial(jax.jit, static_argnames=("act", "k"))
def _reference_backward(params, act, k, center, radius):
    """Algorithm 1 by hand with the per-layer step: derivative features at ``center``, rows
    scaled by ``radius^|alpha|``."""

    def rewire(params, l, kept, kernel):   # Algorithm 1, lines 12-13
        new = list(params)
        new[l - 1] = {"kernel": params[l - 1]["kernel"][:, kept],
                      "bias": params[l - 1]["bias"][kept]}
        new[l] = {"kernel": kernel, "bias": params[l]["bias"]}
        return new

    feats = jc.features.derivative_features(params, activation=act, order=k, center=center)
    d = params[0]["kernel"].shape[0]
    scale = radius ** jnp.asarray(jc.taylor.monomials(d, k).sum(axis=1), jnp.float64)
    params = list(params)
    kept = {}
    for l in range(len(params) - 1, 0, -1):
        z = feats[l - 1]
        lf = jc.features.LayerFeatures(z=z, scale=scale, layer=l, order=k, num_features=z.shape[0],
                              coord_dim=d)
        kept[l], kernel, info = jc.layer.compress_layer(lf, params[l]["kernel"], min(z.shape),
                                                  jc.PivotedQR())
        assert info.layer == l and info.num_rows == z.shape[0]
        params = rewire(params, l, kept[l], kernel)
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
    small, info = jc.compress(params, jc.derivative_matching(3), activation="tanh",
                              domain=domain)
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
    small, info = jc.compress(params, jc.derivative_matching(4, coordinates="bottleneck"),
                              activation=POLY)
    assert jc.layer_sizes(small) == [4, 30, 1, 5, 5, 1]  # D_4 = C(1 + 4, 1) = 5
    assert [li.num_features for li in info.layers] == [70, 70, 5, 5]  # plain: D_4 = C(8, 4)
    assert [li.coord_dim for li in info.layers] == [4, 4, 1, 1]
    assert info.coordinates == "bottleneck"
    assert _max_diff(params, small, POLY, _points(4, radius=2.0)) < 1e-9


def test_bottleneck_on_an_analytic_network():
    params = jc.init_mlp(jax.random.PRNGKey(5), [3, 40, 2, 40, 40, 1])
    small, info = jc.compress(params, jc.derivative_matching(4, coordinates="bottleneck"),
                              activation="sigmoid")
    # layer 1: D_4 = C(3 + 4, 3) = 35; after the width-2 layer: D_4 = C(2 + 4, 2) = 15
    assert jc.layer_sizes(small) == [3, 35, 2, 15, 15, 1]
    assert _max_diff(params, small, "sigmoid", _points(3)) < 1e-7


def test_parameterization_is_exact_on_a_polynomial_curve():
    # iota(u) = (u, u^2, 1 - u): the network restricted to the curve is a polynomial of degree 4
    def iota(u):
        return jnp.concatenate([u, u * u, 1.0 - u])

    params = jc.init_mlp(jax.random.PRNGKey(6), [3, 30, 1])
    curve = jc.Parameterization(iota, jc.Box([-1.0], [1.0]))
    small, info = jc.compress(params, jc.derivative_matching(4), activation=POLY, domain=curve)
    assert jc.layer_sizes(small) == [3, 5, 1] and info.layers[0].num_features == 5
    assert info.coordinates == "parameterization"
    x = jax.jit(jax.vmap(iota))(np.linspace(-2.0, 2.0, 101)[:, None])
    assert _max_diff(params, small, POLY, x) < 1e-10
    # collocation on iota of the nodes of U is exact as well
    small, _ = jc.compress(params, jc.collocation(4, oversample=2), activation=POLY,
                           domain=curve)
    assert _max_diff(params, small, POLY, x) < 1e-9


# --- baselines ------------------------------------------------------------------------------------


def test_collocation_nodes_follow_the_widths():
    """widths= above D_k gets oversample nodes per kept neuron (not a least-squares fit with as
    many unknowns as equations); the traced path takes the same nodes."""
    plain = jc.collocation(1)
    wide = jc.collocation(1, widths=(10, 4))
    sizes, ball = [2, 32, 32, 1], jc.Ball(2, 1.0)
    assert plain.features.n_points(sizes, ball) == (12, 12)           # 4 * D_1
    assert wide.features.n_points(sizes, ball) == (40, 16)            # 4 * max(D_1, width)
    assert wide.with_widths((5, 20)).features.n_points(sizes, ball) == (20, 80)
    assert wide.with_widths(None).features.n_points(sizes, ball) == (12, 12)
    teacher = jc.init_mlp(jax.random.PRNGKey(0), sizes)
    small, info = jc.compress(teacher, wide, activation="tanh", domain=ball)
    assert [li.num_rows for li in info.layers] == [40, 16]
    net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), teacher,
                   jax.device_put(np.zeros((4, 2))))
    traced, tinfo = jc.compress(net, wide, domain=ball)
    np.testing.assert_allclose(float(tinfo.error_estimate), float(info.error_estimate),
                               rtol=1e-8)


def test_weight_norm_keeps_the_largest_outgoing_weights():
    params = jc.init_mlp(jax.random.PRNGKey(7), [2, 30, 1])
    small, info = jc.compress(params, jc.derivative_matching(2, selector=jc.select.WeightNorm()),
                              activation="sigmoid")
    norms = np.linalg.norm(np.asarray(params[1]["kernel"]), axis=1)
    np.testing.assert_array_equal(np.sort(np.asarray(info.layers[0].kept)),
                                  np.sort(np.argsort(-norms)[:6]))
    assert info.selector == "weight_norm"
    # least-squares re-weighting: the derivative features of the kept neurons still match
    z = np.asarray(jc.features.derivative_features(params, activation="sigmoid", order=2)[0])
    kept = np.asarray(info.layers[0].kept)
    np.testing.assert_allclose(z[:, kept] @ np.asarray(small[1]["kernel"]),
                               z @ np.asarray(params[1]["kernel"]), atol=1e-9)


def test_random_selector_depends_on_the_key_and_reweights():
    params = jc.init_mlp(jax.random.PRNGKey(8), [2, 40, 1])
    def run(seed):
        method = jc.derivative_matching(
            3, selector=jc.select.RandomChoice(jax.random.PRNGKey(seed)))
        return jc.compress(params, method, activation="tanh")

    (a, ia), (b, ib), (c, ic) = run(0), run(0), run(1)
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
    sel = jc.select.select_columns(jnp.asarray(z), 3, jc.OMP(), out_kernel=out_kernel)
    assert sorted(np.asarray(sel.perm)[:3].tolist()) == [3, 7, 11]
    kept_qr = np.asarray(jc.select.select_columns(jnp.asarray(z), 3, "pivoted_qr").perm)[:3]
    assert not set(kept_qr.tolist()) & {3, 7, 11}
    with pytest.raises(ValueError, match=r"OMP: needs out_kernel"):
        jc.select.select_columns(jnp.asarray(z), 3, "omp")


def test_forward_point_features_refit_to_the_teacher():
    # the last layer is the least-squares fit of the teacher's output at the points: the output
    # residual is orthogonal to the kept neurons' activations there
    params = jc.init_mlp(jax.random.PRNGKey(12), [2, 30, 30, 1])
    x = jc.Ball(2, 1.0).sobol(200)
    # a domain given: every row is fitted on (without one, 1/8 would be held out for the estimate)
    small, info = jc.compress(params, jc.data_matching(x, order=2), activation="tanh",
                              domain=jc.Ball(2, 1.0))
    resid = (np.asarray(jc.apply(small, x, activation="tanh"))
             - np.asarray(jc.apply(params, x, activation="tanh")))
    h_last = np.asarray(jc.features.point_features(small, x, activation="tanh")[-1])  # (200, 6)
    gram = h_last.T @ resid
    assert np.max(np.abs(gram)) < 1e-10 * float(np.max(np.abs(h_last)))
    assert float(np.max(np.abs(resid))) > 1e-8  # width 6 is not exact
    assert info.layer_order == "forward"


# --- jit, vmap, one compilation per shape --------------------------------------------------------

_X = _points(2, 40, seed=3)
_CASES = {
    "taylor_multi": jc.derivative_matching(3, centers="auto"),
    "collocation+qr/bwd": jc.collocation(3, selector="pivoted_qr", layer_order="backward"),
    "collocation+maxvol": jc.collocation(3, selector=jc.MaxVol()),
    "collocation+omp": jc.collocation(3),
    "derivative+omp": jc.derivative_matching(3, selector="omp"),
    "data": jc.data_matching(_X, order=3, selector="pivoted_qr"),
    "derivative+weight_norm": jc.derivative_matching(3, selector=jc.select.WeightNorm()),
    "collocation+random": jc.collocation(3, selector=jc.select.RandomChoice(jax.random.PRNGKey(4))),
    "best_of": jc.best_of(jc.derivative_matching(3), jc.collocation(3)),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_every_method_runs_under_jit(name):
    params = jc.init_mlp(jax.random.PRNGKey(9), [2, 24, 24, 1])
    method = _CASES[name]
    domain = jc.Box([-1.0, 0.0], [1.0, 0.5]) if name == "derivative+omp" else jc.Ball(2, 1.0)
    ref, info = jc.compress(params, method, activation="sigmoid", domain=domain)
    assert jc.layer_sizes(ref) == [2, 10, 10, 1]
    assert float(info.error_estimate) > 0
    # the method and the domain are traced pytrees: jit the call with them as arguments (the
    # library's own jit already takes them so; compiling the outer program too is done for one
    # method, the others are traced and lowered)
    outer = jax.jit(functools.partial(jc.compress, activation="sigmoid"))
    if name != "best_of":
        lowered = outer.lower(params, method, domain=domain)
        assert jax.tree.map(lambda a: a.shape, lowered.out_info[0]) == jax.tree.map(
            jnp.shape, ref)
        return
    jitted, jinfo = outer(params, method, domain=domain)
    for a, b in zip(ref, jitted, strict=True):
        np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(info.layers[0].kept, jinfo.layers[0].kept)


def test_one_compilation_per_shape_and_vmap():
    fn = functools.partial(jc.compress, method=jc.collocation(3), activation="tanh")
    teachers = [jc.init_mlp(jax.random.PRNGKey(30 + i), [2, 24, 24, 1]) for i in range(3)]
    fn(teachers[0])
    before = run_jit._cache_size()
    for t in teachers[1:]:
        fn(t)
    # an equal method built anew hashes the same: no new compilation either
    jc.compress(teachers[0], jc.collocation(3), activation="tanh")
    assert run_jit._cache_size() == before
    stacked = jax.tree.map(lambda *x: np.stack(x), *teachers)
    batched, binfo = jax.vmap(fn)(stacked)
    assert binfo.layers[0].kept.shape == (3, 10) and binfo.error_estimate.shape == (3,)
    for i, t in enumerate(teachers):
        single, _ = fn(t)
        np.testing.assert_allclose(single[1]["kernel"], np.asarray(batched[1]["kernel"])[i],
                                   rtol=1e-9, atol=1e-12)


def test_traced_box_and_data():
    params = jc.init_mlp(jax.random.PRNGKey(10), [2, 24, 1])
    f = jax.jit(lambda lo, hi: jc.compress(params, jc.collocation(2), activation="tanh",
                                           domain=jc.Box(lo, hi))[0][1]["kernel"])
    a = f(jnp.array([-1.0, -1.0]), jnp.array([1.0, 0.0]))
    b = jc.compress(params, jc.collocation(2), activation="tanh",
                    domain=jc.Box([-1.0, -1.0], [1.0, 0.0]))[0][1]["kernel"]
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    g = jax.jit(lambda x: jc.compress(params, jc.data_matching(x, order=2),
                                      activation="tanh")[0][1]["kernel"])
    np.testing.assert_allclose(g(_X), jc.compress(params, jc.data_matching(_X, order=2),
                                                  activation="tanh")[0][1]["kernel"], rtol=1e-10)


# --- best_of -------------------------------------------------------------------------------------


def test_best_of_keeps_the_smaller_error_estimate_per_teacher():
    dm, co = jc.derivative_matching(2), jc.collocation(2)
    teachers = [jc.init_mlp(jax.random.PRNGKey(40 + i), [2, 20, 20, 1]) for i in range(2)]
    # a teacher with large weights: not analytic enough on the disk for derivative matching
    teachers.append([{"kernel": 6.0 * np.asarray(p["kernel"]), "bias": p["bias"]}
                     for p in teachers[0]])
    stacked = jax.tree.map(lambda *x: np.stack(x), *teachers)
    both = functools.partial(jc.compress, method=jc.best_of(dm, co), activation="tanh")
    small, info = jax.vmap(both)(stacked)
    choice, estimate = np.asarray(info.choice), np.asarray(info.error_estimate)
    for i, t in enumerate(teachers):
        (a, ia), (b, ib) = (jc.compress(t, m, activation="tanh") for m in (dm, co))
        want = 0 if float(ia.error_estimate) <= float(ib.error_estimate) else 1
        assert int(choice[i]) == want
        winner = (a, b)[want]
        np.testing.assert_allclose(np.asarray(small[1]["kernel"])[i], winner[1]["kernel"],
                                   rtol=1e-9, atol=1e-12)
        assert float(estimate[i]) == min(float(ia.error_estimate),
                                                    float(ib.error_estimate))
    assert "best of" in info.summary() and len(info.candidates) == 2
    with pytest.raises(ValueError, match="best_of needs methods of equal widths"):
        jc.compress(teachers[0], jc.best_of(jc.derivative_matching(2), jc.collocation(3)),
                    activation="tanh")


# --- your own feature map and selector ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LargestColumn(jc.select.Selector):
    """A user-written selector: keep the m largest columns, least-squares re-weighting."""

    name: str = "largest_column"

    def __call__(self, z, m, *, out_kernel=None, target=None, layer=0):
        from jaxcompress.select import Selection, lstsq_coefficients

        perm = jnp.argsort(-jnp.sum(z * z, axis=0), stable=True).astype(jnp.int32)
        coef, rank = lstsq_coefficients(z, perm, m, 1e-12)
        return Selection(perm=perm, coef=coef, rank=rank, swaps=jnp.int32(0))


@dataclasses.dataclass(frozen=True)
class ValuesAndSlopes(jc.features.FeatureMap):
    """A user-written feature map: activations and their x_1-slopes at a grid of points."""

    order: int
    n: int = 12
    name: str = "values_and_slopes"

    def num_features(self, sizes, domain):
        return (jc.taylor.num_monomials(sizes[0], self.order),) * (len(sizes) - 2)

    def __call__(self, params, layers, *, activation, domain, placement=None):
        x = domain.sobol(self.n, dtype=params[0]["kernel"].dtype)
        sub = params[: max(layers)] + [params[max(layers)]]
        vals = jc.features.point_features(sub, x, activation=activation)
        slopes = jax.vmap(jax.jacfwd(
            lambda p: jnp.concatenate(
                jc.features.point_features(sub, p[None], activation=activation),
                axis=1)[0]))(x)[..., 0]
        out, start = {}, 0
        for l in range(1, max(layers) + 1):
            w = vals[l - 1].shape[1]
            z = jnp.concatenate([vals[l - 1], slopes[:, start:start + w]])
            start += w
            if l in layers:
                d = params[0]["kernel"].shape[0]
                out[l] = jc.features.LayerFeatures(z=z, scale=None, layer=l, order=self.order,
                                          num_features=jc.taylor.num_monomials(d, self.order),
                                          coord_dim=d)
        return out


def test_user_feature_map_and_selector_plug_in():
    params = jc.init_mlp(jax.random.PRNGKey(13), [2, 30, 30, 1])
    method = jc.Method(ValuesAndSlopes(3), LargestColumn(), name="mine")
    small, info = jc.compress(params, method, activation="tanh")
    assert jc.layer_sizes(small) == [2, 10, 10, 1]
    assert (info.features, info.selector) == ("values_and_slopes", "largest_column")
    assert [li.num_rows for li in info.layers] == [24, 24]
    assert float(info.error_estimate) < 0.1
    # a plain dataclass is static configuration: it works under jit and vmap as well
    stacked = jax.tree.map(lambda *x: np.stack(x), params, params)
    batched, _ = jax.vmap(lambda p: jc.compress(p, method, activation="tanh"))(stacked)
    np.testing.assert_allclose(np.asarray(batched[1]["kernel"])[1], small[1]["kernel"],
                               rtol=1e-9, atol=1e-12)
    with pytest.raises(TypeError, match="features must provide"):
        jc.Method(object(), LargestColumn())


# --- collocation nodes and the Box domain ---------------------------------------------------------


# --- errors ---------------------------------------------------------------------------------------


@pytest.fixture
def net():
    return jc.init_mlp(jax.random.PRNGKey(11), [2, 12, 12, 1])


def _curve(out=2):
    return jc.Parameterization(lambda u: jnp.concatenate([u] * out), jc.Ball(1, 1.0))


@pytest.mark.parametrize(
    "make,kwargs,match",
    [
        (lambda: jc.data_matching(np.zeros((5, 3)), order=2), {},
         r"data has shape \(5, 3\); expected \(N, 2\)"),
        (lambda: jc.derivative_matching(2), {"domain": jc.Ball(3, 1.0)},
         r"the domain has dim 3; the network takes inputs of size 2"),
        (lambda: jc.derivative_matching(2), {"domain": _curve(1)},
         r"the domain maps to inputs of size 1; the network takes inputs of size 2"),
        (lambda: jc.derivative_matching(2, backend="jet"), {"domain": _curve()},
         r"Parameterization domain derivative features need backend='taylor'"),
        (lambda: jc.collocation(2, nodes="chebyshev"), {}, r"needs a Box domain"),
        (lambda: jc.derivative_matching(2, centers=np.zeros((3, 3))), {},
         r"centers has shape \(3, 3\); expected \(J, 2\)"),
        (lambda: jc.derivative_matching(2, widths=(5, 20)), {},
         r"target width 20 for hidden layer 2 must be in \[1, 12\]"),
        (lambda: jc.derivative_matching(2, widths=(5,)), {},
         r"widths has 1 entries; expected one per hidden layer \(2\)"),
        (lambda: jc.derivative_matching((2, 3, 4)), {},
         r"order has 3 entries; expected one per hidden layer \(2\)"),
        (lambda: jc.derivative_matching(2), {"order": 2}, r"order= and radius= are the"),
        (lambda: jc.derivative_matching(2), {"radius": 2.0}, r"order= and radius= are the"),
    ],
)
def test_bad_combinations_raise_clear_errors(net, make, kwargs, match):
    with pytest.raises(ValueError, match=match):
        jc.compress(net, make(), activation="sigmoid", **kwargs)


@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: jc.collocation(2, nodes="halton"), ValueError, r"nodes must be one of .*'halton'"),
        (lambda: jc.collocation(2, oversample=0), ValueError, r"oversample must be a positive int"),
        (lambda: jc.derivative_matching(2, selector="magnitude"), ValueError,
         r"selector must be one of .*'magnitude'"),
        (lambda: jc.derivative_matching(2, selector="random"), ValueError, r"needs a key"),
        (lambda: jc.derivative_matching(2, coordinates="narrowest"), ValueError,
         r"coordinates must be None, 'input' or 'bottleneck'"),
        (lambda: jc.derivative_matching(2, backend="grad"), ValueError, r"backend must be one of"),
        (lambda: jc.derivative_matching(2, centers="many"), ValueError, r"centers must be None"),
        (lambda: jc.derivative_matching(2, layer_order="sideways"), ValueError,
         r"layer_order must be one of"),
        (lambda: jc.derivative_matching(-1), ValueError, r"order must be >= 0"),
        (lambda: jc.MaxVol(delta=-0.1), ValueError, r"delta must be a finite number >= 0"),
        (lambda: jc.PivotedQR(rtol=2.0), ValueError, r"rtol must be a number in \[0, 1\)"),
        (lambda: jc.best_of(jc.derivative_matching(2)), ValueError, r"at least two methods"),
        (lambda: jc.best_of(jc.derivative_matching(2), "collocation"), TypeError,
         r"expected Method objects"),
    ],
)
def test_methods_validate_their_own_fields(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("kwarg", ["features", "selector", "rtol", "data", "widths", "key"])
def test_settings_of_a_method_are_not_keywords_of_compress(net, kwarg):
    """A method's settings live in the method (jc.derivative_matching(k, selector=...)); compress
    refuses them as keywords, by name."""
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{kwarg}'"):
        jc.compress(net, activation="sigmoid", order=2, **{kwarg: None})


def test_domain_must_be_a_domain(net):
    with pytest.raises(TypeError, match=r"domain must be a jaxcompress.Ball, jaxcompress.Box, "):
        jc.compress(net, activation="sigmoid", order=2, domain=(0.0, 1.0))
    with pytest.raises(TypeError, match=r"give a method"):
        jc.compress(net, activation="sigmoid")
    with pytest.raises(TypeError, match=r"method must be a jc.Method"):
        jc.compress(net, "collocation", activation="sigmoid")
