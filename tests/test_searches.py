"""The searches for the smallest network: the frontier, the search by any metric with polishing,
the padded candidates it polishes, and the command line.

The search's full measurement (the five Table 1 teachers, the zoo models) is
``benchmarks/frontier.py``; here small networks, few polishing steps.
"""

import collections
import dataclasses
import json
import math

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from programs import programs_compiled

import jaxcompress as jc
from jaxcompress import cli, polishing
from jaxcompress.polishing import polish_leaves
from jaxcompress.search.candidates import Space

pytestmark = pytest.mark.usefixtures("user_broadcasting")

X = jnp.zeros((4, 2))
BALL = jc.Ball(2, 1.0)
FAST = jc.PolishSettings(steps=40, shrink_steps=40, points=256)


def _skip(p, x):
    """Not a chain: the input re-enters the middle layer."""
    h = jnp.tanh(x @ p[0]["kernel"] + p[0]["bias"])
    h = jnp.tanh(jnp.concatenate([h, x], -1) @ p[1]["kernel"] + p[1]["bias"])
    return h @ p[2]["kernel"] + p[2]["bias"]


def _skip_params(width=12, seed=1):
    k = jax.random.split(jax.random.PRNGKey(seed), 3)
    # (/ 4 on the host: on the device it compiled a program per shape)
    return [{"kernel": draws.normal(k[0], (2, width)), "bias": jnp.full((width,), 0.1)},
            {"kernel": jax.device_put(np.asarray(draws.normal(k[1], (width + 2, width))) / 4),
             "bias": jnp.full((width,), 0.1)},
            {"kernel": jax.device_put(np.asarray(draws.normal(k[2], (width, 1))) / 4),
             "bias": jnp.zeros(1)}]


