"""Derivative features: the three backends agree, and match closed forms."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc

ACTIVATIONS = jc.activations.registered_activations()


def _max_rel_diff(za, zb):
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                     / (1e-300 + np.max(np.abs(np.asarray(b, np.float64)))))
               for a, b in zip(za, zb, strict=True))


def test_monomials_order_and_count():
    m = jc.taylor.monomials(2, 2)
    assert m.tolist() == [[0, 0], [1, 0], [0, 1], [2, 0], [1, 1], [0, 2]]
    for d in range(1, 5):
        for k in range(0, 7):
            mons = jc.taylor.monomials(d, k)
            assert mons.shape == (math.comb(d + k, d), d) == (jc.taylor.num_monomials(d, k), d)
            deg = mons.sum(axis=1)
            assert np.all(np.diff(deg) >= 0)  # graded
            assert len({tuple(r) for r in mons}) == len(mons)
            # lower orders are prefixes
            np.testing.assert_array_equal(
                mons[: jc.taylor.num_monomials(d, k - 1)] if k else mons[:1],
                                          jc.taylor.monomials(d, max(k - 1, 0)))
    m3 = jc.taylor.monomials(3, 2)
    assert m3[4:].tolist() == [[2, 0, 0], [1, 1, 0], [1, 0, 1], [0, 2, 0], [0, 1, 1], [0, 0, 2]]


def test_monomials_bad_input():
    with pytest.raises(ValueError, match="order k must be >= 0"):
        jc.taylor.monomials(2, -1)
    with pytest.raises(ValueError, match="d must be >= 1"):
        jc.taylor.monomials(0, 2)


# Every activation: taylor and jet to k = 7 in d = 3 (jet is cheap to compile, so it can go to
# high order), and nested jacfwd, whose compile time grows steeply with k (tens of seconds at
# k = 6), at k = 3 against the first D_3 rows of the other two (lower orders are prefixes). Also
# sigmoid in d = 1 at k = 4 and 5; the slow twin (-m slow) runs jacfwd at k = 6 everywhere.
FAST_CASES_SOME = [(1, 4)]
SOME_ACTIVATIONS = ("sigmoid",)
SLOW_CASES = [(1, 6), (2, 6), (3, 6)]


def _check_backends(act, d, k, sizes=None):
    sizes = sizes or ([d, 6, 5, 4, 1] if d == 3 else [d, 6, 5, 1])
    params = jc.init_mlp(jax.random.PRNGKey(10 * d + k), sizes)
    ref = jc.features.derivative_features(params, activation=act, order=k, backend="jacfwd")
    tay = jc.features.derivative_features(params, activation=act, order=k, backend="taylor")
    jet = jc.features.derivative_features(params, activation=act, order=k, backend="jet")
    assert [z.shape for z in tay] == [(jc.taylor.num_monomials(d, k), w) for w in sizes[1:-1]]
    assert _max_rel_diff(tay, ref) < 1e-12
    assert _max_rel_diff(jet, ref) < 1e-10


#: The default run's activations for the network-level agreement (one per primitive the jet
#: and Taylor passes expand: logistic, tanh, erf, sin, and the identity); every registered one,
#: tanh-GELU, softplus, SiLU and the tests' own polynomials included, with -m slow. Each
#: activation's series is checked against nested jax.grad in tests/test_activations.py.
BACKEND_DEFAULT = ("sigmoid", "tanh", "gelu", "sin", "identity")


@pytest.mark.parametrize("act", [pytest.param(a, marks=[] if a in BACKEND_DEFAULT
                                              else [pytest.mark.slow]) for a in ACTIVATIONS])
def test_backends_agree(act):
    params = jc.init_mlp(jax.random.PRNGKey(3), [3, 8, 8, 2])
    tay = jc.features.derivative_features(params, activation=act, order=7, backend="taylor")
    jet = jc.features.derivative_features(params, activation=act, order=7, backend="jet")
    assert [z.shape for z in tay] == [(jc.taylor.num_monomials(3, 7), 8)] * 2
    assert _max_rel_diff(jet, tay) < 1e-9
    ref = jc.features.derivative_features(params, activation=act, order=3, backend="jacfwd")
    d3 = jc.taylor.num_monomials(3, 3)
    assert _max_rel_diff([np.asarray(z)[:d3] for z in tay], ref) < 1e-12
    assert _max_rel_diff([np.asarray(z)[:d3] for z in jet], ref) < 1e-10


@pytest.mark.parametrize("act", SOME_ACTIVATIONS)
@pytest.mark.parametrize("d,k", FAST_CASES_SOME)
def test_backends_agree_other_dims(act, d, k):
    _check_backends(act, d, k)


def test_backends_agree_order5():
    _check_backends("sigmoid", 1, 5, sizes=[1, 5, 4, 1])


@pytest.mark.slow
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("d,k", SLOW_CASES)
def test_backends_agree_slow(act, d, k):
    _check_backends(act, d, k)


def test_single_layer_closed_form():
    # one hidden layer, d = 1: Z[j, i] = s_j(b_i) * w_i^j with s_j the activation's series
    params = jc.init_mlp(jax.random.PRNGKey(1), [1, 9, 1])
    w, b = np.asarray(params[0]["kernel"])[0], np.asarray(params[0]["bias"])
    k = 7
    (z,) = jc.features.derivative_features(params, activation="tanh", order=k)
    t = np.tanh(b)
    # tanh Taylor coefficients at b from sympy-free recursion on derivatives: d/du tanh = 1 - t^2
    d1 = 1 - t**2
    d2 = -2 * t * d1
    d3 = -2 * d1**2 - 2 * t * d2
    expected = np.stack([t, d1 * w, d2 / 2 * w**2, d3 / 6 * w**3])
    np.testing.assert_allclose(np.asarray(z)[:4], expected, rtol=1e-12, atol=1e-15)


#: The reference Jacobian of the second hidden layer at ``x``, compiled once (op by op, nested
#: jacfwd compiles a program per operation).
_hidden_jacobian = jax.jit(jax.jacfwd(
    lambda p, x: jc.mlp.hidden_activations(p, x, activation="gelu")[1], argnums=1))


@pytest.mark.parametrize("backend", jc.features.BACKENDS)
def test_center(backend):
    params = jc.init_mlp(jax.random.PRNGKey(2), [2, 5, 4, 1])
    center = jax.device_put(np.array([0.3, -0.7]))
    z = jc.features.derivative_features(params, activation="gelu", order=3, backend=backend,
                               center=center)
    # row 0 is the value at the centre, rows 1-2 the gradient
    h = jc.mlp.hidden_activations(params, center, activation="gelu")
    z1 = np.asarray(z[1])
    np.testing.assert_allclose(z1[0], h[1], rtol=1e-12)
    jac = np.asarray(_hidden_jacobian(params, center))
    np.testing.assert_allclose(z1[1:3], jac.T, rtol=1e-10, atol=1e-14)


def test_features_under_jit_and_lower_order_prefix():
    params = jc.init_mlp(jax.random.PRNGKey(4), [2, 16, 16, 1])
    f = jax.jit(lambda p: jc.features.derivative_features(p, activation="sigmoid", order=6))
    z6 = f(params)
    z3 = jc.features.derivative_features(params, activation="sigmoid", order=3)
    for a, b in zip(z6, z3, strict=True):
        np.testing.assert_allclose(np.asarray(a)[: b.shape[0]], b, rtol=1e-13, atol=1e-16)


def test_float32_features():
    params = jc.init_mlp(jax.random.PRNGKey(5), [2, 32, 32, 1], dtype=jnp.float32)
    z32 = jc.features.derivative_features(params, activation="sigmoid", order=6)
    p64 = jax.tree.map(lambda x: jax.device_put(np.asarray(x, np.float64)), params)  # exact
    z64 = jc.features.derivative_features(p64, activation="sigmoid", order=6)
    assert z32[0].dtype == jnp.float32
    assert _max_rel_diff(z32, z64) < 1e-5
