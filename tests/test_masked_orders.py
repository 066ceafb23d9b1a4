"""Masked runs: one program compiled at order ``K`` computes the network of every order
``k <= K`` (feature rows past ``k`` zeroed, the first ``min(D_k, d)`` pivots re-weighted, the
other neurons dead, a set with ``D_k >= d`` kept whole), so the order searches compile once per
bucket of orders instead of once per order."""

import dataclasses
import re

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from user_nets import mlp

import jaxcompress as jc
from jaxcompress.compression import compress_network, compressed_like
from jaxcompress.driver import masked_jit, masked_runs
from jaxcompress.graph import Network
from jaxcompress.search.candidates import Candidates, _order_bucket

BALL = jc.Ball(2, 1.0)
X = draws.uniform(jax.random.PRNGKey(3), (256, 2), jnp.float64, -0.7, 0.7)

FAMILIES = {
    "derivative": jc.derivative_matching,
    "collocation": jc.collocation,
    "best_of": lambda k: jc.best_of(jc.derivative_matching(k), jc.collocation(k)),
}


@pytest.fixture(scope="module")
def teacher():
    # the first set (10 wide) is kept whole from k = 3 (D_3 = 10): the skip rule by value
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 10, 30, 1], dtype=jnp.float64)
    return params, Network.from_params(params, jc.activations.get_activation("tanh"))