def test_a_padded_candidate_is_the_same_network_and_polishes_as_the_narrower_one():
    """Padded to wider widths (zeros in its producers and in the rows that read them) a
    candidate computes the same function and comes back exactly; L-BFGS on it with the padding
    masked takes the steps it takes on the narrower network itself (the padding neither
    computes nor learns)."""
    net = jc.trace(_skip, _skip_params(), X)
    small, _ = jc.compress(net, jc.collocation(widths=(5, 4), order=2), domain=BALL)
    leaves, plan = jax.tree_util.tree_leaves(small.params), net.plan()
    assert plan.set_widths(leaves) == (5, 4)
    space = Space(plan, (9, 7))
    padded, mask = space.pad(leaves)
    assert space.plan.set_widths(padded) == (9, 7)
    x = BALL.sobol(64)
    np.testing.assert_allclose(plan.apply(padded, x), plan.apply(leaves, x), rtol=0, atol=1e-14)
    for p, m in zip(padded, mask, strict=True):   # mask: one on the candidate, zero on padding
        assert np.all((np.asarray(m) == 0) | (np.asarray(m) == 1))
        np.testing.assert_array_equal(np.asarray(p)[np.asarray(m) == 0], 0.0)
    for a, b in zip(space.unpad(padded, (5, 4)), leaves, strict=True):
        np.testing.assert_array_equal(a, b)
    # restrict keeps exactly the chosen neurons, place puts them where it is told
    chosen = plan.at_widths((5, 4)).restrict(leaves, [np.isin(np.arange(5), [0, 2, 4]),
                                                       np.isin(np.arange(4), [1, 3])])
    assert plan.set_widths(chosen) == (3, 2)
    np.testing.assert_array_equal(chosen[1], np.asarray(leaves[1])[:, [0, 2, 4]])  # kernel 0
    assert space.plan.set_widths(space.plan.place(chosen, [np.arange(3), np.arange(2)])) == (
        9, 7)

    direct, _ = polish_leaves(plan, leaves, plan, net.leaves, domain=BALL, steps=6, points=64)
    masked, _ = polish_leaves(plan, padded, plan, net.leaves, domain=BALL, mask=mask, steps=6,
                              points=64)
    for p, m in zip(masked, mask, strict=True):   # the padding stayed zero
        np.testing.assert_array_equal(np.asarray(p)[np.asarray(m) == 0], 0.0)
    moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                for a, b in zip(direct, leaves, strict=True))
    assert moved > 1e-3
    for a, b in zip(space.unpad(masked, (5, 4)), direct, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


def test_a_masked_polish_keeps_the_mask_out_of_the_optimizer(monkeypatch):
    """The mask is an argument of the loss beside the optimised leaves: the loop carries the
    leaves (as one flat vector, :class:`jaxcompress.polishing._Flat`), and L-BFGS's state (100
    steps of history) is the leaves' only. Carried as leaves, the mask doubled that state, the
    loop's program and its run (methods.md)."""
    net = jc.trace(_skip, _skip_params(), X)
    small, _ = jc.compress(net, jc.collocation(widths=(5, 4), order=2), domain=BALL)
    plan = net.plan()
    padded, mask = Space(plan, (9, 7)).pad(jax.tree_util.tree_leaves(small.params))
    carries, real = [], polishing._run_chunk

    def spy(carry, *args, **kwargs):
        carries.append(carry)
        return real(carry, *args, **kwargs)

    monkeypatch.setattr(polishing, "_run_chunk", spy)
    polish_leaves(plan, padded, plan, net.leaves, domain=BALL, mask=mask, steps=6, points=64)
    params, state, best = carries[0][:3]

    def size(tree):
        return sum(math.prod(np.shape(v)) for v in jax.tree_util.tree_leaves(tree))

    # one vector of the padded leaves' entries (the mask's are not among them)
    assert np.shape(params) == np.shape(best) == (size(padded),)

    lbfgs = polishing.default_optimizer(None, 6)
    assert size(state) == size(jax.eval_shape(lbfgs.init, list(padded)))
    assert size(state) < size(jax.eval_shape(lbfgs.init, (list(padded), list(mask))))


def test_a_frontier_compiles_by_bucket_not_by_candidate():
    """A factory's orders run masked, one program per bucket of orders, and every candidate is
    measured padded to its bucket of widths (as the search): collocation at k = 1, 2, 3, 5
    compiles two compression programs (k <= 4 and k = 5) and two sup measurements (widths 3,
    6, 10 padded to 16; 21 to the teacher's 24), where it compiled one of each per order. The
    rows are the exact compressions' networks to rounding."""
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1])
    front, names = programs_compiled(lambda: jc.frontier(
        teacher, jc.collocation, activation="tanh", domain=BALL, orders=[1, 2, 3, 5],
        batch=None, n_samples=256))
    assert [r.widths for r in front.rows] == [(3, 3), (6, 6), (10, 10), (21, 21)]
    assert "jit(_run_impl)" not in names, names
    assert names.count("jit(_masked_impl)") <= 2 and names.count("jit(_plan_sup_error)") <= 2
    for row in front.rows:
        exact, _ = jc.compress(teacher, jc.collocation(row.order), activation="tanh",
                               domain=BALL)
        for a, b in zip(jax.tree.leaves(row.network), jax.tree.leaves(exact), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        assert row.sup == pytest.approx(float(jc.sup_error(
            teacher, exact, activation="tanh", domain=BALL, n_samples=256,
            key=jax.random.PRNGKey(0))), rel=1e-3)


def test_frontier_of_a_params_list(tmp_path):
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1])
    lines = []
    front = jc.frontier(teacher, [jc.collocation, jc.derivative_matching(2)],
                        activation="tanh", domain=BALL, orders=[1, 3], widths=[4], batch=1024,
                        progress=lines.append)
    assert [r.widths for r in front.rows] == [(3, 3), (10, 10), (4, 4), (6, 6)]
    assert len(lines) == 4 and lines[0].startswith("[1/4] collocation(order=1")
    assert front.rows[2].order == 2       # widths 4: the smallest order with D_k >= 4
    for r in front.rows:
        assert r.num_params == jc.num_params(r.network) and r.error == r.sup
        assert r.rel_l2 > 0 and r.points_per_s > 0 and not r.polished
    front_rows = front.pareto()
    assert [r.num_params for r in front_rows] == sorted(r.num_params for r in front_rows)
    assert all(a.error > b.error for a, b in zip(front_rows, front_rows[1:], strict=False))
    best = front.smallest_row(front_rows[1].error)
    assert best is front_rows[1] and jc.layer_sizes(front.smallest(best.error))[1:-1] == list(
        best.widths)
    with pytest.raises(ValueError, match="no candidate has sup <= 1e-12; the best is"):
        front.smallest(1e-12)
    text = str(front)
    assert text.startswith("teacher: 697 parameters") and "rel L2" in text and "* on the Pareto" \
        in text
    png = front.plot(tmp_path / "f.png", eps=1e-2, scratch=[(50, 1e-2)])
    assert png.stat().st_size > 10_000
    back = jc.Frontier.from_dict(json.loads(json.dumps(front.to_dict())))
    assert [r.widths for r in back.pareto()] == [r.widths for r in front_rows]
    with pytest.raises(ValueError, match="read back from a file"):
        back.rows[0].network   # noqa: B018


