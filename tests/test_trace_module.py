"""jc.trace_module: nnx, linen and Equinox modules traced, compressed and
rebuilt as modules of the same class; jc.save / jc.load of a compressed traced network."""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from user_nets import GeluNet

import jaxcompress as jc
from jaxcompress.measure import error_points
from jaxcompress.modules import _eqx_rebuild

X = jnp.zeros((4, 2), jnp.float32)
BALL = jc.Ball(2, 1.0)
METHOD = jc.collocation(4)          # D_4 = 15 features in 2-D: [2, 24, 24, 1] -> [2, 15, 15, 1]
PTS = error_points(BALL, dtype=jnp.float32)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)




@pytest.fixture(scope="module")
def nnx_small():
    model = GeluNet([2, 24, 24, 1], nnx.Rngs(0))
    mnet = jc.trace_module(model, X)
    small, info = jc.compress(mnet, METHOD, domain=BALL)
    return model, mnet, small, info


def test_nnx_custom_call(nnx_small):
    model, mnet, small, info = nnx_small
    assert mnet.kind == "nnx" and not mnet.per_example
    assert "module: GeluNet (nnx), applied to the batch" in str(mnet)
    assert info.activation == "gelu_tanh"
    new = small.module
    assert type(new) is GeluNet
    assert [(lin.in_features, lin.out_features) for lin in new.layers] == [(2, 15), (15, 15),
                                                                          (15, 1)]
    assert new.layers[1].kernel[...].shape == (15, 15)
    # the modules run in one jitted program each (op by op, every operation and shape of their
    # __call__ compiled a program of its own), and the difference on the host
    y = np.asarray(jax.jit(new)(PTS))
    _close(y, small(PTS))
    # the teacher is untouched, and the module is built once
    assert model.layers[0].out_features == 24 and small.module is new
    _close(np.max(np.abs(y - np.asarray(jax.jit(model)(PTS)))), info.error_estimate)


class CompactMLP(nn.Module):
    features: Sequence[int]

    @nn.compact
    def __call__(self, x):
        for f in self.features[:-1]:
            x = jnp.tanh(nn.Dense(f)(x))
        return nn.Dense(self.features[-1])(x)


def test_linen_compact_features_field():
    model = CompactMLP((24, 24, 1))
    variables = model.init(jax.random.PRNGKey(0), X)
    small, info = jc.compress(jc.trace_module(model, X, variables=variables), METHOD,
                              domain=BALL)
    new = small.module
    assert type(new) is CompactMLP and new.features == (15, 15, 1)
    _close(jax.jit(new.apply)(small.params, PTS), small(PTS))


class SetupMLP(nn.Module):
    """Setup-style: each Dense made in setup, widths from one int field and a depth."""

    width: int = 24
    depth: int = 2
    d_out: int = 1

    def setup(self):
        self.hidden = [nn.Dense(self.width) for _ in range(self.depth)]
        self.head = nn.Dense(self.d_out)

    def __call__(self, x):
        for layer in self.hidden:
            x = jax.nn.sigmoid(layer(x))
        return self.head(x)


def test_linen_setup_style():
    model = SetupMLP()
    variables = model.init(jax.random.PRNGKey(1), X)
    mnet = jc.trace_module(model, X, variables=variables)
    small, _ = jc.compress(mnet, METHOD, domain=BALL)
    new = small.module
    assert (new.width, new.depth, new.d_out) == (15, 2, 1)
    _close(jax.jit(new.apply)(small.params, PTS), small(PTS))


class SetupFourier(nn.Module):
    """A trainable Fourier matrix built in ``setup`` (sin and cos of ``n_freq`` features): not a
    chain, so compressed group by group and ``fn`` re-traced at every new width."""

    n_freq: int = 12
    widths: Sequence[int] = (24, 24)

    def setup(self):
        self.B = self.param("B", nn.initializers.normal(1.0), (2, self.n_freq), jnp.float32)
        self.hidden = [nn.Dense(w) for w in self.widths]
        self.out = nn.Dense(1)

    def __call__(self, x):
        z = x @ self.B
        h = jnp.concatenate([jnp.sin(z), jnp.cos(z)], -1)
        for layer in self.hidden:
            h = jnp.tanh(layer(h))
        return self.out(h)