def _f(net, leaves, x):
    plan = net.plan()
    return jc.mlp.apply(plan.at_widths(plan.set_widths(leaves)).chain.lower(leaves), x,
                        activation="tanh")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_masked_run_is_the_network_of_its_order(teacher, family):
    _, net = teacher
    fam = FAMILIES[family]
    plan = net.plan()
    assert masked_runs(fam(6))
    for k in (0, 3, 4, 6):
        exact, info = compress_network(net, fam(k), BALL)
        padded, pinfo = masked_jit(net.leaves, fam(6), BALL,
                                   jax.device_put(np.full(2, k, np.int32)), plan=plan)
        assert plan.set_widths(padded) == (10, 28)          # the widths of K = 6
        np.testing.assert_allclose(_f(net, padded, X), _f(net, exact, X), rtol=0, atol=1e-12)
        np.testing.assert_allclose(float(pinfo.error_estimate), float(info.error_estimate),
                                   rtol=1e-9)
        # the dead neurons are the ones past the order's width: trim drops exactly them
        trimmed, masks = plan.at_widths((10, 28)).trim(padded)
        assert plan.set_widths(trimmed) == plan.set_widths(exact)
        assert [int(m.sum()) for m in masks] == [min(10, (k + 1) * (k + 2) // 2),
                                                 min(28, (k + 1) * (k + 2) // 2)]


def test_uniform_orders_compile_once_per_bucket(teacher):
    params, net = teacher
    family, cands = FAMILIES["best_of"], Candidates(net, BALL)
    assert cands.masks_orders(family, 8)
    assert [_order_bucket(k, 8) for k in (0, 1, 4, 5, 8)] == [4, 4, 4, 8, 8]
    before = masked_jit._cache_size()
    for k in range(5):
        small, info = cands.uniform_leaves(family, k, 8)
        assert [li.width_out for li in info.layers] == [min(10, (k + 1) * (k + 2) // 2),
                                                        min(30, (k + 1) * (k + 2) // 2)]
        assert all(li.order == k for li in info.layers) and f"order={k}" in info.method
        exact, _ = cands.exact(family, k)
        np.testing.assert_allclose(_f(net, small, X), _f(net, exact, X), rtol=0, atol=1e-12)
    assert masked_jit._cache_size() == before + 1          # orders 0..4: one program


@pytest.mark.usefixtures("user_broadcasting")
def test_a_traced_network_called_twice_runs_masked():
    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 16, 16, 1], dtype=jnp.float64)

    def fn(p, x):
        return mlp(p, x) + mlp(p, -x)      # every group at two sites: stacked feature blocks

    net = jc.trace(fn, params, jnp.zeros((4, 2), jnp.float64))
    run = jax.jit(fn)   # the user's function compiled (op by op: a program per operation)
    for family in ("derivative", "collocation"):
        family, cands = FAMILIES[family], Candidates(net, BALL)
        assert cands.masks_orders(family, 4)
        for k in (1, 2):
            small, info = cands.uniform_leaves(family, k, 4)
            exact, exact_info = cands.exact(family, k)
            a = run(compressed_like(net, net, small, info, BALL).params, X)
            b = run(compressed_like(net, net, exact, exact_info, BALL).params, X)
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-11)


def test_what_cannot_run_masked_compiles_per_order(teacher):
    _, net = teacher
    assert not masked_runs(jc.derivative_matching(3, selector="maxvol"))   # swaps: not greedy
    assert not masked_runs(jc.collocation(3, widths=(4, 4)))
    cands = Candidates(net, BALL)

    def family(k):
        return jc.derivative_matching(k, selector="maxvol")

    assert not cands.masks_orders(family, 6)
    small, info = cands.uniform_leaves(family, 2, 6)
    assert [li.width_out for li in info.layers] == [6, 6]
    assert jax.tree_util.tree_structure(small) == jax.tree_util.tree_structure(
        cands.exact(family, 2)[0])


def test_the_command_line_search_matches_its_order(tmp_path, teacher, capsys):
    """``--eps`` finds its order through masked candidates and saves the network ``--order``
    gives (the one chosen is compressed at its own widths)."""
    from jaxcompress.cli import main

    params, _ = teacher
    path = tmp_path / "t.jcz"
    jc.save(str(path), params, activation="tanh")
    common = ["--radius", "1", "--samples", "512"]
    assert main(["compress", str(path), "-o", str(tmp_path / "a.jcz"), "--eps", "1e-3",
                 *common]) == 0
    order = int(re.search(r", order (\d+),", capsys.readouterr().out).group(1))
    assert main(["compress", str(path), "-o", str(tmp_path / "b.jcz"), "--order", str(order),
                 *common]) == 0
    a, b = jc.load(str(tmp_path / "a.jcz")), jc.load(str(tmp_path / "b.jcz"))
    assert jc.layer_sizes(a.params) == jc.layer_sizes(b.params) != [2, 10, 30, 1]
    for la, lb in zip(a.params, b.params, strict=True):
        np.testing.assert_array_equal(la["kernel"], lb["kernel"])


@pytest.mark.usefixtures("user_broadcasting")
@pytest.mark.parametrize("name", ["residual_mlp", "modified_mlp"])
def test_tied_sets_and_a_residual_stream_run_masked(name):
    """A stream's set (several consumed tensors of different row counts) and gated tied sets:
    each block masked by its own rows, and the re-fit target of a block's inner layer has no
    column for the stream's dead neurons (else OMP would fit them)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import zoo_models as Z

    model = Z.build(name, "small")
    net = jc.trace(model.fn, model.params, jnp.zeros((4, model.d_in), jnp.float32))
    ball = jc.Ball(model.d_in, 1.0)
    x = ball.sobol(128, dtype=jnp.float32)
    run = jax.jit(model.fn)   # the model compiled (op by op: a program per operation)
    y = np.asarray(run(model.params, x))
    cands = Candidates(net, ball)
    assert cands.masks_orders(jc.collocation, 4)
    for k in (1, 3):
        small, info = cands.uniform_leaves(jc.collocation, k, 4)
        exact, exact_info = cands.exact(jc.collocation, k)
        a = np.asarray(run(compressed_like(net, net, small, info, ball).params, x))
        b = np.asarray(run(compressed_like(net, net, exact, exact_info, ball).params, x))
        scale = float(np.max(np.abs(y))) + float(np.max(np.abs(b - y)))
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5 * scale)


def _skip_net(p, x):
    """Not a chain: the input re-enters the middle layer."""
    h = jax.nn.sigmoid(x @ p[0]["kernel"] + p[0]["bias"])
    h = jax.nn.sigmoid(jnp.concatenate([h, x], -1) @ p[1]["kernel"] + p[1]["bias"])
    return h @ p[2]["kernel"] + p[2]["bias"]


@pytest.mark.usefixtures("user_broadcasting")
@pytest.mark.parametrize("case", ["chain/derivative", "skip/collocation/forward"])
def test_a_masked_shrink_step_is_the_shrink_step_in_one_program(case):
    """The width search narrows a set of its candidate padded to the search's widths: one
    program for every set width and step size, the same network (widths, kept neurons,
    function) as the step at the candidate's own widths. Sigmoid: the padding's features are
    not zero (sigmoid(0) = 1/2), and with biases of -3 larger than the network's own: they
    must be masked, not merely dead."""
    from jaxcompress.networks import as_network
    from jaxcompress.search.candidates import _narrow_step

    if case == "chain/derivative":
        params = [dict(layer, bias=jax.device_put(np.asarray(layer["bias"]) - 3.0)) for layer in
                  jc.init_mlp(jax.random.PRNGKey(2), [2, 12, 12, 1], dtype=jnp.float64)]
        net, method = as_network(params, activation="sigmoid"), jc.derivative_matching(3)
    else:
        # built on the host (host keys and arithmetic: no program per operation and shape)
        k = np.asarray(jax.random.split(jax.random.PRNGKey(1), 3))
        normal = [np.asarray(draws.normal(k[i], shape)) for i, shape in
                  enumerate([(2, 12), (14, 12), (12, 1)])]
        params = jax.device_put([{"kernel": normal[0], "bias": np.full((12,), -3.0)},
                                 {"kernel": normal[1] / 4, "bias": np.full((12,), -3.0)},
                                 {"kernel": normal[2] / 4, "bias": np.zeros(1)}])
        net = jc.trace(_skip_net, params, jnp.zeros((4, 2)))
        method = jc.collocation(3, layer_order="forward")
    cands = Candidates(net, BALL, params)
    cand = dataclasses.replace(cands.uniform(method, None), order=3)
    assert cand.widths == (10, 10)
    space = cands.space(cand)
    assert space.widths == (12, 12)
    before = _narrow_step._cache_size()
    for s, by in ((0, 1), (0, 4), (1, 3), (1, 9)):
        exact, masked = cands.narrow(cand, s, by), cands.narrow(cand, s, by, space)
        assert masked.widths == exact.widths and exact.widths[s] <= cand.widths[s] - by
        for a, b in zip(masked.info.layers, exact.info.layers, strict=True):
            np.testing.assert_array_equal(a.kept, b.kept)
            assert a.width_out == b.width_out and int(a.rank) == int(b.rank)
        np.testing.assert_allclose(cands.function(masked.leaves)(X),
                                   cands.function(exact.leaves)(X), rtol=0, atol=1e-10)
        cand = exact if s == 0 and by == 1 else cand   # the next steps from a narrower one
    assert _narrow_step._cache_size() == before + 2       # one program per set
