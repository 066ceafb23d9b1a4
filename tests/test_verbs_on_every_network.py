"""One representation, one driver, every verb on every network.

A params list, a traced function, a traced module, a compressed result and a loaded file are
the same kind of object to every verb: compress, certify, compress_to_tolerance, sup_error,
error_estimate, shard, trim, save / load, the command line; jit, vmap and grad go through
compress of a traced network, chain or not; nothing writes the activation registry.
"""

import dataclasses
from typing import ClassVar

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

import jaxcompress as jc
import jaxcompress.flax as jf
from jaxcompress import cli
from jaxcompress.driver import run_jit

pytestmark = pytest.mark.usefixtures("user_broadcasting")

X = jnp.zeros((4, 2))
BALL = jc.Ball(2, 1.0)


def _skip(p, x):
    """A network that is not a chain: the input re-enters the middle layer."""
    h = jnp.tanh(x @ p[0]["kernel"] + p[0]["bias"])
    h = jnp.tanh(jnp.concatenate([h, x], -1) @ p[1]["kernel"] + p[1]["bias"])
    return h @ p[2]["kernel"] + p[2]["bias"]


def _skip_params(width=16, seed=1):
    k = jax.random.split(jax.random.PRNGKey(seed), 3)
    # (/ 4 on the host: on the device it compiled a program per shape)
    return [{"kernel": draws.normal(k[0], (2, width)), "bias": jnp.full((width,), 0.1)},
            {"kernel": jax.device_put(np.asarray(draws.normal(k[1], (width + 2, width))) / 4),
             "bias": jnp.full((width,), 0.1)},
            {"kernel": jax.device_put(np.asarray(draws.normal(k[2], (width, 1))) / 4),
             "bias": jnp.zeros(1)}]


def _tanh_mlp(p, x):
    return jc.apply(p, x, activation="tanh")


def test_a_params_list_is_a_network_built_without_tracing():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 12, 10, 1])
    net = jc.Network.from_params(params, "tanh")
    traced = jc.trace(_tanh_mlp, params, X)
    assert net.chain and traced.chain and net.kind == "params"
    assert jc.layer_sizes(net) == jc.layer_sizes(traced) == [2, 12, 10, 1]
    assert [g.width for g in net.compressible] == [g.width for g in traced.compressible]
    # the plan is cached by shapes: a second network of the same shapes compiles nothing new
    jc.compress(params, jc.derivative_matching(2), activation="tanh")
    before = run_jit._cache_size()
    other = jc.init_mlp(jax.random.PRNGKey(1), [2, 12, 10, 1])
    jc.compress(other, jc.derivative_matching(2), activation="tanh")
    assert run_jit._cache_size() == before
    assert net.plan() == jc.Network.from_params(other, "tanh").plan()


def test_a_traced_module_gets_the_certificate_of_its_params_list():
    model = jf.MLP([2, 32, 32, 1], activation="sigmoid", rngs=nnx.Rngs(0),
                   param_dtype=jnp.float64)
    params, act = jf.nnx_params(model)
    mnet = jc.trace_module(model, X)
    domain = jc.Ball(2, 0.5)
    r_list = jc.certify(params, activation=act, domain=domain, eps=1e-4)
    r_mod = jc.certify(mnet, domain=domain, eps=1e-4)
    assert r_list.to_dict() == r_mod.to_dict()
    # and of a compression of it, given as the Compressed result
    small, info = jc.compress(mnet, jc.derivative_matching(4, selector=jc.MaxVol()),
                              domain=domain)
    lsmall, linfo = jc.compress(params, jc.derivative_matching(4, selector=jc.MaxVol()),
                                activation=act, domain=domain)
    post = jc.certify(small, domain=domain, eps=1e-4)
    assert list(post.sizes) == [2, 15, 15, 1]
    full = jc.certify(mnet, domain=domain, eps=1e-4, compressed=small)
    ref = jc.certify(params, activation=act, domain=domain, eps=1e-4, compressed=lsmall,
                     info=linfo)
    assert full.a_posteriori_bound == pytest.approx(ref.a_posteriori_bound, rel=1e-12)
    with pytest.raises(ValueError, match=r"(?s)not one:.*group 2 does not read group 1"):
        jc.certify(jc.trace(_skip, _skip_params(), X), domain=domain, eps=1e-3)