def test_search_by_a_task_metric_with_polishing_on_a_traced_network():
    """The search meets the budget by the user's metric, below the first uniform order that
    does, and returns the user's pytree with the compressed network beside it."""
    net = jc.trace(_skip, _skip_params(16), X)
    x_val = BALL.sobol(512, skip=1000)
    teacher = jax.jit(lambda x: _skip(net.params, x))     # one program, not op by op
    noisy = jax.jit(lambda x: teacher(x) + 0.01 * jnp.sin(7 * x[:, :1]))   # the task: noisy
    y_val = np.asarray(noisy(x_val))

    def task_mse(f):
        return float(np.mean((np.asarray(f(x_val)) - y_val) ** 2))

    teacher_mse = task_mse(teacher)
    eps = 1.5 * teacher_mse
    lines = []
    res, names = programs_compiled(lambda: jc.compress_to_tolerance(
        net, jc.Measured(metric=task_mse, polish=FAST, method=jc.collocation, max_order=6),
        domain=BALL, eps=eps, progress=lines.append))
    # programs by what they do, not one per candidate: every candidate is padded to 16 neurons
    # per set (the teacher's width, search.candidates.MIN_BUCKET), the orders run masked in
    # buckets of four, a width step narrows one set masked
    count = collections.Counter(names)
    assert count["jit(_run_impl)"] == count["jit(_shrink_step)"] == 0, count
    assert count["jit(_masked_impl)"] <= 2 and count["jit(_narrow_step)"] <= 2, count
    assert count["jit(_apply)"] <= 1 and count["jit(_run_chunk)"] <= 1, count
    # 9 alone (the docs' search: 12): nothing compiled op by op
    assert sum(count.values()) <= 10, count
    assert res.metric == "task_mse" and res.metric_value <= eps
    assert task_mse(res.compressed) == pytest.approx(res.metric_value, rel=1e-6)
    assert isinstance(res.compressed, jc.Compressed)
    assert jax.tree_util.tree_structure(res.params) == jax.tree_util.tree_structure(net.params)
    stages = [r.stage for r in res.frontier.rows]
    assert stages[0] == "order" and "shrink" in stages
    uniform = next(r for r in res.frontier.rows if r.stage == "order" and r.error <= eps)
    assert jc.num_params(res.compressed) < uniform.num_params
    assert res.widths == tuple(jc.layer_sizes(res.compressed)[1:3])
    assert all(r.polished for r in res.frontier.rows)
    assert lines[-1].startswith("smallest: widths") and res.history[-1] == lines[-1]
    # the record: kept indices of teacher neurons, one per neuron that is left
    assert [len(li.kept) for li in res.info.layers] == list(res.widths)
    assert all(int(np.max(li.kept)) < 16 for li in res.info.layers)
    assert "polished, widths searched" in res.info.method
    assert res.measured_error == pytest.approx(
        float(jc.sup_error(net, res.compressed, domain=BALL, key=jax.random.PRNGKey(0),
                           n_samples=4096)), rel=1e-6)