def test_linen_setup_module_is_rebuilt_at_every_width_it_is_traced_at():
    """Was Flax's raw ScopeParamShapeError: the module is rebuilt with the new sizes (the
    Fourier axis is twice ``n_freq`` wide in the next kernel) before ``fn`` is re-traced."""
    model = SetupFourier()
    variables = model.init(jax.random.PRNGKey(4), X)
    mnet = jc.trace_module(model, X, variables=variables)
    small, _ = jc.compress(mnet, jc.collocation(3), domain=BALL)
    new = small.module
    assert (new.n_freq, tuple(new.widths)) == (10, (10, 10))
    assert small.params["params"]["hidden_0"]["kernel"].shape == (20, 10)
    _close(jax.jit(new.apply)(small.params, PTS), small(PTS))


class Literal(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(jnp.tanh(nn.Dense(24)(jnp.tanh(nn.Dense(24)(x)))))


def test_linen_without_size_fields_says_what_is_missing():
    model = Literal()
    variables = model.init(jax.random.PRNGKey(2), X)
    small, _ = jc.compress(jc.trace_module(model, X, variables=variables), METHOD, domain=BALL)
    with pytest.raises(ValueError, match=r"cannot rebuild Literal.*24 -> 15.*set by no field"
                                         r".*small.params and small\(x\) still work"):
        _ = small.module
    assert small.params["params"]["Dense_1"]["kernel"].shape == (15, 15)
    assert small(PTS).shape == (PTS.shape[0], 1)


class Gated(nn.Module):
    """A gated MLP (jaxpi's modified MLP): every hidden width must equal the gates' ``u`` and
    ``v``, so no entry of ``layers`` can change alone; ``literal`` writes the widths as
    ``nn.Dense(24)`` instead (no field sets them)."""

    layers: Sequence[int] = (24, 24)
    literal: bool = False

    @nn.compact
    def __call__(self, x):
        def dense(w):
            return nn.Dense(24 if self.literal else w)

        u = jnp.tanh(dense(self.layers[0])(x))
        v = jnp.tanh(dense(self.layers[0])(x))
        for w in self.layers:
            h = jnp.tanh(dense(w)(x))
            x = h * u + (1 - h) * v
        return nn.Dense(1)(x)


def _plain_gated(p, x):
    """Gated's function on its variables, written out (what jc.trace compresses)."""
    def dense(name, z):
        return z @ p["params"][name]["kernel"] + p["params"][name]["bias"][None]

    u, v = jnp.tanh(dense("Dense_0", x)), jnp.tanh(dense("Dense_1", x))
    for i in (2, 3):
        h = jnp.tanh(dense(f"Dense_{i}", x))
        x = h * u + (1 - h) * v
    return dense("Dense_4", x)


def test_linen_tied_widths_are_one_field_and_literal_widths_still_compress():
    """Equal widths are one unknown: a gated MLP's ``layers`` is solved as one value and the
    module rebuilt with it. With its widths literal, the module cannot be rebuilt, and
    ``compress`` still returns the same smaller params and function (each ``nn.Dense`` reads its
    width off its kernel), with ``small.module`` raising why and ``small.module_why`` saying
    it. Both match the same network traced as a plain function."""
    variables = Gated().init(jax.random.PRNGKey(5), X)
    ref, _ = jc.compress(jc.trace(_plain_gated, variables, X), METHOD, domain=BALL)
    want = np.asarray(ref(PTS))
    small, _ = jc.compress(jc.trace_module(Gated(), X, variables=variables), METHOD, domain=BALL)
    assert small.layer_sizes() == ref.layer_sizes() == [2, 15, 15, 15, 15, 1]
    assert small.module.layers == (15, 15) and small.module_why == ""
    _close(jax.jit(small.module.apply)(small.params, PTS), want)
    literal = Gated(literal=True)
    small, _ = jc.compress(jc.trace_module(literal, X, variables=variables), METHOD, domain=BALL)
    assert small.polymorphic and small.layer_sizes() == ref.layer_sizes()
    _close(small(PTS), want)
    with pytest.raises(ValueError, match=r"cannot rebuild Gated.*24 -> 15.*set by no field"
                                         r".*small.params and small\(x\) still work"):
        _ = small.module
    assert "cannot rebuild Gated" in small.module_why


class Shared(nn.Module):
    """One width field for two layers."""

    width: int = 24

    @nn.compact
    def __call__(self, x):
        x = jnp.tanh(nn.Dense(self.width)(x))
        x = jnp.tanh(nn.Dense(self.width)(x))
        return nn.Dense(1)(x)


def test_linen_one_field_two_widths_is_refused():
    model = Shared()
    variables = model.init(jax.random.PRNGKey(3), X)
    mnet = jc.trace_module(model, X, variables=variables)
    small, _ = jc.compress(mnet, jc.collocation(4, widths=(12, 9)), domain=BALL)
    with pytest.raises(ValueError, match="field width of Shared sets widths that were "
                                         "compressed differently"):
        _ = small.module


def test_wrong_arguments():
    with pytest.raises(TypeError, match="needs variables="):
        jc.trace_module(CompactMLP((4, 1)), X)
    with pytest.raises(TypeError, match="variables= is for a linen module"):
        jc.trace_module(GeluNet([2, 4, 1], nnx.Rngs(0)), X, variables={})
    with pytest.raises(TypeError, match="model must be a flax.nnx.Module.*got function"):
        jc.trace_module(lambda x: x, X)
    # a module of another system: the refusal says how to trace it (docs/trace.md's example)
    with pytest.raises(TypeError, match=r"two-line split / merge wrapper.*tree_flatten\(model\)"
                                        r".*jc\.trace\(fn, params, x\)"):
        jc.trace_module(object(), X)
    with pytest.raises(ValueError, match="takes neither one example of shape \\(3,\\)"):
        jc.trace_module(GeluNet([2, 4, 1], nnx.Rngs(0)), jnp.zeros((4, 3)))


def _eqx_mlp(eqx):
    return eqx.nn.MLP(2, 1, 24, 2, activation=jnp.tanh, dtype=jnp.float32,
                      key=jax.random.PRNGKey(0))


def test_equinox_rebuild_from_compressed_arrays():
    """The Equinox rebuild on its own (independent of the graph's vmap support): the arrays of
    the params-convention compression put into the MLP's partition, then eqx.combine and the
    static fields."""
    eqx = pytest.importorskip("equinox")
    model = _eqx_mlp(eqx)
    mnet = jc.trace_module(model, X)
    assert mnet.kind == "equinox" and mnet.per_example
    arrays, static = eqx.partition(model, eqx.is_array)
    # transposed on the host (on the device: a program per shape)
    params = [{"kernel": jax.device_put(np.asarray(lin.weight).T), "bias": lin.bias}
              for lin in model.layers]
    small, _ = jc.compress(params, jc.collocation(4, widths=(15, 12)), activation="tanh",
                           domain=BALL)
    leaves = [a for p in small for a in (jax.device_put(np.asarray(p["kernel"]).T), p["bias"])]
    arrays = eqx.tree_at(lambda a: [v for lin in a.layers for v in (lin.weight, lin.bias)],
                         arrays, leaves)
    new = _eqx_rebuild(arrays, static)
    assert type(new) is type(model)
    assert [(lin.in_features, lin.out_features) for lin in new.layers] == [(2, 15), (15, 12),
                                                                          (12, 1)]
    assert new.width_size == 15            # the widths differ: the largest
    assert model.width_size == 24 and model.layers[0].out_features == 24
    _close(jax.jit(jax.vmap(new))(PTS), jc.apply(small, PTS, activation="tanh"))


def test_equinox_mlp():
    eqx = pytest.importorskip("equinox")
    model = _eqx_mlp(eqx)
    small, _ = jc.compress(jc.trace_module(model, X), METHOD, domain=BALL)
    new = small.module
    assert [(lin.in_features, lin.out_features) for lin in new.layers] == [(2, 15), (15, 15),
                                                                          (15, 1)]
    assert new.width_size == 15
    _close(jax.jit(jax.vmap(new))(PTS), small(PTS))


def test_save_load_module(tmp_path, nnx_small):
    _, _, small, info = nnx_small
    path = tmp_path / "small.jcz"
    jc.save(path, small, metadata={"task": "test"})
    loaded = jc.load(path)
    assert isinstance(loaded, jc.LoadedNetwork) and loaded.params_are_inputs
    assert list(loaded.params)[:2] == ["['layers'][0]['bias'].value",
                                       "['layers'][0]['kernel'].value"]
    assert loaded.params["['layers'][1]['kernel'].value"].shape == (15, 15)
    assert loaded.metadata["task"] == "test"
    assert loaded.info.activation == "gelu_tanh"
    np.testing.assert_array_equal(loaded.info.layers[0].kept, info.layers[0].kept)
    pts = np.asarray(PTS)                   # cut on the host
    for n in (1, 7, PTS.shape[0]):          # a symbolic batch: any n
        _close(loaded(pts[:n]), small(pts[:n]))
    # a corrupted program is an error, not another function
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    bad = tmp_path / "bad.jcz"
    bad.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="not a valid jaxcompress model file"):
        jc.load(bad)