def test_tolerance_search_on_a_traced_network_with_an_input_skip():
    net = jc.trace(_skip, _skip_params(), X)
    domain, eps = jc.Ball(2, 0.5), 1e-2
    res = jc.compress_to_tolerance(net, jc.MeasuredOrders(n_samples=256, local_search_steps=10),
                                   domain=domain, eps=eps)
    assert res.measured_error <= eps and isinstance(res.compressed, jc.Compressed)
    assert jc.num_params(res.compressed) < jc.num_params(net)
    again = float(jc.sup_error(net, res.compressed, domain=domain, key=jax.random.PRNGKey(3),
                               n_samples=2048))
    assert again <= 2 * eps
    with pytest.raises(ValueError, match="not one:"):
        jc.compress_to_tolerance(net, jc.Certified(), domain=domain, eps=eps)


def test_measurements_between_any_two_networks():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1])
    net = jc.trace(_tanh_mlp, params, X)
    small, info = jc.compress(net, jc.collocation(3), domain=BALL)
    est = jc.error_estimate(net, small, domain=BALL)
    np.testing.assert_allclose(est, info.error_estimate, rtol=1e-12)
    key = jax.random.PRNGKey(1)
    a = jc.sup_error(net, small, domain=BALL, key=key, n_samples=512)
    ref, _ = jc.compress(params, jc.collocation(3), activation="tanh", domain=BALL)
    b = jc.sup_error(params, ref, activation="tanh", domain=BALL, key=key, n_samples=512)
    c = jc.sup_error(lambda x: _tanh_mlp(params, x), small, domain=BALL, key=key,
                     n_samples=512)
    np.testing.assert_allclose([a, c], [b, b], rtol=1e-10)
    with pytest.raises(ValueError, match="outputs of shapes"):
        jc.sup_error(net, jc.init_mlp(jax.random.PRNGKey(2), [2, 4, 3]), activation="tanh",
                     domain=BALL, key=key)


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (forced CPU) devices")
def test_shard_a_traced_network_gives_the_one_device_result():
    net = jc.trace(_skip, _skip_params(32), X)
    sharded = jc.shard(net, Mesh(np.array(jax.devices()[:4]), ("neurons",)))
    assert isinstance(sharded, jc.Network)
    for method in (jc.derivative_matching(3), jc.collocation(3)):
        one, i1 = jc.compress(net, method, domain=BALL)
        four, i4 = jc.compress(sharded, method, domain=BALL)
        for a, b in zip(i1.layers, i4.layers, strict=True):
            np.testing.assert_array_equal(a.kept, b.kept)
        for a, b in zip(jax.tree.leaves(one.params), jax.tree.leaves(four.params), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="divisible by the 4 devices"):
        jc.shard(jc.trace(_skip, _skip_params(6), X), Mesh(np.array(jax.devices()[:4]),
                                                           ("neurons",)))


def test_jit_vmap_and_grad_through_compress_of_a_traced_network():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
    method = jc.derivative_matching(2)
    ref, _ = jc.compress(params, method, activation="tanh", domain=BALL)
    jitted = jax.jit(lambda p: jc.compress(jc.trace(_tanh_mlp, p, X), method,
                                           domain=BALL)[0].params)(params)
    for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(ref), strict=True):
        np.testing.assert_array_equal(a, b)
    stack = jax.tree.map(lambda a: jax.device_put(np.stack([np.asarray(a), 1.01 * np.asarray(a)])),
                         _skip_params())
    batched = jax.vmap(lambda p: jc.compress(jc.trace(_skip, p, X), method,
                                             domain=BALL)[0].params)(stack)
    one, _ = jc.compress(jc.trace(_skip, _skip_params(), X), method, domain=BALL)
    for a, b in zip(jax.tree.leaves(batched), jax.tree.leaves(one.params), strict=True):
        np.testing.assert_allclose(np.asarray(a)[0], b, rtol=1e-10, atol=1e-12)

    def loss(p):
        small, _ = jc.compress(jc.trace(_skip, p, X), method, domain=BALL)
        return jnp.sum(small(jnp.full((3, 2), 0.3)) ** 2)

    grad = jax.grad(loss)(_skip_params())
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad))