def test_each_search_is_a_strategy_of_its_own_and_explains_itself():
    assert jc.Measured().polish is None and jc.Measured().shrink and jc.Measured().method is None
    assert jc.MeasuredOrders().selector == jc.PivotedQR()
    assert not hasattr(jc.MeasuredOrders(), "metric") and not hasattr(jc.Measured(), "by_orders")
    assert jc.Measured(polish=True).polish == jc.PolishSettings()
    with pytest.raises(ValueError, match="random selector is not supported"):
        jc.MeasuredOrders(selector=jc.select.RandomChoice(jax.random.PRNGKey(0)))
    with pytest.raises(ValueError, match="metric must be 'sup', 'rel_l2', 'psnr', a callable"):
        jc.Measured(metric="mse")
    with pytest.raises(TypeError, match="polish must be a bool or jc.PolishSettings"):
        jc.Measured(polish=100)
    with pytest.raises(TypeError, match="method must be a method factory"):
        jc.Measured(method="collocation")
    with pytest.raises(ValueError, match="shrink_steps must be >= 1"):
        jc.PolishSettings(shrink_steps=0)
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1])
    with pytest.raises(ValueError, match="the teacher itself has _worst 2 > eps = 1"):
        jc.compress_to_tolerance(teacher, jc.Measured(metric=_worst), activation="tanh",
                                 domain=BALL, eps=1.0)
    with pytest.raises(ValueError, match=r"no order <= 1 reaches sup error 1e-09.*or search "
                                         r"with polishing.*jc.Measured\(method=jc.collocation, "
                                         r"polish=True\)"):
        jc.compress_to_tolerance(teacher, jc.MeasuredOrders(max_order=1, n_samples=64),
                                 activation="tanh", domain=BALL, eps=1e-9)
    with pytest.raises(ValueError, match=r"no order <= 1 reaches sup <= 1e-09.*try polish=True "
                                         r"\(distil.*or method=jc.collocation"):
        jc.compress_to_tolerance(teacher, jc.Measured(method=jc.derivative_matching,
                                                      max_order=1, n_samples=64),
                                 activation="tanh", domain=BALL, eps=1e-9)
    with pytest.raises(TypeError, match="must return a jc.Method"):
        jc.compress_to_tolerance(teacher, jc.Measured(method=lambda k: k), activation="tanh",
                                 domain=BALL, eps=1.0)


def _worst(f):
    return 2.0


@pytest.mark.parametrize("eps", [
    # rel L2 0.5: orders 0 and 1 (widths 3), then 3 candidates narrower (3.6 s); 1e-2 (-m slow):
    # orders 0-3 (widths 10), then 11 narrower candidates, each a compilation (9.5 s)
    0.5, pytest.param(1e-2, marks=pytest.mark.slow)])
def test_the_command_line_shrinks_a_saved_network_by_rel_l2_without_polishing(tmp_path, capsys,
                                                                             eps):
    """A params list saved to a file, searched by relative L2 without polishing: the orders
    until one meets the budget, then narrower than that order in some layer."""
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 12, 1])
    jc.save(tmp_path / "t.jcz", teacher, activation="tanh")
    code = cli.main(["shrink", str(tmp_path / "t.jcz"), "-o", str(tmp_path / "s.jcz"),
                     "--eps", str(eps), "--metric", "rel_l2", "--max-order", "6"])
    out = capsys.readouterr().out
    assert code == 0, out
    small = jc.load(tmp_path / "s.jcz")
    assert small.metadata["metric"] == "rel_l2" and small.metadata["metric_value"] <= eps
    assert isinstance(small.params, list)
    assert "# order k = 0:" in out and "smallest: widths" in out
    front = json.loads((tmp_path / "s_frontier.json").read_text())
    assert front["metric"] == "rel_l2" and front["rows"]
    orders = [r for r in front["rows"] if r["stage"] == "order"]
    assert orders[-1]["error"] <= eps < orders[-2]["error"]
    widths = jc.layer_sizes(small.params)[1:-1]
    assert sum(widths) < sum(orders[-1]["widths"])
    assert not any(r["error_before"] is not None for r in front["rows"])   # none polished
    assert (tmp_path / "s_frontier.png").stat().st_size > 10_000
    assert math.isclose(small.metadata["metric_value"],
                        min(r["error"] for r in front["rows"]
                            if r["num_params"] == jc.num_params(small.params)), rel_tol=1e-12)


