"""The params convention (jaxcompress.mlp): initialisation, evaluation against NumPy, sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.mlp import hidden_activations, param_count


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_init_follows_the_pytorch_default(dtype):
    sizes = [3, 400, 5]
    params = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=dtype)
    assert [(p["kernel"].shape, p["bias"].shape) for p in params] == [((3, 400), (400,)),
                                                                     ((400, 5), (5,))]
    assert all(p["kernel"].dtype == dtype and p["bias"].dtype == dtype for p in params)
    for p, fan_in in zip(params, sizes[:-1], strict=True):
        bound = 1 / np.sqrt(fan_in)
        k = np.asarray(p["kernel"])
        assert np.all(np.abs(k) <= bound) and np.abs(k).max() > 0.9 * bound
    normal = jc.init_mlp(jax.random.PRNGKey(0), sizes, init="normal")
    assert not np.any(np.asarray(normal[0]["bias"]))
    np.testing.assert_allclose(np.std(np.asarray(normal[1]["kernel"])), 1 / np.sqrt(400),
                               rtol=0.1)
    with pytest.raises(ValueError, match="sizes must be >= 2 positive integers"):
        jc.init_mlp(jax.random.PRNGKey(0), [3])
    with pytest.raises(ValueError, match="init must be 'uniform' or 'normal'"):
        jc.init_mlp(jax.random.PRNGKey(0), [3, 4], init="xavier")


def _drawn_directly(key, sizes, init, dtype):
    """What init_mlp documents, drawn with jax.random op by op at each layer's own shape."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, kk, kb = jax.random.split(key, 3)
        bound = float(1.0 / np.sqrt(fan_in))
        if init == "uniform":
            shape = (fan_in, fan_out)
            params.append({"kernel": jax.random.uniform(kk, shape, dtype, -bound, bound),
                           "bias": jax.random.uniform(kb, (fan_out,), dtype, -bound, bound)})
        else:
            params.append({"kernel": bound * jax.random.normal(kk, (fan_in, fan_out), dtype),
                           "bias": jnp.zeros((fan_out,), dtype)})
    return params


def test_init_is_bit_for_bit_the_direct_draw():
    # init_mlp draws small layers flat at a power-of-two length and cuts them on the host (one
    # compiled program per length, not per shape); a layer above _BUCKET_MAX entries is drawn at
    # its own size: both must be the direct draw, bit for bit
    from jaxcompress import mlp

    cases = [(jax.random.PRNGKey(0), [3, 5, 7], "uniform", jnp.float32),
             (jax.random.key(1), [3, 5, 7], "uniform", jnp.float64),
             (jax.random.PRNGKey(2), [3, 5, 7], "normal", jnp.float32),
             (jax.random.PRNGKey(3), [3, 5, 7], "normal", jnp.float64),
             (jax.random.PRNGKey(4), [1, mlp._BUCKET_MAX + 1], "uniform", jnp.float32)]
    for key, sizes, init, dtype in cases:
        got = jc.init_mlp(key, sizes, init=init, dtype=dtype)
        want = _drawn_directly(key, sizes, init, dtype)
        for g, w in zip(got, want, strict=True):
            assert g["kernel"].dtype == dtype and g["kernel"].shape == w["kernel"].shape
            np.testing.assert_array_equal(g["kernel"], w["kernel"])
            np.testing.assert_array_equal(g["bias"], w["bias"])


def test_small_layers_of_any_shape_share_one_draw_program():
    """Every layer of at most 16,384 entries is cut from one draw of that length: a network of
    new small shapes compiles no draw of its own."""
    from programs import programs_compiled

    jc.init_mlp(jax.random.PRNGKey(0), [2, 7, 1], dtype=jnp.float32)
    params, names = programs_compiled(
        lambda: jc.init_mlp(jax.random.PRNGKey(1), [3, 100, 60, 2], dtype=jnp.float32))
    assert "jit(_draw_flat)" not in names, names
    assert jc.layer_sizes(params) == [3, 100, 60, 2]


def test_init_under_jit_and_vmap():
    # a traced key: a stack of teachers from a batch of keys, and init inside jit
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    stack = jax.vmap(lambda k: jc.init_mlp(k, [2, 5, 1]))(keys)
    assert stack[0]["kernel"].shape == (3, 2, 5)
    jitted = jax.jit(lambda k: jc.init_mlp(k, [2, 5, 1]))(keys[1])
    for layer, one in zip(jitted, jc.init_mlp(keys[1], [2, 5, 1]), strict=True):
        np.testing.assert_array_equal(layer["kernel"], one["kernel"])
    # teacher 1 of the stack
    np.testing.assert_array_equal(np.asarray(stack[1]["kernel"])[1], jitted[1]["kernel"])


@pytest.mark.parametrize("act,ref", [("sigmoid", lambda u: 1 / (1 + np.exp(-u))),
                                     ("tanh", np.tanh), ("identity", lambda u: u)])
def test_apply_matches_numpy(act, ref):
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 9, 7, 3])
    x = np.random.default_rng(0).standard_normal((11, 2))
    h = x
    for p in params[:-1]:
        h = ref(h @ np.asarray(p["kernel"]) + np.asarray(p["bias"]))
    want = h @ np.asarray(params[-1]["kernel"]) + np.asarray(params[-1]["bias"])
    np.testing.assert_allclose(jc.apply(params, jax.device_put(x), activation=act), want,
                               rtol=1e-12, atol=1e-14)
    # any leading shape, and one point
    y = jc.apply(params, jax.device_put(x.reshape(11, 1, 2)), activation=act)
    np.testing.assert_allclose(np.asarray(y).reshape(11, 3), want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jc.apply(params, jax.device_put(x[0]), activation=act), want[0],
                               rtol=1e-12, atol=1e-14)
    hs = hidden_activations(params, jax.device_put(x), activation=act)
    assert [h.shape for h in hs] == [(11, 9), (11, 7)]


def test_sizes_and_parameter_counts():
    params = jc.init_mlp(jax.random.PRNGKey(2), [2, 6, 4, 1])
    assert jc.layer_sizes(params) == [2, 6, 4, 1]
    assert jc.num_params(params) == param_count([2, 6, 4, 1]) == 2 * 6 + 6 + 6 * 4 + 4 + 4 + 1
    # a stack of networks (vmap): counts are per network
    stacked = jax.tree.map(lambda *a: np.stack(a), params, params)
    assert jc.layer_sizes(stacked) == [2, 6, 4, 1]
    assert jc.num_params(stacked) == jc.num_params(params)


def test_validate_accepts_tuples_and_stacks_and_refuses_the_rest():
    params = jc.init_mlp(jax.random.PRNGKey(3), [2, 5, 1])
    assert jc.mlp.validate_params(tuple(params)) == params
    stacked = jax.tree.map(lambda *a: np.stack(a), params, params)
    assert len(jc.mlp.validate_params(stacked)) == 2
    bad = [params[0], {"kernel": np.asarray(params[1]["kernel"])[:, :1], "bias": np.zeros((2,))}]
    with pytest.raises(ValueError, match=r"layer 1 bias has shape \(2,\); expected \(1,\)"):
        jc.mlp.validate_params(bad, where="here")