def test_save_load_traced_function(tmp_path):
    """A plain Compressed from jc.trace (its network knows the input shape; x= is checked
    against it); a linen module, rebuilt or not, runs on the smaller leaves and is stored
    with them as its program's inputs."""
    params = jc.init_mlp(jax.random.PRNGKey(4), [2, 24, 24, 1], dtype=jnp.float32)
    net = jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"), params, X)
    small, info = jc.compress(net, METHOD, domain=BALL)
    with pytest.raises(ValueError, match=r"x must be example inputs of shape \(n, 2\)"):
        jc.save(tmp_path / "a.jcz", small, x=jnp.zeros((4, 3)))
    with pytest.raises(ValueError, match="expected no activation="):
        jc.save(tmp_path / "a.jcz", small, activation="tanh", x=X)
    jc.save(tmp_path / "a.jcz", small)
    loaded = jc.load(tmp_path / "a.jcz")
    assert loaded.params_are_inputs
    assert float(loaded.info.error_estimate) == float(info.error_estimate)
    _close(loaded(PTS), small(PTS))

    # a linen module with its widths in fields is rebuilt at the new widths: fn runs on them
    model = CompactMLP((24, 24, 1))
    small, _ = jc.compress(jc.trace_module(model, X, variables=model.init(
        jax.random.PRNGKey(5), X)), METHOD, domain=BALL)
    jc.save(tmp_path / "b.jcz", small)
    loaded = jc.load(tmp_path / "b.jcz")
    assert loaded.params_are_inputs
    _close(loaded(PTS), small(PTS))
    # one with literal widths cannot be rebuilt, but its fn runs on the smaller leaves too
    # (each nn.Dense reads its width off its kernel): stored with the leaves as inputs
    model = Literal()
    small, _ = jc.compress(jc.trace_module(model, X, variables=model.init(
        jax.random.PRNGKey(5), X)), METHOD, domain=BALL)
    jc.save(tmp_path / "c.jcz", small)
    loaded = jc.load(tmp_path / "c.jcz")
    assert loaded.params_are_inputs
    _close(loaded(PTS), small(PTS))


