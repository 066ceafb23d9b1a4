"""Every kind of network answers one protocol: layer sizes and parameter counts
of a params list, a traced network or module, a compressed result, a loaded file; the result
family exposes the same attributes; pinned groups point at the user's own line; records print
short."""

import draws
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jaxcompress as jc

X = jnp.zeros((4, 2), jnp.float32)
BALL = jc.Ball(2, 1.0)


def _tanh_mlp(p, x):
    return jc.apply(p, x, activation="tanh")


@pytest.fixture(scope="module")
def module_result():
    model = nnx.Sequential(nnx.Linear(2, 24, rngs=nnx.Rngs(0)), jnp.tanh,
                           nnx.Linear(24, 20, rngs=nnx.Rngs(1)), jnp.tanh,
                           nnx.Linear(20, 1, rngs=nnx.Rngs(2)))
    mnet = jc.trace_module(model, X)
    small, info = jc.compress(mnet, jc.collocation(3), domain=BALL)
    return model, mnet, small, info


def test_sizes_and_counts_of_every_kind(module_result, tmp_path):
    model, mnet, small, _ = module_result
    assert jc.layer_sizes(mnet) == jc.layer_sizes(mnet.network) == [2, 24, 20, 1]
    n_teacher = sum(int(np.size(a)) for a in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert jc.num_params(mnet) == jc.num_params(mnet.network) == n_teacher == 2*24+24+24*20+20+21
    assert jc.layer_sizes(small) == jc.layer_sizes(small.compressed) == [2, 10, 10, 1]
    assert jc.num_params(small) == jc.num_params(small.compressed) == 2*10+10+10*10+10+11
    jc.save(tmp_path / "m.jcz", small)
    loaded = jc.load(tmp_path / "m.jcz")
    assert jc.layer_sizes(loaded) == [2, 10, 10, 1] and jc.num_params(loaded) == 151
    # a params list, traced and not, compressed and loaded
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 12, 3])
    net = jc.trace(_tanh_mlp, params, jnp.zeros((4, 2)))
    assert jc.layer_sizes(net) == jc.layer_sizes(params) == [2, 16, 12, 3]
    assert jc.num_params(net) == jc.num_params(params) == 2*16+16+16*12+12+12*3+3
    tsmall, _ = jc.compress(net, jc.collocation(2), domain=BALL)
    assert jc.layer_sizes(tsmall) == [2, 6, 6, 3]
    jc.save(tmp_path / "p.jcz", params, activation="tanh")
    assert jc.layer_sizes(jc.load(tmp_path / "p.jcz")) == [2, 16, 12, 3]
    assert jc.num_params(jc.load(tmp_path / "p.jcz")) == jc.num_params(params)
    for junk in ("abc", 3, [1, 2], {"kernel": 1}):
        with pytest.raises(TypeError, match="layer_sizes: expected a params list"):
            jc.layer_sizes(junk)
        with pytest.raises(TypeError, match="layer_sizes: expected a params list"):
            jc.num_params(junk)


def test_every_kind_is_callable_and_answers_one_protocol(module_result, tmp_path):
    """net(x) for every kind (a traced Network too) and jc.load(path)(x) for every file; each
    answers as_network(), its sizes and its params, and measures as a function."""
    from jaxcompress.protocol import NetworkLike

    model, mnet, small, _ = module_result
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 12, 3], dtype=jnp.float32)
    x = BALL.sobol(16, dtype=jnp.float32)
    net = jc.trace(_tanh_mlp, params, X)
    tsmall, _ = jc.compress(net, jc.collocation(2), domain=BALL)
    jc.save(tmp_path / "chain.jcz", params, activation="tanh")
    jc.save(tmp_path / "traced.jcz", tsmall)
    jc.save(tmp_path / "module.jcz", small)
    want = {"params list": _tanh_mlp(params, x), "traced": _tanh_mlp(params, x),
            "compressed": _tanh_mlp(tsmall.params, x), "module": model(x),
            "compressed module": small.module(x)}
    kinds = {"params list": jc.Network.from_params(params, "tanh"), "traced": net,
             "compressed": tsmall, "module": mnet, "compressed module": small}
    loaded = {"params list": jc.load(tmp_path / "chain.jcz"),
              "compressed": jc.load(tmp_path / "traced.jcz"),
              "compressed module": jc.load(tmp_path / "module.jcz")}
    for name, obj in [*kinds.items(), *((f"loaded {k}", v) for k, v in loaded.items())]:
        expected = want[name.removeprefix("loaded ")]
        assert isinstance(obj, NetworkLike), name
        np.testing.assert_allclose(obj(x), expected, rtol=1e-5, atol=1e-6, err_msg=name)
        fn, p = obj.function()
        np.testing.assert_allclose(fn(p, x), expected, rtol=1e-5, atol=1e-6, err_msg=name)
        assert jc.layer_sizes(obj)[0] == 2 and jc.num_params(obj) > 0, name
        if name != "loaded compressed module":      # a chain of dense layers is stored
            assert isinstance(obj.as_network(), jc.Network), name
    assert jc.load(tmp_path / "traced.jcz").info is not None
    with pytest.raises(TypeError, match="not a .params, activation, metadata. triple"):
        _, _, _ = jc.load(tmp_path / "traced.jcz")