def test_a_search_measures_its_result_padded_to_its_bucket():
    """The result's sup error and error estimate are measured padded to its bucket of widths,
    by the programs the search measured its candidates with: a second eps whose result lands
    in the same bucket compiles nothing (measured at the result's own widths, it compiled the
    sup error and the estimate again). The padding changes the function by rounding only."""
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1])

    def search(eps):
        return jc.compress_to_tolerance(teacher, jc.Measured(), activation="tanh", domain=BALL,
                                        eps=eps)

    first = search(1e-3)
    second, names = programs_compiled(lambda: search(3e-3))
    assert names == [], names
    for res, eps in ((first, 1e-3), (second, 3e-3)):
        assert max(res.widths) <= 16 and float(res.measured_error) <= eps
        own = jc.measure.error_estimate(teacher, res.params, activation="tanh", domain=BALL)
        np.testing.assert_allclose(float(res.info.error_estimate), float(own), rtol=1e-9)


# ------------------------------------------------------------------------------------------------
# When a search stops: budget, stall, out of orders (jaxcompress.stopping)
# ------------------------------------------------------------------------------------------------


def test_the_stall_rule_by_hand():
    """Stalled when the best of the last N errors is not at least X below the best before them
    (N = 3, X = 0.1)."""
    rule = jc.stopping.StallRule()
    assert not rule.stalled([1.0, 0.5, 0.5, 0.5])                 # the first order: no history
    assert rule.stalled([1.0, 1.0, 0.95, 0.92])                   # 0.92 > 0.9 * 1.0
    assert not rule.stalled([1.0, 1.0, 0.95, 0.9])                # exactly 10 %: progress
    assert rule.stalled([1e-3, 1e-4, 2e-4, 3e-4, 1e-4])           # growing, then back: no gain
    assert not rule.stalled([1e-3, 1e-4, 2e-4, 3e-4, 8e-5])
    assert rule.stalled([math.inf] * 4) and not rule.stalled([math.inf, math.inf, math.inf, 1.0])
    assert rule.stalled([1.0, 1.0, math.nan, math.nan])           # NaN counts as inf
    assert not jc.stopping.StallRule(orders=5).stalled([1.0] * 5)
    with pytest.raises(ValueError, match=r"StallRule: improvement must be a number in \[0, 1\), "
                                         r"got 1.5"):
        jc.stopping.StallRule(improvement=1.5)
    with pytest.raises(ValueError, match="StallRule: orders must be an int >= 1, got 0"):
        jc.stopping.StallRule(orders=0)
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 12, 1])
    with pytest.raises(ValueError, match=r"compress_to_tolerance: max_seconds must be None \(no "
                                         r"limit\) or a number >= 0.*got -1"):
        jc.compress_to_tolerance(teacher, jc.Measured(), activation="tanh", domain=BALL,
                                 eps=1e-3, max_seconds=-1)
    with pytest.raises(TypeError, match="frontier: stall must be a jc.stopping.StallRule"):
        jc.frontier(teacher, activation="tanh", domain=BALL, stall=3)


def _flat_metric(teacher):
    """A task metric no compression improves: 0 for the teacher, 1 for every candidate."""
    x = BALL.sobol(64)
    ref = np.asarray(jc.apply(teacher, x, activation="tanh"))

    def flat(f):
        return 0.0 if np.allclose(np.asarray(f(x)), ref, rtol=0, atol=1e-9) else 1.0

    return flat