def test_a_module_with_several_heads_comes_back_with_them():
    """A linen module returning a dict of heads ({"sdf", "rgb"}: a NeRF-like field) is traced
    like jc.trace traces a dict output (it was refused, "expected one array"); the module comes
    back with its heads, every head within the compression's error."""
    from collections.abc import Sequence

    class Field(nn.Module):
        features: Sequence[int] = (24, 24)

        @nn.compact
        def __call__(self, x):
            h = x
            for f in self.features:
                h = jnp.tanh(nn.Dense(f)(h))
            return {"sdf": nn.Dense(1)(h), "rgb": nn.Dense(3)(h)}

    model = Field()
    variables = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 2), jnp.float32))
    net = jc.trace_module(model, jnp.zeros((4, 2), jnp.float32), variables=variables)
    assert jc.layer_sizes(net) == [2, 24, 24, 1, 3]
    small, info = jc.compress(net, jc.collocation(3), domain=jc.Ball(2, 1.0))
    assert small.module.features == (10, 10)
    x = jc.Ball(2, 1.0).sobol(64, dtype=jnp.float32)
    got = jax.jit(small.module.apply)(small.params, x)
    want = jax.jit(model.apply)(variables, x)
    assert set(got) == {"sdf", "rgb"} and got["rgb"].shape == (64, 3)
    worst = max(float(np.max(np.abs(np.asarray(got[k]) - np.asarray(want[k])))) for k in got)
    assert worst < 3 * float(info.error_estimate) + 1e-6


