"""Flax: the conversions of jaxcompress.flax, and modules compressed through jc.trace_module."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc

nnx = pytest.importorskip("flax.nnx")
nn = pytest.importorskip("flax.linen")
jf = pytest.importorskip("jaxcompress.flax")

X = jc.Ball(2, 1.0).sample(jax.random.PRNGKey(1), 200)


def _built(make, seed=0):
    """``make(nnx.Rngs(seed))``: an nnx module, its initializers run as one compiled program
    (not op by op)."""
    return nnx.jit(lambda: make(nnx.Rngs(seed)))()


def test_nnx_module_through_trace_module_equals_its_params_list():
    model = jf.MLP([2, 48, 48, 1], activation="sigmoid", rngs=nnx.Rngs(0),
                   param_dtype=jnp.float64)
    params, act = jf.nnx_params(model)
    small, info = jc.compress(jc.trace_module(model, X[:4]), jc.derivative_matching(4),
                              domain=jc.Ball(2, 1.0))
    core, _ = jc.compress(params, jc.derivative_matching(4), activation=act)
    new = small.module
    assert type(new) is jf.MLP and [lin.out_features for lin in new.layers] == [15, 15, 1]
    for lin, layer in zip(new.layers, core, strict=True):
        np.testing.assert_array_equal(lin.kernel[...], layer["kernel"])
        np.testing.assert_array_equal(lin.bias[...], layer["bias"])
    np.testing.assert_allclose(new(X), jc.apply(core, X, activation="sigmoid"), rtol=1e-13,
                               atol=1e-15)
    # split / merge / nnx.jit behave as usual; the teacher is untouched
    graph, state = nnx.split(new)
    np.testing.assert_array_equal(nnx.merge(graph, state)(X), new(X))
    np.testing.assert_allclose(nnx.jit(lambda m, x: m(x))(new, X), new(X), rtol=1e-13)
    assert model.layers[0].kernel.shape == (2, 48)
    assert jc.layer_sizes(small) == [2, 15, 15, 1] and info.activation == "sigmoid"


def test_linen_module_through_trace_module():
    module = jf.LinenMLP(features=(40, 40, 2), activation="tanh", param_dtype=jnp.float64)
    variables = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.float64))
    params, act = jf.linen_params(variables, module)
    small, _ = jc.compress(jc.trace_module(module, X[:4], variables=variables),
                           jc.derivative_matching(3), domain=jc.Ball(2, 1.0))
    core, _ = jc.compress(params, jc.derivative_matching(3), activation=act)
    assert small.module.features == (10, 10, 2)
    np.testing.assert_allclose(small.module.apply(small.params, X),
                               jc.apply(core, X, activation="tanh"), rtol=1e-12, atol=1e-14)


def test_modules_have_one_route_through_trace_module():
    """jaxcompress.flax holds conversions only: a module is compressed through jc.trace_module
    (no second route such as a compress_model of its own)."""
    for name in ("compress_model", "Compressed", "rounded_widths"):
        assert not hasattr(jf, name)
    assert set(jf.__all__) == {"LinenMLP", "MLP", "from_params", "linen_params", "nnx_params"}


def test_nnx_conventions_of_the_conversion():
    seq = _built(lambda rngs: nnx.Sequential(
        nnx.Linear(2, 32, rngs=rngs, param_dtype=jnp.float64), jnp.tanh,
        nnx.Linear(32, 2, rngs=rngs, param_dtype=jnp.float64)), seed=3)
    params, act = jf.nnx_params(seq)
    assert act == "tanh" and jc.layer_sizes(params) == [2, 32, 2]
    np.testing.assert_allclose(nnx.jit(lambda m, x: m(x))(seq, X),
                               jc.apply(params, X, activation="tanh"), rtol=1e-13)

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.inp = nnx.Linear(2, 24, rngs=rngs, param_dtype=jnp.float64)
            self.out = nnx.Linear(24, 1, rngs=rngs, param_dtype=jnp.float64)
            self.activation = jax.nn.gelu  # jax's default: the tanh approximation

        def __call__(self, x):
            return self.out(jax.nn.gelu(self.inp(x)))

    params, act = jf.nnx_params(_built(Net))
    assert act == "gelu_tanh" and jc.layer_sizes(params) == [2, 24, 1]


def test_unsupported_models_are_refused_by_the_conversion():
    class WithNorm(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])
            self.norm = nnx.LayerNorm(8, rngs=rngs)
            self.activation = "sigmoid"

        def __call__(self, x):
            return self.layers[1](jax.nn.sigmoid(self.norm(self.layers[0](x))))

    with pytest.raises(ValueError, match="'norm' .*LayerNorm"):
        jf.nnx_params(_built(WithNorm))

    class Relu(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])
            self.activation = jax.nn.relu

    with pytest.raises(ValueError, match="not analytic"):
        jf.nnx_params(_built(Relu))

    class Lies(nnx.Module):  # declares sigmoid, computes tanh: must not be silently wrong
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])
            self.activation = "sigmoid"

        def __call__(self, x):
            return self.layers[1](jnp.tanh(self.layers[0](x)))

    with pytest.raises(ValueError, match="output differs"):
        jf.nnx_params(_built(Lies))

    class NoAct(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])

    with pytest.raises(ValueError, match="declares no activation"):
        jf.nnx_params(_built(NoAct))

    class Scaled(nn.Module):
        @nn.compact
        def __call__(self, x):
            scale = self.param("scale", nn.initializers.ones, (1, 4), jnp.float32)
            return nn.Dense(1)(nn.sigmoid(nn.Dense(4)(x)) * scale)

    bad_vars = jax.jit(Scaled().init)(jax.random.PRNGKey(0), np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="scale"):
        jf.linen_params(bad_vars, Scaled(), activation="sigmoid")


def test_from_params_builds_models_for_loaded_files():
    params = jc.init_mlp(jax.random.PRNGKey(0), [3, 12, 7, 2])
    x3 = np.asarray(X)[:, :1].repeat(3, axis=1)
    model = jf.from_params(params, activation="silu")
    np.testing.assert_allclose(model(x3), jc.apply(params, x3, activation="silu"), rtol=1e-13)
    module, variables = jf.from_params(params, activation="silu", api="linen")
    np.testing.assert_allclose(module.apply(variables, x3), jc.apply(params, x3,
                                                                     activation="silu"),
                               rtol=1e-13)