def test_a_search_whose_error_stops_improving_stops_and_says_so():
    """Every candidate measures 1 (eps 0.5): after the 4th order (3 without improvement) the
    search stops as stalled, with the best network it found, its frontier and a progress line
    for each order with the time so far and an estimate of what is left; with throw=True that
    result comes with the error. Without the stall rule it runs out of orders."""
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 12, 1])
    metric = _flat_metric(teacher)
    strategy = jc.Measured(method=jc.derivative_matching, metric=metric, shrink=False,
                           n_samples=64, local_search_steps=5)
    lines = []
    res = jc.compress_to_tolerance(teacher, strategy, activation="tanh", domain=BALL, eps=0.5,
                                   throw=False, progress=lines.append)
    assert res.status == "stalled" and not res.met
    assert "stopped improving with the order: no relative improvement of at least 0.1 over " \
           "the last 3 orders" in res.reason
    assert [r.order for r in res.frontier.rows] == [0, 1, 2, 3]
    assert res.frontier.stop.status == "stalled"
    assert res.metric_value == 1.0 and res.widths == (1, 1)   # the best: the first, smallest
    assert jc.layer_sizes(res.params) == [2, 1, 1, 1]
    assert "s so far; at most 4 orders left" in lines[0] and lines[-1].startswith(
        "stopped (stalled)")
    with pytest.raises(jc.search.ToleranceNotMet, match=r"(?s)stopped improving.*is this "
                                                           r"error's .result.*the search so far"
                       ) as caught:
        jc.compress_to_tolerance(teacher, strategy, activation="tanh", domain=BALL, eps=0.5)
    assert isinstance(caught.value, ValueError) and caught.value.result.status == "stalled"
    full = jc.compress_to_tolerance(teacher, dataclasses.replace(strategy, max_order=3),
                                    activation="tanh", domain=BALL, eps=0.5, throw=False,
                                    stall=None)
    assert full.status == "out_of_orders" and len(full.frontier.rows) == 4
    assert "no order <= 3 reaches flat <= 0.5" in full.reason
    # a frontier skips the larger orders of a factory that stalled (k = 4 is not measured)
    front = jc.frontier(teacher, jc.derivative_matching, activation="tanh", domain=BALL,
                        metric=metric, orders=[0, 1, 2, 3, 4], batch=None, n_samples=64)
    assert [r.order for r in front.rows] == [0, 1, 2, 3] and front.stop.status == "stalled"
    assert "derivative_matching's 1 larger order skipped" in front.history[-1]


def test_a_search_with_no_time_left_returns_its_first_candidate():
    """max_seconds=0: every search stops after its first candidate with the budget's reason and
    returns a usable network (no assertion on how fast anything ran)."""
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 12, 1])
    for strategy in (jc.Measured(n_samples=64, local_search_steps=5),
                     jc.MeasuredOrders(n_samples=64, local_search_steps=5)):
        res = jc.compress_to_tolerance(teacher, strategy, activation="tanh", domain=BALL,
                                       eps=1e-12, max_seconds=0, throw=False)
        assert res.status == "budget" and not res.met, strategy
        assert "the time budget of 0 s was spent" in res.reason
        assert res.orders[0] == 0 and jc.layer_sizes(res.params) == [2, 1, 1, 1]
        assert np.all(np.isfinite(jc.apply(res.params, BALL.sobol(8), activation="tanh")))
    with pytest.raises(ValueError, match="the time budget of 0 s was spent"):
        jc.compress_to_tolerance(teacher, jc.MeasuredOrders(n_samples=64, local_search_steps=5),
                                 activation="tanh", domain=BALL, eps=1e-12, max_seconds=0)
    # met by the first candidate, the per-layer search cut short: the network that met eps,
    # the status says the budget
    res = jc.compress_to_tolerance(teacher, jc.MeasuredOrders(n_samples=64,
                                                              local_search_steps=5),
                                   activation="tanh", domain=BALL, eps=0.5, max_seconds=0)
    assert res.status == "budget" and res.met and res.measured_error <= 0.5
    assert res.orders == (0, 0) and "per-layer search was cut short" in res.reason
    # certified: the a priori orders are proven, the refinement is cut short
    rng = np.random.default_rng(0)     # test_certify.py's certified chain
    chain = []
    for i, o in ((1, 32), (32, 32), (32, 1)):
        b = 1.0 / np.sqrt(i)
        chain.append({"kernel": jax.device_put(0.5 * rng.uniform(-b, b, (i, o))),
                      "bias": jax.device_put(rng.uniform(-b, b, (o,)))})
    res = jc.compress_to_tolerance(chain, jc.Certified(refine=True, n_samples=64,
                                                       local_search_steps=5),
                                   activation="sigmoid", domain=jc.Ball(1, 0.5), eps=1e-6,
                                   max_seconds=0)
    assert res.status == "budget" and res.met and res.report.a_posteriori_bound <= 1e-6
    assert not any(line.startswith("refine: ") for line in res.history)
    # a frontier: the first candidate alone
    front = jc.frontier(teacher, jc.collocation, activation="tanh", domain=BALL,
                        orders=[1, 2, 3], batch=None, n_samples=64, max_seconds=0)
    assert len(front.rows) == 1 and front.stop.status == "budget" and front.stop.met is None
    assert "stopped (budget)" in str(front)
    back = jc.Frontier.from_dict(json.loads(json.dumps(front.to_dict())))
    assert back.stop == front.stop


