"""Flax adapters: nnx and linen round trips, round_to, unsupported modules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc

nnx = pytest.importorskip("flax.nnx")
nn = pytest.importorskip("flax.linen")
jf = pytest.importorskip("jaxcompress.flax")

X = jc.Ball(2, 1.0).sample(jax.random.PRNGKey(1), 200)


def _assert_same_as_core(result, params, act, order, **kw):
    core, _ = jc.compress(params, jc.derivative_matching(order), activation=act, **kw)
    for a, b in zip(result.params, core, strict=True):
        np.testing.assert_array_equal(a["kernel"], b["kernel"])
        np.testing.assert_array_equal(a["bias"], b["bias"])
    return core


def test_nnx_round_trip():
    model = jf.MLP([2, 48, 48, 1], activation="sigmoid", rngs=nnx.Rngs(0),
                   param_dtype=jnp.float64)
    params, act = jf.nnx_params(model)
    res = jf.compress_model(model, jc.derivative_matching(4))
    assert type(res.model) is jf.MLP and res.variables is None
    core = _assert_same_as_core(res, params, act, 4)
    np.testing.assert_allclose(res.model(X), jc.apply(core, X, activation="sigmoid"),
                               rtol=1e-13, atol=1e-15)
    assert [lin.out_features for lin in res.model.layers] == [15, 15, 1]
    # split / merge / nnx.jit behave as usual
    graph, state = nnx.split(res.model)
    np.testing.assert_array_equal(nnx.merge(graph, state)(X), res.model(X))
    np.testing.assert_allclose(nnx.jit(lambda m, x: m(x))(res.model, X), res.model(X),
                               rtol=1e-13)
    # the teacher is untouched
    assert model.layers[0].kernel.shape == (2, 48)


def test_nnx_sequential_and_attribute_conventions():
    rngs = nnx.Rngs(3)
    seq = nnx.Sequential(nnx.Linear(2, 32, rngs=rngs, param_dtype=jnp.float64), jnp.tanh,
                         nnx.Linear(32, 32, rngs=rngs, param_dtype=jnp.float64), jnp.tanh,
                         nnx.Linear(32, 2, rngs=rngs, param_dtype=jnp.float64))
    res = jf.compress_model(seq, order=3)
    assert type(res.model) is nnx.Sequential
    np.testing.assert_allclose(res.model(X), jc.apply(res.params, X, activation="tanh"),
                               rtol=1e-13, atol=1e-15)

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.inp = nnx.Linear(2, 24, rngs=rngs, param_dtype=jnp.float64)
            self.out = nnx.Linear(24, 1, rngs=rngs, param_dtype=jnp.float64)
            self.activation = jax.nn.gelu  # jax's default: the tanh approximation

        def __call__(self, x):
            return self.out(jax.nn.gelu(self.inp(x)))

    net = Net(nnx.Rngs(0))
    res = jf.compress_model(net, order=2)
    assert type(res.model) is Net and res.info.activation == "gelu_tanh"
    assert res.model.inp.kernel.shape == (2, 6)


def test_linen_round_trip():
    module = jf.LinenMLP(features=(40, 40, 2), activation="tanh", param_dtype=jnp.float64)
    variables = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.float64))
    assert variables["params"]["Dense_0"]["kernel"].dtype == jnp.float64
    params, act = jf.linen_params(variables, module)
    res = jf.compress_model(variables, jc.derivative_matching(3), module=module)
    _assert_same_as_core(res, params, act, 3)
    assert res.model.features == (10, 10, 2)
    np.testing.assert_allclose(res.model.apply(res.variables, X),
                               jc.apply(res.params, X, activation="tanh"), rtol=1e-13, atol=1e-15)


def test_round_to_never_increases_the_error():
    model = jf.MLP([2, 64, 64, 1], activation="sigmoid", rngs=nnx.Rngs(1),
                   param_dtype=jnp.float64)
    teacher = np.asarray(model(X))
    for order in (3, 5):  # D_k = 10 and 21: rounded up to 16 and 24
        plain = jf.compress_model(model, jc.derivative_matching(order))
        rounded = jf.compress_model(model, jc.derivative_matching(order), round_to=8)
        widths = [lin.out_features for lin in rounded.model.layers[:-1]]
        assert all(w % 8 == 0 for w in widths)
        # the models compute jc.apply of their params (test_nnx_round_trip)
        e_plain = np.max(np.abs(jc.apply(plain.params, X, activation="sigmoid") - teacher))
        e_round = np.max(np.abs(jc.apply(rounded.params, X, activation="sigmoid") - teacher))
        assert e_round <= e_plain * (1 + 1e-6) + 1e-14
        # the extra slots hold real neurons from the teacher, not zero rows
        kept = np.asarray(rounded.info.layers[0].kept)
        assert len(set(kept.tolist())) == widths[0]
        assert np.all(np.abs(np.asarray(rounded.model.layers[0].kernel[...])).sum(0) > 0)


def test_unsupported_models_are_refused():
    class WithNorm(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])
            self.norm = nnx.LayerNorm(8, rngs=rngs)
            self.activation = "sigmoid"

        def __call__(self, x):
            return self.layers[1](jax.nn.sigmoid(self.norm(self.layers[0](x))))

    with pytest.raises(ValueError, match="'norm' .*LayerNorm"):
        jf.compress_model(WithNorm(nnx.Rngs(0)), order=2)

    class Relu(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])
            self.activation = jax.nn.relu

    with pytest.raises(ValueError, match="not analytic"):
        jf.compress_model(Relu(nnx.Rngs(0)), order=2)

    class Lies(nnx.Module):  # declares sigmoid, computes tanh: must not be silently wrong
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])
            self.activation = "sigmoid"

        def __call__(self, x):
            return self.layers[1](jnp.tanh(self.layers[0](x)))

    with pytest.raises(ValueError, match="output differs"):
        jf.compress_model(Lies(nnx.Rngs(0)), order=2)

    class NoAct(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 8, rngs=rngs), nnx.Linear(8, 1, rngs=rngs)])

    with pytest.raises(ValueError, match="declares no activation"):
        jf.compress_model(NoAct(nnx.Rngs(0)), order=2)

    class Conv(nn.Module):
        @nn.compact
        def __call__(self, x):
            scale = self.param("scale", nn.initializers.ones, (1, 4), jnp.float32)
            return nn.Dense(1)(nn.sigmoid(nn.Dense(4)(x)) * scale)

    bad_vars = Conv().init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.float32))
    with pytest.raises(ValueError, match="scale"):
        jf.compress_model(bad_vars, module=Conv(), order=2, activation="sigmoid")
    with pytest.raises(ValueError, match="module="):
        jf.compress_model(bad_vars, order=2)
    with pytest.raises(TypeError):
        jf.compress_model([1, 2, 3], order=2)


def test_from_params_builds_models_for_loaded_files(tmp_path):
    params = jc.init_mlp(jax.random.PRNGKey(0), [3, 12, 7, 2])
    model = jf.from_params(params, activation="silu")
    np.testing.assert_allclose(model(X[:, :1].repeat(3, axis=1)),
                               jc.apply(params, X[:, :1].repeat(3, axis=1), activation="silu"),
                               rtol=1e-13)
    module, variables = jf.from_params(params, activation="silu", api="linen")
    x3 = jnp.ones((4, 3))
    np.testing.assert_allclose(module.apply(variables, x3), jc.apply(params, x3,
                                                                     activation="silu"),
                               rtol=1e-13)


def test_default_method_is_the_best_of_both_and_says_which_won(capsys):
    model = jf.MLP([2, 32, 32, 1], activation="tanh", rngs=nnx.Rngs(2), param_dtype=jnp.float64)
    res = jf.compress_model(model, order=3, verbose=True)
    assert res.info.choice is not None and len(res.info.candidates) == 2
    out = capsys.readouterr().out
    assert "best of: derivative_matching" in out and "[won 1]" in out
    # exactly these two candidates (that best_of keeps the smaller estimate is
    # tests/test_methods.py::test_best_of_keeps_the_smaller_error_estimate_per_teacher)
    assert res.info.candidates == (jc.derivative_matching(3).describe(),
                                   jc.collocation(3).describe())
    assert res.info.method == jc.best_of(jc.derivative_matching(3), jc.collocation(3)).describe()
