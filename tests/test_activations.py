"""The activation registry: closed-form Taylor rules against nested ``jax.jvp``, the ``jet``
fallback for user activations, and a registered user activation used end to end."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import activations as _activations

jax.config.update("jax_enable_x64", True)

K_MAX = 6
POINTS = np.array([-3.0, -2.2, -1.0, -0.35, 0.0, 0.5, 1.3, 2.7, 3.0])
BUILTIN = jc.activations.registered_activations()


def _jvp_reference(fn, points: np.ndarray, k_max: int) -> np.ndarray:
    """``fn^(j)(u0) / j!`` for ``j = 0..k_max`` the slow way, by nested ``jax.jvp`` (``f^(j+1)
    (u) = d/dt f^(j)(u + t)`` at ``t = 0``, as jax's own jet tests check ``jet``): shape
    (k_max + 1, n). Forward over forward: nested ``jax.grad`` gives the same numbers (to
    1.6e-14 for gelu_tanh) from a program about twice as slow to trace."""
    derivs = [fn]
    for _ in range(k_max):
        derivs.append(lambda u, f=derivs[-1]: jax.jvp(f, (u,), (jnp.ones_like(u),))[1])
    table = jax.jit(jax.vmap(lambda u: jnp.stack([f(u) for f in derivs])))(points)
    fact = np.array([math.factorial(j) for j in range(k_max + 1)], dtype=np.float64)
    return np.asarray(table).T / fact[:, None]


def _assert_series_matches(series, ref: np.ndarray, points: np.ndarray) -> None:
    # every order in one small compilation (op by op: a program per operation; one jit per
    # order: a program per order)
    orders = jax.jit(lambda u0: [series(u0, k) for k in range(ref.shape[0])])(points)
    for k in range(ref.shape[0]):
        got = np.asarray(orders[k])
        assert got.shape == (k + 1, points.shape[0])
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, ref[: k + 1], rtol=1e-10, atol=1e-14,
                                   err_msg=f"order k={k}")


def _features(params, *, center=None, **static):
    """``derivative_features`` under ``jax.jit`` (configuration static), fresh per call so a
    re-registered activation is looked up again."""
    fn = jax.jit(functools.partial(jc.features.derivative_features, **static))
    return fn(params) if center is None else fn(params, center=center)


@pytest.fixture
def registered():
    """Register activations for one test and remove them afterwards (keeps the registry clean)."""
    names = []

    def register(name, fn, **kwargs):
        names.append(name)
        return jc.register_activation(name, fn, **kwargs)

    yield register
    for name in names:
        _activations._REGISTRY.pop(name, None)


def test_builtin_registry_contents() -> None:
    for name in ("sigmoid", "tanh", "gelu", "gelu_tanh", "softplus", "silu", "sin", "identity"):
        assert name in BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_series_matches_nested_jvp(name: str) -> None:
    act = jc.activations.get_activation(name)
    ref = _jvp_reference(act.fn, POINTS, K_MAX)
    _assert_series_matches(act.series, ref, POINTS)
    # the function the series expands is the one apply() uses
    np.testing.assert_allclose(np.asarray(act(jax.device_put(POINTS))), ref[0], rtol=1e-13)


@pytest.mark.parametrize("name", BUILTIN)
def test_jet_fn_is_the_same_function(name: str) -> None:
    act = jc.activations.get_activation(name)
    x = jnp.asarray(POINTS)
    np.testing.assert_allclose(np.asarray(act.jet_fn(x)), np.asarray(act.fn(x)), rtol=1e-13,
                               atol=1e-15)


@pytest.mark.parametrize("name", BUILTIN)
def test_series_keeps_the_shape_of_u0(name: str) -> None:
    u0 = POINTS[:6].reshape(2, 3)
    series = jax.jit(jc.activations.get_activation(name).series, static_argnums=1)  # not op by op
    s = series(u0, 3)
    assert s.shape == (4, 2, 3)
    flat = series(POINTS[:6], 3)
    np.testing.assert_array_equal(np.asarray(s).reshape(4, 6), np.asarray(flat))


def test_sin_series_closed_form_and_network_features_against_nested_jacfwd() -> None:
    act = jc.activations.get_activation("sin")
    assert act.rho_sigma == math.inf and jc.activations.get_activation(jnp.sin) is act
    # sin^(j)(u) = sin(u + j pi / 2): the rule's cycle sin, cos, -sin, -cos over j!
    exact = np.stack([np.sin(POINTS + j * np.pi / 2) / math.factorial(j)
                      for j in range(K_MAX + 1)])
    _assert_series_matches(act.series, exact, POINTS)
    # a sin network's Taylor features equal nested jacfwd's (the test-only reference backend)
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 5, 4, 1])
    z_t = _features(params, activation="sin", order=2)
    z_j = _features(params, activation="sin", order=2, backend="jacfwd")
    for a, b in zip(z_t, z_j, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_get_activation_resolves_registered_functions() -> None:
    assert jc.activations.get_activation(jax.nn.sigmoid).name == "sigmoid"
    assert jc.activations.get_activation(jnp.tanh).name == "tanh"
    assert jc.activations.get_activation("TANH").name == "tanh"
    act = jc.activations.get_activation("softplus")
    assert jc.activations.get_activation(act) is act


def test_jet_fallback_series_for_sin(registered) -> None:
    act = registered("test_sin", jnp.sin, description="sin, entire")
    assert act.series is not None and act.jet_fn is jnp.sin
    # sin^(j)(u) = sin(u + j pi / 2), exactly
    exact = np.stack([np.sin(POINTS + j * np.pi / 2) / math.factorial(j)
                      for j in range(K_MAX + 1)])
    _assert_series_matches(act.series, exact, POINTS)
    # and the nested-jvp reference agrees with the closed form (sanity of the reference)
    np.testing.assert_allclose(_jvp_reference(jnp.sin, POINTS, K_MAX), exact, rtol=1e-12,
                               atol=1e-15)


def test_jet_fallback_series_for_a_composite(registered) -> None:
    def fn(x):
        return jnp.exp(-0.5 * x) * jnp.cos(x) + x**3

    act = registered("test_composite", fn)
    _assert_series_matches(act.series, _jvp_reference(fn, POINTS, K_MAX), POINTS)


def test_registered_activation_in_features_and_compress(registered) -> None:
    registered("test_sin", jnp.sin, description="sin, entire")
    teacher = jc.init_mlp(jax.random.PRNGKey(4), [2, 9, 8, 1])
    center = jax.device_put(np.array([0.3, -0.2]))
    feats = {b: _features(teacher, activation="test_sin", order=2, backend=b, center=center)
             for b in ("taylor", "jet", "jacfwd")}
    for b in ("jet", "jacfwd"):
        for z_ref, z in zip(feats["taylor"], feats[b], strict=True):
            assert z.shape == (6, z_ref.shape[1])
            np.testing.assert_allclose(np.asarray(z), np.asarray(z_ref), rtol=1e-9, atol=1e-12,
                                       err_msg=b)
    # the features really are sin-network Taylor coefficients: row 0 is the hidden output
    h1 = jax.jit(lambda c, p: jnp.sin(c @ p[0]["kernel"] + p[0]["bias"]))(center, teacher)
    np.testing.assert_allclose(np.asarray(feats["taylor"][0])[0], np.asarray(h1), rtol=1e-13)

    small, info = jc.compress(teacher, activation="test_sin", order=2)
    assert jc.layer_sizes(small) == [2, 6, 6, 1]
    assert info.activation == "test_sin"
    assert all(int(li.rank) == 6 for li in info.layers)
    assert all(float(li.residual) < 1e-12 for li in info.layers)

    # derivative matching: value, gradient and Hessian of the output at the origin agree ...
    @jax.jit
    def derivatives(p):
        def f(x):
            return jc.apply(p, x, activation="test_sin")[0]

        x0 = jnp.zeros((2,))
        return f(x0), jax.grad(f)(x0), jax.hessian(f)(x0), jax.jacfwd(jax.hessian(f))(x0)

    *low_t, third_t = derivatives(teacher)
    *low_s, third_s = derivatives(small)
    for a, b in zip(low_t, low_s, strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-10, atol=1e-12)
    # ... while the third derivatives are not (so the comparison above can fail)
    assert float(np.max(np.abs(np.asarray(third_s) - np.asarray(third_t)))) > 1e-6


def test_registered_activation_with_closed_form_series(registered) -> None:
    # a user-supplied series is used as given (a deliberately wrong one must show up)
    def exp_series(u0, k):
        return jnp.stack([jnp.exp(u0) / math.factorial(j) for j in range(k + 1)])

    registered("test_exp", jnp.exp, series=exp_series)
    teacher = jc.init_mlp(jax.random.PRNGKey(5), [1, 5, 1])
    z_taylor = _features(teacher, activation="test_exp", order=4)[0]
    z_ref = _features(teacher, activation="test_exp", order=4, backend="jacfwd")[0]
    np.testing.assert_allclose(np.asarray(z_taylor), np.asarray(z_ref), rtol=1e-10)

    registered("test_exp", jnp.exp, series=lambda u0, k: 2.0 * exp_series(u0, k),
               overwrite=True)
    z_bad = _features(teacher, activation="test_exp", order=4)[0]
    assert not np.allclose(np.asarray(z_bad), np.asarray(z_ref), rtol=1e-3)


def test_mixed_case_name_is_usable(registered) -> None:
    registered("TestSin", jnp.sin)
    assert jc.activations.get_activation("TestSin").name == "TestSin"
    teacher = jc.init_mlp(jax.random.PRNGKey(6), [1, 4, 1])
    jc.compress(teacher, activation="TestSin", order=1)


@pytest.mark.parametrize("selector", ["pivoted_qr", "maxvol"])
def test_compress_with_width_above_num_features(selector: str) -> None:
    # explicit widths may exceed D_k (they only have to be <= d_l): the surplus neurons get zero
    # outgoing weight and value and gradient at the centre are still matched
    teacher = jc.init_mlp(jax.random.PRNGKey(7), [1, 6, 6, 1])
    method = jc.derivative_matching(1, widths=[4, 4], selector=selector)  # D_1 = 2
    small, info = jc.compress(teacher, method, activation="tanh")
    assert jc.layer_sizes(small) == [1, 4, 4, 1]
    assert all(int(li.rank) == 2 for li in info.layers)
    np.testing.assert_array_equal(np.asarray(small[1]["kernel"])[2:], 0.0)
    np.testing.assert_array_equal(np.asarray(small[2]["kernel"])[2:], 0.0)
    assert jc.layer_sizes(jc.trim(small)) == [1, 2, 2, 1]

    @jax.jit
    def value_and_grad(p):
        return jax.value_and_grad(lambda x: jc.apply(p, x, activation="tanh")[0])(jnp.zeros((1,)))

    for a, b in zip(value_and_grad(teacher), value_and_grad(small), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12)


def test_sin_series_at_high_order():
    # j! overflows int64 from j = 21: the series stays finite and exact to rounding
    u0 = jax.device_put(np.array([0.3, -1.2]))
    got = np.asarray(jc.activations.get_activation("sin").series(u0, 40))
    assert got.shape == (41, 2) and np.all(np.isfinite(got))
    for j in (0, 7, 21, 25, 40):
        expected = [np.sin, np.cos, lambda v: -np.sin(v), lambda v: -np.cos(v)][j % 4](
            np.asarray(u0)) / math.factorial(j)
        np.testing.assert_allclose(got[j], expected, rtol=1e-13)


def test_series_at_high_order_in_float32_without_x64():
    # without jax_enable_x64 an int divisor j! overflows int32 from j = 13: the closed-form (sin)
    # and the jet-derived (a registered function) series stay finite and right to rounding
    u0 = np.asarray([0.3, -1.2])
    with jax.enable_x64(False):
        assert not jax.config.jax_enable_x64
        x = jax.device_put(u0.astype(np.float32))
        sin = np.asarray(jc.activations.get_activation("sin").series(x, 16))
        jc.register_activation("test_sin_3u_x32", lambda u: jnp.sin(3.0 * u))
        try:
            jet = np.asarray(jc.activations.get_activation("test_sin_3u_x32").series(x, 16))
        finally:  # a registered sin(3u) would make later tests' traced SIRENs chains
            _activations._REGISTRY.pop("test_sin_3u_x32", None)
    for j in (0, 7, 13, 16):
        d = [np.sin, np.cos, lambda v: -np.sin(v), lambda v: -np.cos(v)][j % 4]
        np.testing.assert_allclose(sin[j], d(u0) / math.factorial(j), rtol=1e-5)
        np.testing.assert_allclose(jet[j], d(3 * u0) * 3.0**j / math.factorial(j), rtol=1e-4)
