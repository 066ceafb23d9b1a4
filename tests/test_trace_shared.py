"""A neuron is one neuron wherever it is read: a network called more than once inside ``fn``
(``f(x) + f(-x)``, ``f(x) - f(x0)``, two outputs of two calls) computes each group at several
*sites*; keeping neurons slices every site and each reader is re-weighted to fit all of them
(their features stacked). A per-neuron activation parameter read twice (Snake) is one
parameter. What still cannot be compressed says why."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from user_nets import ensemble as _ensemble
from user_nets import mlp
from user_nets import rel_l2 as _rel

import jaxcompress as jc

pytestmark = pytest.mark.usefixtures("user_broadcasting")

X = jnp.zeros((4, 2), jnp.float64)
BALL = jc.Ball(2, 1.0)
X0 = jnp.array([[0.3, -0.2]])


def _call(module, x):
    """An nnx module's ``module(x)``, compiled as one program (not op by op)."""
    from flax import nnx

    return nnx.jit(lambda m, x: m(x))(module, x)


@pytest.fixture(scope="module")
def params():
    return jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1], dtype=jnp.float64)


SHAPES = {
    "even, f(x) + f(-x)": lambda p, x: mlp(p, x) + mlp(p, -x),
    "anchored, f(x) - f(x0)": lambda p, x: mlp(p, x) - mlp(p, X0),
    "two outputs of two calls": lambda p, x: (mlp(p, x), 2.0 * mlp(p, x)),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_network_called_twice_is_one_network_compressed_at_every_site(params, name):
    fn = SHAPES[name]
    net = jc.trace(fn, params, X)
    assert [len(g.sites) for g in net.groups] == [2, 2, 2]
    assert [g.width for g in net.compressible] == [24, 24]
    assert "computed at 2 sites" in str(net)
    small, info = jc.compress(net, jc.collocation(4), domain=BALL)
    assert small.layer_sizes() == [2, 15, 15, 1]
    # the user's own fn on the smaller leaves, as accurate as the plain network's compression
    plain, _ = jc.compress(params, jc.collocation(4), activation="tanh", domain=BALL)
    assert _rel(jax.jit(fn), params, small.params) <= max(5e-2, 4 * _rel(jax.jit(mlp), params,
                                                                          plain))
    np.testing.assert_allclose(small(X0), jax.jit(fn)(small.params, X0))


def test_sites_are_fitted_together_not_one_after_the_other(params):
    """The readers fit the stacked features of both sites: compressing ``f(x) + f(-x)`` from
    the features of ``f(x)`` alone (the plain network's) fits the odd part worse."""
    fn = SHAPES["even, f(x) + f(-x)"]
    small, _ = jc.compress(jc.trace(fn, params, X), jc.collocation(3), domain=BALL)
    only_one, _ = jc.compress(jc.trace(mlp, params, X), jc.collocation(3), domain=BALL)
    both, one = _rel(jax.jit(fn), params, small.params), _rel(jax.jit(fn), params,
                                                               only_one.params)
    assert small.layer_sizes() == only_one.layer_sizes()
    assert both < one


def test_a_per_neuron_parameter_read_twice_is_sliced_once():
    """Snake, ``u + sin(a u)^2 / a`` with a learned ``a`` per neuron: ``a`` read twice is one
    per-neuron parameter of the group."""
    k = jax.random.split(jax.random.PRNGKey(3), 6)
    p = {"l0": {"kernel": draws.normal(k[0], (2, 16)), "bias": 0.1 * draws.normal(
        k[1], (16,)), "a": 1 + draws.uniform(k[2], (16,))},
         "l1": {"kernel": draws.normal(k[3], (16, 16)) / 4, "bias": jnp.zeros(16),
                "a": 1 + draws.uniform(k[4], (16,))},
         "out": {"kernel": draws.normal(k[5], (16, 1)) / 4}}

    def snake(u, a):
        return u + jnp.sin(a * u) ** 2 / a

    def fn(p, x):
        h = snake(x @ p["l0"]["kernel"] + p["l0"]["bias"], p["l0"]["a"])
        h = snake(h @ p["l1"]["kernel"] + p["l1"]["bias"], p["l1"]["a"])
        return h @ p["out"]["kernel"]

    net = jc.trace(fn, p, X)
    assert [g.width for g in net.compressible] == [16, 16]
    assert [len(g.scales) for g in net.compressible] == [1, 1]
    small, _ = jc.compress(net, jc.collocation(3), domain=BALL)
    assert small.params["l1"]["a"].shape == (10,)
    assert _rel(jax.jit(fn), p, small.params) <= 5e-2


def test_a_leaf_also_read_outside_the_network_stays_pinned(params):
    """Sites explain reads as weights; a read that is not one still pins, named."""
    def fn(p, x):
        return mlp(p, x) + mlp(p, -x) + jnp.sum(p[0]["bias"])

    net = jc.trace(fn, params, X)
    assert "the leaf [0]['bias'] is read 3 times, 1 of them other than as this network's " \
           "weights" in str(net)
    assert [g.width for g in net.compressible] == [24]


def test_a_site_that_does_not_depend_on_x_alone_pins(params):
    """``f(x0)`` alone (no site on ``x``): nothing to match on the domain."""
    net = jc.trace(lambda p, x: mlp(p, X0) + 0.0 * x[:, :1], params, X)
    assert not net.compressible
    assert "does not depend on the input x" in str(net)


def _bn_stats(key, n):
    k1, k2 = jax.random.split(key)
    return 0.1 * draws.normal(k1, (n,)), 0.5 + draws.uniform(k2, (n,))


@pytest.fixture
def user_promotion():
    """Flax computes BatchNorm under JAX's default dtype promotion."""
    with jax.numpy_dtype_promotion("standard"):
        yield


@pytest.mark.usefixtures("user_promotion")
def test_batchnorm_in_eval_mode_is_sliced_with_its_channels_nnx():
    """nnx ``BatchNorm(use_running_average=True)``: the running mean and variance are leaves
    (``nnx.BatchStat``) sliced with their channels, like the bias; ``scale * rsqrt(var +
    eps)`` is one number per neuron; the module comes back with ``num_features`` set."""
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(2, 16, rngs=rngs, param_dtype=jnp.float64)
            self.bn = nnx.BatchNorm(16, use_running_average=True, rngs=rngs,
                                    param_dtype=jnp.float64)
            self.l2 = nnx.Linear(16, 1, rngs=rngs, param_dtype=jnp.float64)

        def __call__(self, x):
            return self.l2(jnp.tanh(self.bn(self.l1(x))))

    model = Model(nnx.Rngs(0))
    mean, var = _bn_stats(jax.random.PRNGKey(5), 16)
    dtype = model.bn.mean[...].dtype
    model.bn.mean[...], model.bn.var[...] = mean.astype(dtype), var.astype(dtype)
    mnet = jc.trace_module(model, X)
    (g,) = mnet.as_network().compressible
    assert len(g.scales) == 4               # mean, var, scale, bias of the BatchNorm
    small, _ = jc.compress(mnet, jc.collocation(4), domain=BALL)
    pts = draws.uniform(jax.random.PRNGKey(1), (256, 2), jnp.float64, -0.7, 0.7)
    y = np.asarray(_call(model, pts))
    assert np.linalg.norm(np.asarray(small(pts)) - y) / np.linalg.norm(y) <= 5e-2
    module = small.module
    assert module.bn.num_features == 15 and module.bn.mean[...].shape == (15,)
    np.testing.assert_allclose(_call(module, pts), small(pts), rtol=1e-12, atol=1e-12)


@pytest.mark.usefixtures("user_promotion")
def test_batchnorm_in_eval_mode_is_sliced_with_its_channels_linen():
    """linen ``BatchNorm(use_running_average=True)``: ``batch_stats`` are variables."""
    from collections.abc import Sequence

    import flax.linen as nn

    class Model(nn.Module):
        features: Sequence[int] = (16,)

        @nn.compact
        def __call__(self, x):
            h = nn.Dense(self.features[0], param_dtype=jnp.float64)(x)
            h = jnp.tanh(nn.BatchNorm(use_running_average=True, param_dtype=jnp.float64)(h))
            return nn.Dense(1, param_dtype=jnp.float64)(h)

    model = Model()
    variables = jax.jit(model.init)(jax.random.PRNGKey(0), X)
    mean, var = _bn_stats(jax.random.PRNGKey(6), 16)
    variables = {"params": variables["params"],
                 "batch_stats": {"BatchNorm_0": {"mean": mean, "var": var}}}
    small, _ = jc.compress(jc.trace_module(model, X, variables=variables), jc.collocation(4),
                           domain=BALL)
    pts = draws.uniform(jax.random.PRNGKey(1), (256, 2), jnp.float64, -0.7, 0.7)
    y = np.asarray(jax.jit(model.apply)(variables, pts))
    assert np.linalg.norm(np.asarray(small(pts)) - y) / np.linalg.norm(y) <= 5e-2
    assert small.module.features == (15,)
    assert small.params["batch_stats"]["BatchNorm_0"]["var"].shape == (15,)


def ensemble_mean(p, x):
    """A deep ensemble: ``jax.vmap`` over the members' stacked parameters, then the mean."""
    return jax.vmap(mlp, in_axes=(0, None))(p, x).mean(0)


def test_a_vmapped_ensemble_keeps_one_width_with_each_members_own_neurons():
    """``jax.vmap`` over stacked parameters: the trace reads the members one by one from the
    jaxpr (slice ``i`` of every stacked leaf), each member's layers are groups of their own,
    and the stack keeps one width (each member selecting its own neurons, as a scan's layers
    do); the user's ``fn`` runs its ``vmap`` on the smaller stack (the other spellings of
    ``vmap`` and the refusals: tests/test_trace_ensemble.py)."""
    p = _ensemble(jax.random.PRNGKey(4), 4, [2, 24, 24, 1])
    net = jc.trace(ensemble_mean, p, X)
    assert len(net.compressible) == 8 and len(net.plan().sets) == 2
    assert "a stack under scan or vmap" in str(net)
    small, _ = jc.compress(net, jc.collocation(4), domain=BALL)
    assert small.params[1]["kernel"].shape == (4, 15, 15)
    assert small.params[2]["kernel"].shape == (4, 15, 1)
    np.testing.assert_allclose(small(X0), jax.jit(ensemble_mean)(small.params, X0))
    assert _rel(jax.jit(ensemble_mean), p, small.params) <= 5e-2
    members = [jax.tree.map(lambda a, i=i: np.asarray(a)[i], p) for i in range(4)]
    kept = {tuple(np.asarray(small.params[0]["bias"])[i]) for i in range(4)}
    assert len(kept) == 4, "each member keeps its own neurons"
    assert all(m[0]["kernel"].shape == (2, 24) for m in members)