def test_the_command_line_writes_what_it_has_when_stopped(tmp_path, capsys):
    """A search stopped before its target (here --max-seconds 0: after the first candidate)
    writes the best network, the JSON and the plot, says why on stderr and exits 1; so does
    compress --eps; the PSNR metric by dB."""
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 12, 1])
    jc.save(tmp_path / "t.jcz", teacher, activation="tanh")
    code = cli.main(["shrink", str(tmp_path / "t.jcz"), "-o", str(tmp_path / "s.jcz"),
                     "--eps", "200", "--metric", "psnr", "--max-seconds", "0",
                     "--samples", "64"])
    captured = capsys.readouterr()
    assert code == 1, captured
    assert "the target was not reached: the time budget of 0 s was spent" in captured.err
    assert "# order k = 0:" in captured.out and "s so far" in captured.out
    small = jc.load(tmp_path / "s.jcz")
    assert small.metadata["target_met"] is False and small.metadata["stopped"] == "budget"
    assert 0 < small.metadata["metric_value"] < 200
    text = (tmp_path / "s_frontier.json").read_text()
    front = json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert front["metric"] == "psnr" and front["higher_is_better"] and len(front["rows"]) == 1
    assert front["teacher_error"] is None  # the teacher's PSNR against itself: infinite
    assert jc.Frontier.from_dict(front).teacher_error == math.inf
    assert front["stop"]["status"] == "budget"
    assert (tmp_path / "s_frontier.png").stat().st_size > 10_000
    code = cli.main(["compress", str(tmp_path / "t.jcz"), "-o", str(tmp_path / "c.jcz"),
                     "--eps", "1e-30", "--max-seconds", "0", "--samples", "64"])
    captured = capsys.readouterr()
    assert code == 1 and "target was not reached: the time budget" in captured.err
    assert jc.load(tmp_path / "c.jcz").metadata["target_met"] is False


def test_a_search_by_psnr_in_db():
    """metric="psnr": the PSNR against the teacher in dB (higher is better), eps the least
    PSNR; the value is jc.measure.psnr of the result, and the frontier's best is the largest."""
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 12, 1])
    res = jc.compress_to_tolerance(teacher, jc.Measured(metric="psnr", max_order=6,
                                                        n_samples=64, local_search_steps=5),
                                   activation="tanh", domain=BALL, eps=40.0)
    assert res.met and res.metric == "psnr" and res.metric_value >= 40.0
    own = float(jc.measure.psnr(teacher, res.params, activation="tanh", domain=BALL))
    assert own == pytest.approx(res.metric_value, abs=1e-6)
    orders = [r for r in res.frontier.rows if r.stage == "order"]
    assert orders[-1].error >= 40 > orders[-2].error      # the first order with 40 dB
    assert all(r.error < 40 for r in res.frontier.rows if r.num_params < jc.num_params(
        res.params))
    assert res.frontier.higher_is_better and res.frontier.teacher_error == math.inf
    assert res.frontier.smallest_row(40.0).num_params == jc.num_params(res.params)
    front = res.frontier.pareto()
    assert all(a.error < b.error for a, b in zip(front, front[1:], strict=False))
    # the frontier by PSNR: larger orders are closer to the teacher, so more dB
    grid = jc.frontier(teacher, jc.derivative_matching, activation="tanh", domain=BALL,
                       metric="psnr", orders=[1, 2, 3], batch=None, n_samples=64)
    dbs = [r.error for r in grid.rows]
    assert dbs == sorted(dbs) and [r.widths for r in grid.pareto()] == [(3, 3), (6, 6),
                                                                        (10, 10)]
    assert grid.smallest_row(dbs[1]).widths == (6, 6)
    assert dbs[0] == pytest.approx(float(jc.measure.psnr(
        teacher, grid.rows[0].network, activation="tanh", domain=BALL)), abs=1e-6)


