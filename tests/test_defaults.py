"""Trustworthy defaults: a width-independent float32 rank threshold, exact rank-deficient layers in
both dtypes, and the error estimate every compression records."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.measure import ERROR_POINTS, error_points
from jaxcompress.select import default_rtol

POLY = "test_defaults_poly2"
if POLY not in jc.activations.registered_activations():
    jc.register_activation(POLY, lambda u: u + 0.3 * u * u)


def _cast(params, dtype):
    # cast on the host: jnp.asarray(v, dtype) compiles a program per shape
    return [{k: jax.device_put(np.asarray(v).astype(dtype)) for k, v in layer.items()}
            for layer in params]


def test_default_rtol_depends_on_the_dtype_only():
    assert default_rtol(jnp.float32) == 10 * float(jnp.finfo(jnp.float32).eps)
    assert default_rtol(jnp.float64) == 10 * float(jnp.finfo(jnp.float64).eps)


@pytest.mark.parametrize("width", [256, 4096])
def test_float32_error_does_not_grow_with_the_width(width):
    # numpy's matrix-rank tolerance eps * max(D, n) gave 1.1e-6 at width 256 and 1.2e-5 at
    # 4096 here (it drops genuine high-order directions of wide layers); 10 eps gives ~1e-7
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, width, 1], dtype=jnp.float32)
    small, info = jc.compress(teacher, activation="sigmoid", order=8, radius=1.0)
    assert int(info.layers[0].rank) >= 43
    err = jc.sup_error(_cast(teacher, jnp.float64), _cast(small, jnp.float64),
                       activation="sigmoid", domain=jc.Ball(2, 1.0), key=jax.random.PRNGKey(1),
                       n_samples=2048, local_search_steps=20)
    assert float(err) < 1e-6


def _duplicated(dtype):
    """``[2, 12 x 20, 1]``: twelve sigmoid neurons, each copied 20 times with split weights."""
    base = jc.init_mlp(jax.random.PRNGKey(1), [2, 12, 1], dtype=jnp.float64)
    split = np.random.default_rng(0).uniform(0.1, 1.0, 20)
    split = split / split.sum()
    base = [{k: np.asarray(v) for k, v in layer.items()} for layer in base]   # on the host
    params = [{"kernel": np.repeat(base[0]["kernel"], 20, axis=1),
               "bias": np.repeat(base[0]["bias"], 20)},
              {"kernel": np.repeat(base[1]["kernel"], 20, axis=0)
               * np.tile(split, 12)[:, None], "bias": base[1]["bias"]}]
    return _cast(base, dtype), _cast(params, dtype), 12


def _polynomial(dtype):
    """A polynomial activation of degree 2: layer 1 spans the D_2 = 6 quadratics of x."""
    params = _cast(jc.init_mlp(jax.random.PRNGKey(2), [2, 200, 1], dtype=jnp.float64), dtype)
    return params, params, 6


def _dead(dtype):
    """190 of 200 neurons have zero incoming weights: constants, one direction between them."""
    params = jc.init_mlp(jax.random.PRNGKey(3), [2, 200, 1], dtype=jnp.float64)
    kernel = np.array(params[0]["kernel"])      # (on the host; _cast puts it on the device)
    kernel[:, 10:] = 0.0
    params = [{"kernel": kernel, "bias": params[0]["bias"]}, params[1]]
    params = _cast(params, dtype)
    return params, params, 11


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("case", [_duplicated, _polynomial, _dead])
def test_rank_deficient_layers_compress_exactly_with_bounded_coefficients(case, dtype):
    reference, params, rank = case(dtype)
    act = POLY if case is _polynomial else "sigmoid"
    small, info = jc.compress(params, activation=act, order=6, radius=1.0)
    assert int(info.layers[0].rank) == rank
    assert float(info.layers[0].max_coef) <= 1.0 + 1e-3  # pivoted QR: |C_ij| <= 1 here
    x = jc.Ball(2, 1.0).sample(jax.random.PRNGKey(4), 512, dtype)
    y = np.asarray(jc.apply(reference, x, activation=act))
    err = np.max(np.abs(y - np.asarray(jc.apply(small, x, activation=act))))
    scale = np.max(np.abs(y))
    tol = 1e-5 if dtype == jnp.float32 else 1e-13
    assert float(err) <= tol * float(scale)
    assert jc.layer_sizes(jc.trim(small))[1] == rank


def test_error_estimate_is_recorded_and_is_a_lower_bound():
    teacher = jc.init_mlp(jax.random.PRNGKey(5), [2, 48, 48, 1])
    domain = jc.Ball(2, 1.0)
    small, info = jc.compress(teacher, activation="tanh", order=4)
    x = error_points(domain, ERROR_POINTS, jnp.float64)
    want = np.max(np.abs(np.asarray(jc.apply(teacher, x, activation="tanh"))
                         - np.asarray(jc.apply(small, x, activation="tanh"))))
    np.testing.assert_allclose(info.error_estimate, want, rtol=1e-10)
    sup = jc.sup_error(teacher, small, activation="tanh", domain=domain,
                       key=jax.random.PRNGKey(0), n_samples=4096)
    assert 0.3 * float(sup) <= float(info.error_estimate) <= float(sup) * (1 + 1e-9)
    assert "error estimate" in info.summary()
    # other domains: the estimate is taken on the domain's own points
    box = jc.Box(jnp.array([0.0, -0.5]), jnp.array([1.0, 0.5]))
    _, info_box = jc.compress(teacher, jc.collocation(4), activation="tanh", domain=box)
    xb = np.asarray(error_points(box, ERROR_POINTS, jnp.float64))
    lo, hi = np.asarray(box.lo), np.asarray(box.hi)
    assert bool(np.all((xb >= lo[None]) & (xb <= hi[None])))
    assert float(info_box.error_estimate) > 0


def test_error_estimate_per_teacher_under_vmap_and_batched_summary():
    # (stacked and edited on the host: on the device each step compiled a program per shape)
    stack = jax.tree.map(lambda *a: np.stack(a), *[
        jc.init_mlp(jax.random.PRNGKey(s), [2, 40, 1]) for s in range(3)])
    # make teacher 1 rank deficient: all its neurons share one incoming weight and bias
    stack[0]["kernel"][1] = 0.3
    stack[0]["bias"][1] = 0.1
    stack = jax.device_put(stack)
    small, info = jax.vmap(lambda p: jc.compress(p, activation="sigmoid", order=3))(stack)
    assert info.error_estimate.shape == (3,)
    for i in range(3):
        one = [{k: jax.device_put(np.asarray(v)[i]) for k, v in layer.items()}
               for layer in stack]
        _, info_i = jc.compress(one, activation="sigmoid", order=3)
        np.testing.assert_allclose(np.asarray(info.error_estimate)[i], info_i.error_estimate,
                                   rtol=1e-9, atol=1e-14)
    ranks = np.asarray(info.layers[0].rank)
    assert ranks[1] == 1 and ranks[0] == 10
    line = info.summary().splitlines()[1]
    assert "1..10" in line  # the batch's range, not only its maximum
    assert "(3 teachers)" in info.summary()