def test_a_non_chain_network_counts_every_group_and_leaf():
    def fn(p, x):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        h = jnp.tanh(jnp.concatenate([h, x], axis=-1) @ p["w2"] + p["b2"])
        return h @ p["w3"] + p["s"] * p["b3"]

    k = jax.random.split(jax.random.PRNGKey(0), 3)
    p = {"w1": draws.normal(k[0], (2, 14)), "b1": jnp.ones(14),
         "w2": draws.normal(k[1], (16, 12)), "b2": jnp.ones(12),
         "w3": draws.normal(k[2], (12, 1)), "b3": jnp.ones(1), "s": jnp.ones(())}
    with jax.numpy_rank_promotion("allow"):
        net = jc.trace(fn, p, jnp.zeros((4, 2)))
        small, _ = jc.compress(net, jc.collocation(2), domain=BALL)
    assert jc.layer_sizes(net) == [2, 14, 12, 1]
    assert jc.num_params(net) == 2*14 + 14 + 16*12 + 12 + 12 + 1 + 1
    assert jc.layer_sizes(small) == [2, 6, 6, 1]
    assert jc.num_params(small) == 2*6 + 6 + 8*6 + 6 + 6 + 1 + 1


def test_the_result_family_has_the_same_attributes(module_result):
    _, _, small, _ = module_result
    comp = small.compressed
    for result in (small, comp):
        assert result.polymorphic is True and result.why == ""
        np.testing.assert_array_equal(result(X), comp.fn(result.params, X))
    assert type(small.module).__name__ == "Sequential"
    with pytest.raises(AttributeError, match=r"traced from a function \(jc.trace\).*"
                                             r"jc.trace_module"):
        comp.module  # noqa: B018


def test_a_linen_result_says_why_fn_did_not_run_on_the_smaller_params():
    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(jnp.tanh(nn.Dense(24)(x)))   # widths are literals

    model = MLP()
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), X)
    small, _ = jc.compress(jc.trace_module(model, X, variables=variables), jc.collocation(3),
                           domain=BALL)
    # fn runs at the new widths (each Dense reads its features off its kernel); the module
    # cannot be rebuilt, and the result says why
    assert small.polymorphic and "cannot rebuild MLP with the new widths" in small.module_why
    assert jc.layer_sizes(small) == [2, 10, 1]


def test_pinned_groups_point_at_the_users_line_not_into_flax():
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Linear(2, 16, rngs=rngs)
            self.n = nnx.LayerNorm(16, rngs=rngs)
            self.b = nnx.Linear(16, 1, rngs=rngs)

        def __call__(self, x):
            return self.b(jnp.tanh(self.n(self.a(x))))

    class Linen(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(jnp.tanh(nn.LayerNorm()(nn.Dense(16)(x))))

    lin = Linen()
    for mnet in (jc.trace_module(Net(nnx.Rngs(0)), X),
                 jc.trace_module(lin, X, variables=jax.jit(lin.init)(jax.random.PRNGKey(0),
                                                                      X))):
        lines = [line for g in mnet.network.groups for _, line in g.pins]
        assert lines and all("test_networks.py" in line for line in lines), lines
        assert "flax" not in str(mnet).split("module:")[0].replace("flax.", "")


def test_polish_history_prints_a_summary():
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 1])
    small, info = jc.compress(teacher, jc.collocation(2), activation="tanh")
    _, history = jc.polish(small, teacher, activation="tanh", domain=BALL, steps=7)
    text = repr(history)
    assert text == str(history) and len(text) < 400 and "\n" not in text
    assert text.startswith("PolishHistory(7 steps, default optimizer, ")
    assert "best step" in text and "error estimate" in text and "->" in text
    assert history.loss.shape == (7,)            # the arrays stay attributes