@dataclasses.dataclass(frozen=True)
class Values(jc.features.FeatureMap):
    """A user's feature map written once, for every network: activations at a grid."""

    n: int = 40
    name: ClassVar[str] = "grid_values"

    def num_features(self, sizes, domain):
        return (6,) * (len(sizes) - 2)

    def of_values(self, values, layer, *, domain, dtype):
        x = domain.sobol(self.n, dtype=dtype)
        z = values(x).reshape(-1, values(x).shape[-1])
        return jc.features.LayerFeatures(z=z, scale=None, layer=layer, order=-1, num_features=6,
                                coord_dim=x.shape[1])


def test_a_users_feature_map_and_selector_work_on_every_network():
    method = jc.Method(Values(), jc.OMP(), name="mine")
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
    small, info = jc.compress(params, method, activation="tanh")
    assert jc.layer_sizes(small) == [2, 6, 6, 1] and info.features == "grid_values"
    tsmall, tinfo = jc.compress(jc.trace(_skip, _skip_params(), X), method, domain=BALL)
    assert jc.layer_sizes(tsmall) == [2, 6, 6, 1] and [li.num_rows for li in tinfo.layers] == [
        40, 40]
    # the method checks run on every network (they were the chain's only)
    with pytest.raises(ValueError, match=r"data has shape \(5, 3\); expected \(N, 2\)"):
        jc.compress(jc.trace(_skip, _skip_params(), X), jc.data_matching(np.zeros((5, 3)),
                                                                         order=2), domain=BALL)


def test_a_compressed_result_is_a_network_again(tmp_path):
    net = jc.trace(_skip, _skip_params(), X)
    small, _ = jc.compress(net, jc.collocation(4), domain=BALL)
    smaller, info = jc.compress(small, jc.collocation(2), domain=BALL)
    assert jc.layer_sizes(smaller) == [2, 6, 6, 1]
    assert float(jc.error_estimate(small, smaller, domain=BALL)) == pytest.approx(
        float(info.error_estimate), rel=1e-12)
    trimmed = jc.trim(smaller)
    np.testing.assert_allclose(trimmed(jnp.ones((2, 2))), smaller(jnp.ones((2, 2))), rtol=1e-12)
    # a saved traced chain compresses again from the file (its stored chain: a params list)
    model = jf.MLP([2, 24, 24, 1], activation="tanh", rngs=nnx.Rngs(0), param_dtype=jnp.float64)
    jc.save(tmp_path / "m.jcz", jc.trace_module(model, X))
    loaded = jc.load(tmp_path / "m.jcz")
    params, _ = jf.nnx_params(model)
    again, _ = jc.compress(loaded, jc.derivative_matching(3), domain=BALL)
    ref, _ = jc.compress(params, jc.derivative_matching(3), activation="tanh", domain=BALL)
    for a, b in zip(again, ref, strict=True):
        np.testing.assert_array_equal(a["kernel"], b["kernel"])
    # not a chain: read from its stored jaxpr, the same network compressed the same way
    jc.save(tmp_path / "s.jcz", net)
    from_file, _ = jc.compress(jc.load(tmp_path / "s.jcz"), jc.collocation(2), domain=BALL)
    direct, _ = jc.compress(net, jc.collocation(2), domain=BALL)
    assert jc.layer_sizes(from_file) == jc.layer_sizes(direct)
    np.testing.assert_allclose(from_file(jnp.ones((3, 2))), direct(jnp.ones((3, 2))), rtol=1e-9,
                               atol=1e-12)


def test_the_command_line_compresses_and_certifies_a_saved_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = jf.MLP([2, 32, 32, 1], activation="tanh", rngs=nnx.Rngs(0))
    jc.save("module.jcz", jc.trace_module(model, jnp.zeros((4, 2), jnp.float32)))
    assert cli.main(["compress", "module.jcz", "-o", "small.jcz", "--order", "3"]) == 0
    assert jc.load("small.jcz").sizes == [2, 10, 10, 1]
    assert cli.main(["certify", "module.jcz", "--radius", "0.5", "--eps", "1e-3"]) == 0


def test_compressing_writes_no_global_registry():
    before = jc.activations.registered_activations()

    def siren(p, x):
        h = jnp.sin(30.0 * (x @ p[0]["kernel"] + p[0]["bias"]))
        return h @ p[1]["kernel"] + p[1]["bias"]

    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 1])
    net = jc.trace(siren, params, X)
    jc.compress(net, jc.collocation(2), domain=jc.Ball(2, 0.2))
    assert net.activation.name == "traced:sin(mul(30.0, u))"
    assert jc.activations.registered_activations() == before