# --- a network inside a bigger model: trace_module(model, x, part=...) --------------------------

Y = jax.random.uniform(jax.random.PRNGKey(3), (64, 2), jnp.float32, -0.7, 0.7)


def _euler(field, y, steps=5, dt=0.1):
    """A neural ODE's solve, as the model's own ``__call__`` does it: ``steps`` Euler steps."""
    for _ in range(steps):
        y = y + dt * field(0.0, y)
    return y


class NnxField(nnx.Module):
    """A neural ODE's vector field ``f(t, y)``: an MLP inside."""

    def __init__(self, rngs):
        self.mlp = nnx.Sequential(nnx.Linear(2, 24, rngs=rngs), jnp.tanh,
                                  nnx.Linear(24, 24, rngs=rngs), jnp.tanh,
                                  nnx.Linear(24, 2, rngs=rngs))
        self.scale = nnx.Param(jnp.asarray(0.5, jnp.float32))

    def __call__(self, t, y):
        return self.scale[...] * self.mlp(y)


class NnxODE(nnx.Module):
    def __init__(self, rngs):
        self.func = NnxField(rngs)

    def __call__(self, y0):
        return _euler(self.func, y0)


def test_nnx_part_of_a_neural_ode_comes_back_in_the_whole_model():
    model = NnxODE(nnx.Rngs(0))
    mnet = jc.trace_module(model, X, part=lambda m: m.func.mlp)
    assert mnet.layer_sizes() == [2, 24, 24, 2] and mnet.within.model is model
    small, _ = jc.compress(mnet, METHOD, domain=BALL)
    whole = small.whole
    assert isinstance(whole, NnxODE) and whole.func.mlp is small.module
    assert whole.func.mlp.layers[2].in_features == 15
    assert model.func.mlp.layers[2].in_features == 24        # the model given is unchanged
    assert float(whole.func.scale[...]) == 0.5
    _close(whole.func.mlp(PTS), small(PTS))
    y, ys = np.asarray(model(Y)), np.asarray(whole(Y))
    assert np.max(np.abs(ys - y)) <= 1e-2 * np.max(np.abs(y))


class LinenMLP(nn.Module):
    features: Sequence[int] = (24, 24, 2)

    @nn.compact
    def __call__(self, y):
        for f in self.features[:-1]:
            y = jnp.tanh(nn.Dense(f)(y))
        return nn.Dense(self.features[-1])(y)