class _Fits(jc.search.Judge):
    """A user's validation as a score: the share of held-out points the candidate fits within
    ``tol`` of the task's values (higher is better)."""

    name = "fits"
    higher_is_better = True

    def __init__(self, x, y, tol):
        self.x, self.y, self.tol, self.calls = x, y, tol, 0

    def __call__(self, f):
        self.calls += 1
        return float(jnp.mean(jnp.abs(f(self.x) - self.y) <= self.tol))

    def loss(self, figure):        # what the stall rule compares: the share missed
        return 1.0 - figure


def test_a_judge_of_your_own_decides_the_search():
    """The judge of docs/shrink.md's example: a score of the user's own validation, kept when at
    least ``eps``; the result is judged by it (name, figure) and so is every candidate."""
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
    x = BALL.sobol(512, skip=5000)
    judge = _Fits(x, jc.apply(teacher, x, activation="tanh"), 1e-3)
    res = jc.compress_to_tolerance(teacher, jc.Measured(metric=judge, n_samples=256),
                                   activation="tanh", domain=BALL, eps=0.95)
    assert res.met and res.metric == "fits" and res.metric_value >= 0.95
    rows = res.frontier.rows
    assert judge.calls == len(rows) + 1 and res.frontier.higher_is_better   # and the teacher
    assert judge(res.compressed) == pytest.approx(res.metric_value, abs=1e-9)
    assert any(r.error < 0.95 for r in rows)             # some candidate missed the score
    assert res.widths < (16, 16) and "fits" in res.history[0]
    with pytest.raises(ValueError, match="metric must be .* or a jc.search.Judge, got 'fit'"):
        jc.Measured(metric="fit")


def test_a_proposer_of_your_own_runs_in_the_loop():
    """A proposer is a generator over the loop: it yields candidates to build, reads each trial
    and returns its choice; a spent budget is thrown into it at its yield."""
    from jaxcompress.search import Candidates, Outcome, Search
    from jaxcompress.stopping import Clock, Stopped

    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
    net = jc.networks.as_network(teacher, activation="tanh")
    judge = jc.search.judges.Metric("rel_l2")

    def largest_first(search):          # orders from the top: the last that met eps
        chosen = None
        try:
            for k in (4, 3, 2, 1):
                trial = yield lambda k=k: search.candidates.uniform(jc.collocation, k, 4)
                if not trial.ok:
                    break
                chosen = trial
        except Stopped as why:
            return Outcome(chosen, search.clock.stop(why.status, why.reason, met=True))
        return Outcome(chosen, search.clock.stop("met", "the smallest order that met eps",
                                                 met=chosen is not None))

    search = Search(Candidates(net, BALL, teacher), judge, 1e-3, Clock())
    out = search.run(largest_first)
    figures = [t.figure for t in search.trials]
    assert out.stop.met and out.chosen.figure <= 1e-3
    assert [t.candidate.order for t in search.trials] == [4, 3, 2, 1][:len(figures)]
    assert all(f <= 1e-3 for f in figures[:-1]) and out.chosen is search.trials[-2]
    budget = Search(Candidates(net, BALL, teacher), judge, 1e-3, Clock(max_seconds=0))
    out = budget.run(largest_first)      # the first candidate alone, then the budget
    assert out.stop.status == "budget" and len(budget.trials) == 1


def test_a_method_value_is_searched_at_its_own_order():
    """``Measured(method=<a Method>)`` compresses at the method's order, once (it swept
    k = 0, 1, ... over the same method)."""
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1])
    res = jc.compress_to_tolerance(
        teacher, jc.Measured(method=jc.derivative_matching(3), shrink=False, n_samples=256),
        activation="tanh", domain=jc.Ball(2, 0.5), eps=1e-2)
    assert res.met and res.orders == (3, 3) and res.widths == (10, 10)
    assert [r.order for r in res.frontier.rows] == [3]
    assert res.history[0].startswith("order k = 3: widths [10, 10]")