class LinenField(nn.Module):
    mlp: nn.Module

    def __call__(self, t, y):
        return self.mlp(y)


class LinenODE(nn.Module):
    func: nn.Module

    def __call__(self, y0):
        return _euler(self.func, y0)


def test_linen_part_of_a_neural_ode_comes_back_with_its_variables():
    model = LinenODE(LinenField(LinenMLP()))
    variables = model.init(jax.random.PRNGKey(0), X)
    mnet = jc.trace_module(model, X, variables=variables, part=lambda m: m.func.mlp)
    assert mnet.layer_sizes() == [2, 24, 24, 2]
    small, _ = jc.compress(mnet, METHOD, domain=BALL)
    whole, whole_vars = small.whole
    assert whole.func.mlp.features == (15, 15, 2) and model.func.mlp.features == (24, 24, 2)
    assert whole_vars["params"]["func"]["mlp"]["Dense_1"]["kernel"].shape == (15, 15)
    assert variables["params"]["func"]["mlp"]["Dense_1"]["kernel"].shape == (24, 24)
    y, ys = np.asarray(model.apply(variables, Y)), np.asarray(whole.apply(whole_vars, Y))
    assert np.max(np.abs(ys - y)) <= 1e-2 * np.max(np.abs(y))


def test_equinox_part_of_a_neural_ode_is_put_back_with_tree_at():
    eqx = pytest.importorskip("equinox", reason="equinox is not installed")

    class Func(eqx.Module):
        mlp: eqx.nn.MLP

        def __call__(self, t, y, args):
            return self.mlp(y)

    class NeuralODE(eqx.Module):
        func: Func

        def __call__(self, y0):
            return _euler(lambda t, y: self.func(t, y, None), y0)

    mlp = eqx.nn.MLP(2, 2, 24, 2, activation=jnp.tanh, dtype=jnp.float32,
                     key=jax.random.PRNGKey(0))
    model = NeuralODE(Func(mlp))
    mnet = jc.trace_module(model, X, part=lambda m: m.func.mlp)
    assert mnet.per_example and mnet.layer_sizes() == [2, 24, 24, 2]
    small, _ = jc.compress(mnet, METHOD, domain=BALL)
    whole = small.whole
    assert isinstance(whole, NeuralODE) and whole.func.mlp.width_size == 15
    assert model.func.mlp.width_size == 24
    y, ys = np.asarray(jax.vmap(model)(Y)), np.asarray(jax.vmap(whole)(Y))
    assert np.max(np.abs(ys - y)) <= 1e-2 * np.max(np.abs(y))
    # compressed again (the part traced again at its new widths), still a part of the model
    smaller, _ = jc.compress(small, jc.collocation(3), domain=BALL)
    assert smaller.whole.func.mlp.width_size == 10 and isinstance(smaller.whole, NeuralODE)


def test_a_part_that_is_not_there_or_no_part_at_all_is_said():
    model = NnxODE(nnx.Rngs(0))
    with pytest.raises(ValueError, match="part does not reach a sub-module of NnxODE"):
        jc.trace_module(model, X, part=lambda m: m.func.net)
    with pytest.raises(ValueError, match="part must only take attributes and indices"):
        jc.trace_module(model, X, part=lambda m: m.func.mlp(X))
    small, _ = jc.compress(jc.trace_module(model.func.mlp, X), METHOD, domain=BALL)
    with pytest.raises(ValueError, match="traced whole"):
        small.whole  # noqa: B018
    ode = LinenODE(LinenField(LinenMLP()))
    variables = ode.init(jax.random.PRNGKey(0), X)
    with pytest.raises(ValueError, match="made in setup or @nn.compact exists only while"):
        jc.trace_module(ode, X, variables=variables, part=lambda m: m.func.mlp.Dense_0)
    with pytest.raises(ValueError, match="variables\\['params'\\] has no entry func/mlp"):
        jc.trace_module(ode, X, variables={"params": {"other": {}}}, part=lambda m: m.func.mlp)
