"""Bad input gives a clear error that names the problem (and, where useful, the fix).

Every check here happens on the host before any compilation, so the whole file runs in seconds.
"""

from __future__ import annotations

import importlib.util
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc

jax.config.update("jax_enable_x64", True)


@pytest.fixture(scope="module")
def params() -> list[dict[str, jax.Array]]:
    """A tiny [2, 6, 6, 1] network."""
    return jc.init_mlp(jax.random.PRNGKey(0), [2, 6, 6, 1])


def _with(params, layer: int, name: str, value) -> list[dict]:
    out = [dict(p) for p in params]
    out[layer][name] = value
    return out


# --- activations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "ReLU", jax.nn.relu, "elu", "leaky_relu"])
def test_non_analytic_activation(params, activation) -> None:
    with pytest.raises(ValueError, match="not analytic") as exc:
        jc.compress(params, activation=activation, order=2)
    # the message suggests a smooth substitute and how to register an activation
    assert "softplus" in str(exc.value)
    assert "register_activation" in str(exc.value)


def test_unknown_activation_name(params) -> None:
    with pytest.raises(ValueError, match=r"unknown activation 'foo'.*register_activation") as exc:
        jc.compress(params, activation="foo", order=2)
    assert "sigmoid" in str(exc.value)  # lists the registered names


def test_unregistered_activation_function(params) -> None:
    def my_act(x):
        return jnp.sin(x)

    with pytest.raises(ValueError, match=r"'my_act' is not registered.*register_activation"):
        jc.compress(params, activation=my_act, order=2)


def test_activation_of_wrong_type(params) -> None:
    with pytest.raises(TypeError, match="activation must be a name or a function"):
        jc.compress(params, activation=3, order=2)


@pytest.mark.parametrize("fn", [jc.derivative_features, jc.apply])
def test_non_analytic_activation_elsewhere(params, fn) -> None:
    kwargs = {"order": 1} if fn is jc.derivative_features else {"x": jnp.zeros((2,))}
    with pytest.raises(ValueError, match="not analytic"):
        fn(params, activation="relu", **kwargs)


# --- params --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(("layer", "name"), [(0, "kernel"), (1, "bias"), (2, "kernel")])
def test_non_finite_params(params, layer: int, name: str, bad: float) -> None:
    arr = np.array(params[layer][name])
    arr.flat[arr.size // 2] = bad
    broken = _with(params, layer, name, jnp.asarray(arr))
    with pytest.raises(ValueError, match=rf"layer {layer} {name} contains NaN or Inf"):
        jc.compress(broken, activation="sigmoid", order=2)
    with pytest.raises(ValueError, match=rf"layer {layer} {name} contains NaN or Inf"):
        jc.derivative_features(broken, activation="sigmoid", order=2)


def test_mismatched_kernel_shape(params) -> None:
    broken = _with(params, 1, "kernel", jnp.ones((5, 7)))
    broken = _with(broken, 1, "bias", jnp.ones((7,)))
    with pytest.raises(ValueError, match=r"layer 1 kernel has shape \(5, 7\); expected \(6, "):
        jc.compress(broken, activation="sigmoid", order=2)
    with pytest.raises(ValueError, match=r"layer 0's width 6"):
        jc.derivative_features(broken, activation="sigmoid", order=2)


@pytest.mark.parametrize("layer", [0, 2])
def test_bias_of_wrong_length(params, layer: int) -> None:
    width = params[layer]["kernel"].shape[1]
    broken = _with(params, layer, "bias", jnp.ones((width + 1,)))
    pattern = rf"layer {layer} bias has shape \({width + 1},\); expected \({width},\)"
    with pytest.raises(ValueError, match=pattern):
        jc.compress(broken, activation="sigmoid", order=2)


def test_one_dimensional_kernel(params) -> None:
    broken = _with(params, 0, "kernel", jnp.ones((6,)))
    with pytest.raises(ValueError, match=r"layer 0 kernel must be 2-D"):
        jc.compress(broken, activation="sigmoid", order=2)


def test_layer_with_wrong_keys(params) -> None:
    broken = [dict(params[0]), {"w": params[1]["kernel"], "b": params[1]["bias"]}, params[2]]
    with pytest.raises(TypeError, match=r"layer 1 must be a dict with keys 'kernel' and 'bias'"):
        jc.compress(broken, activation="sigmoid", order=2)


def test_integer_params(params) -> None:
    broken = _with(params, 0, "kernel", jnp.ones((2, 6), dtype=jnp.int32))
    with pytest.raises(TypeError, match=r"layer 0 has non-floating parameters"):
        jc.compress(broken, activation="sigmoid", order=2)


@pytest.mark.parametrize(
    "bad",
    [
        {"kernel": np.ones((2, 3)), "bias": np.ones(3)},
        np.ones((2, 3)),
        jnp.ones((2, 3)),
        "params",
    ],
    ids=["dict", "ndarray", "jax-array", "str"],
)
def test_params_not_a_list(bad) -> None:
    with pytest.raises(TypeError, match="params must be a list of dense layers"):
        jc.compress(bad, activation="sigmoid", order=2)


def test_flax_variables_dict(params) -> None:
    flax_style = {"params": {"Dense_0": params[0], "Dense_1": params[1], "Dense_2": params[2]}}
    with pytest.raises(TypeError, match=r"Flax variables dict; pass a list of dense layers"):
        jc.compress(flax_style, activation="sigmoid", order=2)


def test_flax_error_points_to_an_existing_module(params) -> None:
    with pytest.raises(TypeError) as exc:
        jc.compress({"params": {"Dense_0": params[0]}}, activation="sigmoid", order=2)
    named = re.findall(r"jaxcompress\.\w+", str(exc.value))
    assert named
    for module in named:
        assert importlib.util.find_spec(module) is not None, module


def test_too_few_layers(params) -> None:
    with pytest.raises(ValueError, match="at least 2 layers"):
        jc.compress(params[:1], activation="sigmoid", order=2)


def test_stacked_networks_need_vmap(params) -> None:
    stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), params)
    with pytest.raises(ValueError, match=r"expected one network.*vmap"):
        jc.compress(stacked, activation="sigmoid", order=2)
    with pytest.raises(ValueError, match=r"derivative_features: expected one network.*vmap"):
        jc.derivative_features(stacked, activation="sigmoid", order=2)


# --- order ---------------------------------------------------------------------------------------


_BAD_ORDERS = [(-1, ValueError), (2.5, TypeError), (2.0, TypeError), (True, TypeError),
               ("2", TypeError), (None, TypeError)]


@pytest.mark.parametrize(("order", "error"), _BAD_ORDERS)
@pytest.mark.parametrize("fn", ["compress", "derivative_features"])
def test_bad_order(params, order, error, fn: str) -> None:
    # compress without an order has no method: the error says to give one
    match = (r"give a method" if order is None and fn == "compress"
             else r"order must be (>= 0|a non-negative int)")
    with pytest.raises(error, match=match):
        getattr(jc, fn)(params, activation="sigmoid", order=order)


@pytest.mark.parametrize(("order", "error"), [([2, -1], ValueError), ([2, 2.5], TypeError),
                                              ((False, 2), TypeError)])
def test_bad_entry_in_order_list(params, order, error) -> None:
    with pytest.raises(error, match=r"order must be (>= 0|a non-negative int)"):
        jc.compress(params, activation="sigmoid", order=order)


@pytest.mark.parametrize("order", [[2], [2, 2, 2], ()])
def test_order_list_of_wrong_length(params, order) -> None:
    match = (r"order is an empty sequence" if not order else
             rf"order has {len(order)} entries; expected one per hidden layer \(2\)")
    with pytest.raises(ValueError, match=match):
        jc.compress(params, activation="sigmoid", order=order)


@pytest.mark.parametrize("fn", ["compress", "derivative_features"])
def test_memory_guard_refuses_huge_feature_count_fast(fn: str) -> None:
    # compress: a layer that selects (D_30 = 5,456 < 6,000 in 3 inputs; a layer that keeps all
    # its neurons needs no features); derivative_features: every layer
    big_in = jc.init_mlp(jax.random.PRNGKey(1), [12, 4, 1] if fn == "derivative_features"
                         else [3, 6000, 1])
    start = time.perf_counter()
    match = (r"k=30 with d_in=12.*GiB.*MAX_FEATURE_BYTES" if fn == "derivative_features" else
             r"order=30.*needs about .* GiB per device \(Taylor pass .*over the limit.*"
             r"MAX_FEATURE_BYTES")
    # compress keeps a layer of width <= D_k whole without features: ask for a smaller width
    args = ((big_in,) if fn == "derivative_features" else
            (big_in, jc.derivative_matching(30, widths=[2])))
    kwargs = {"order": 30} if fn == "derivative_features" else {}
    with pytest.raises(ValueError, match=match) as exc:
        getattr(jc, fn)(*args, activation="sigmoid", **kwargs)
    elapsed = time.perf_counter() - start
    assert "Lower the order" in str(exc.value)
    assert elapsed < 5.0, f"the guard took {elapsed:.1f} s: it must refuse before any work"


def test_memory_guard_counts_the_width() -> None:
    # D_6 in 6 inputs is small, but the product table times a huge width is not (the first
    # hidden layer is in closed form, without the table: the wide layer is the second)
    wide = [{"kernel": jnp.zeros((6, 8), jnp.float32), "bias": jnp.zeros((8,), jnp.float32)},
            {"kernel": jnp.zeros((8, 2_000_000), jnp.float32),
             "bias": jnp.zeros((2_000_000,), jnp.float32)},
            {"kernel": jnp.zeros((2_000_000, 1), jnp.float32),
             "bias": jnp.zeros((1,), jnp.float32)}]
    with pytest.raises(ValueError, match=r"for width 2000000.*GiB"):
        jc.derivative_features(wide, activation="sigmoid", order=6)


# --- widths and configuration names --------------------------------------------------------------


def test_width_out_of_range(params) -> None:
    with pytest.raises(ValueError, match=r"target width 7 for hidden layer 1 must be in \[1, 6\]"):
        jc.compress(params, jc.derivative_matching(2, widths=[7, 3]), activation="sigmoid")
    for widths in ([3, 0], [3, -1], [3, 2.5]):
        with pytest.raises(ValueError, match=r"widths must be positive ints"):
            jc.derivative_matching(2, widths=widths)


def test_widths_of_wrong_length(params) -> None:
    with pytest.raises(ValueError, match=r"widths has 3 entries; expected one per hidden layer"):
        jc.compress(params, jc.derivative_matching(2, widths=[2, 2, 2]), activation="sigmoid")


@pytest.mark.parametrize(
    ("kwarg", "pattern"),
    [("layer_order", "layer_order must be one of"), ("backend", "backend must be one of"),
     ("selector", "selector must be one of")],
)
def test_unknown_configuration_names(kwarg: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=rf"{pattern} .*'bogus'"):
        jc.derivative_matching(2, **{kwarg: "bogus"})


def test_exhaustive_refused_eagerly_on_a_large_layer() -> None:
    wide = jc.init_mlp(jax.random.PRNGKey(2), [2, 40, 1])
    with pytest.raises(ValueError, match=r"hidden layer 1: the exhaustive.*C\(40, 15\).*subsets"):
        jc.compress(wide, jc.derivative_matching(4, selector="exhaustive"), activation="sigmoid")


# --- derivative_features -------------------------------------------------------------------------


def test_bad_backend(params) -> None:
    with pytest.raises(ValueError, match=r"backend must be one of .*'jvp'"):
        jc.derivative_features(params, activation="sigmoid", order=2, backend="jvp")


@pytest.mark.parametrize("center", [[0.0, 0.0, 0.0], [0.0], np.zeros((1, 2)), 0.0])
def test_center_of_wrong_shape(params, center) -> None:
    with pytest.raises(ValueError, match=r"center has shape .*; expected \(2,\)"):
        jc.derivative_features(params, activation="sigmoid", order=2, center=center)


# --- registry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["relu", "abs", "hard_tanh"])
def test_register_non_analytic_name_refused(name: str) -> None:
    with pytest.raises(ValueError, match=rf"'{name}' is reserved for a non-analytic"):
        jc.register_activation(name, jnp.tanh)
    with pytest.raises(ValueError, match="not analytic"):
        jc.get_activation(name)


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_reregister_without_overwrite_refused(name: str) -> None:
    before = jc.get_activation(name)
    with pytest.raises(ValueError, match=rf"'{name}' is already registered.*overwrite=True"):
        jc.register_activation(name, jnp.sin)
    assert jc.get_activation(name) is before  # the registry is untouched


@pytest.mark.parametrize("name", ["", None, 3])
def test_register_bad_name(name) -> None:
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        jc.register_activation(name, jnp.sin)


# --- sup_error -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 3])
def test_sup_error_domain_of_wrong_dimension(params, dim: int) -> None:
    with pytest.raises(ValueError, match=rf"takes inputs of size 2; the domain has dim {dim}"):
        jc.sup_error(params, params, activation="sigmoid", domain=jc.Ball(dim, 1.0),
                     key=jax.random.PRNGKey(0))


def test_sup_error_different_output_sizes(params) -> None:
    other = jc.init_mlp(jax.random.PRNGKey(3), [2, 4, 3])
    with pytest.raises(ValueError, match=r"different output sizes \(1 vs 3\)"):
        jc.sup_error(params, other, activation="sigmoid", domain=jc.Ball(2, 1.0),
                     key=jax.random.PRNGKey(0))


def test_sup_error_non_analytic_and_bad_samples(params) -> None:
    with pytest.raises(ValueError, match="not analytic"):
        jc.sup_error(params, params, activation="relu", domain=jc.Ball(2),
                     key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        jc.sup_error(params, params, activation="sigmoid", domain=jc.Ball(2),
                     key=jax.random.PRNGKey(0), n_samples=0)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [({"dim": 0}, "dim must be a positive int"), ({"dim": 2, "radius": 0.0}, "radius must be"),
     ({"dim": 2, "radius": -1.0}, "radius must be"),
     ({"dim": 2, "center": np.zeros(3)}, r"center has shape \(3,\); expected \(2,\)")],
)
def test_bad_ball(kwargs, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        jc.Ball(**kwargs)


@pytest.mark.parametrize("radius", [0.0, -1.0, float("inf"), float("nan"), [1.0, 2.0]])
def test_radius_must_be_finite_and_positive(params, radius) -> None:
    # inf / nan used to return a network with error 0.23 (R = 1 gives 1e-6) without a word
    with pytest.raises(ValueError, match="radius must be one finite positive number"):
        jc.compress(params, activation="sigmoid", order=2, radius=radius)
    if np.ndim(radius) == 0:
        with pytest.raises(ValueError, match="radius must be one finite positive number"):
            jc.Ball(2, radius)


def test_radius_none_is_the_default_unit_ball(params) -> None:
    # radius=None used to raise a raw JAX error; it now means "not given": the unit ball
    a, _ = jc.compress(params, activation="sigmoid", order=2, radius=None)
    b, _ = jc.compress(params, activation="sigmoid", order=2, radius=1.0)
    for la, lb in zip(a, b, strict=True):
        np.testing.assert_array_equal(la["kernel"], lb["kernel"])


@pytest.mark.parametrize("rtol", [-1e-3, 1.0, float("nan"), True])
def test_bad_rtol(rtol) -> None:
    for selector in (jc.PivotedQR, jc.MaxVol, jc.OMP, jc.GreedyGS, jc.WeightNorm):
        with pytest.raises(ValueError, match="rtol must be a number in"):
            selector(rtol=rtol)


def test_apply_names_the_input_size(params) -> None:
    with pytest.raises(ValueError, match=r"x has shape \(5, 3\); expected \(\.\.\., 2\)"):
        jc.apply(params, jnp.ones((5, 3)), activation="sigmoid")


# --- files and the command line ------------------------------------------------------------------


def test_load_of_a_params_list_is_a_network_that_still_unpacks(params, tmp_path) -> None:
    path = tmp_path / "m.jcz"
    jc.save(path, params, activation="tanh", metadata={"note": "x"})
    loaded = jc.load(path)
    p, act, meta = loaded
    assert loaded[1] == act == loaded.activation == "tanh"
    assert loaded[2]["note"] == "x" and loaded.sizes == [2, 6, 6, 1]
    x = jnp.linspace(-1.0, 1.0, 8).reshape(4, 2)
    np.testing.assert_array_equal(loaded(x), jc.apply(p, x, activation="tanh"))


def test_a_stored_activation_is_never_replaced(params, tmp_path) -> None:
    from jaxcompress import cli

    npz = tmp_path / "sig.npz"
    jc.save_npz(npz, params, activation="sigmoid")
    with pytest.raises(ValueError, match="stores activation 'sigmoid'; the given activation "
                                         "'tanh' contradicts it"):
        jc.load_npz(npz, activation="tanh")
    assert jc.load_npz(npz, activation="logistic").activation == "sigmoid"  # an alias: fine
    jcz = tmp_path / "sig.jcz"
    jc.save(jcz, params, activation="sigmoid")
    for src in (npz, jcz):
        for cmd in (["compress", str(src), "-o", str(tmp_path / "o.jcz"), "--order", "1"],
                    ["certify", str(src), "--eps", "1e-3"]):
            assert cli.main(cmd + ["--activation", "tanh"]) == 2


def test_cli_checks_the_output_path_before_working(params, tmp_path, capsys) -> None:
    from jaxcompress import cli

    src = tmp_path / "t.jcz"
    jc.save(src, params, activation="sigmoid")
    t0 = time.perf_counter()
    rc = cli.main(["compress", str(src), "-o", str(tmp_path / "missing" / "o.jcz"), "--order",
                   "2"])
    assert rc == 2 and time.perf_counter() - t0 < 5.0
    err = capsys.readouterr().err
    assert "output folder" in err and "does not exist" in err
    assert cli.main(["compress", str(tmp_path / "nope.jcz"), "-o", str(tmp_path / "o.jcz"),
                     "--order", "2"]) == 2


def test_cli_order_search_reports_the_true_best_and_sound_advice(params) -> None:
    from jaxcompress import cli

    domain = jc.Ball(2, 1.0)
    growing = iter([0.5, 0.1, 0.05, 0.2, 0.4, 0.8])  # best at k = 2, then growing with k
    with pytest.raises(ValueError) as exc:
        cli._order_search(params, "sigmoid", domain, 1e-3, 5, "derivative",
                          lambda p: next(growing))
    msg = str(exc.value)
    assert "the best is 5.000e-02 at k = 2" in msg and "grows with k" in msg
    assert "--method collocation" in msg and "raise --max-order" not in msg
    falling = iter([0.5, 0.1, 0.05, 0.02])
    with pytest.raises(ValueError, match=r"best is 2.000e-02 at k = 3; raise --max-order"):
        cli._order_search(params, "sigmoid", domain, 1e-3, 3, "derivative",
                          lambda p: next(falling))


def test_cli_before_row_is_the_rounding_floor_and_help_shows_defaults(tmp_path, capsys) -> None:
    from jaxcompress import cli

    teacher = jc.init_mlp(jax.random.PRNGKey(1), [2, 30, 1])
    src = tmp_path / "t.jcz"
    jc.save(src, teacher, activation="sigmoid")
    assert cli.main(["compress", str(src), "-o", str(tmp_path / "o.jcz"), "--order", "3",
                     "--samples", "256"]) == 0
    before = next(line for line in capsys.readouterr().out.splitlines()
                  if line.strip().startswith("before"))
    floor = float(before.split()[-1])
    assert 0 < floor < 1e-13
    with pytest.raises(SystemExit):
        cli.main(["compress", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 1.0)" in out and "(default: 8192)" in out


def test_memory_estimate_names_the_parts_and_divides_over_devices(monkeypatch) -> None:
    from jaxcompress import taylor
    from jaxcompress.planning import memory_estimate

    sizes = [8, 4096, 4096, 1]
    one = memory_estimate(jc.derivative_matching(6), sizes, jnp.float64, jc.Ball(8, 1.0))
    # C(22, 6) = 74,613 coefficient products of each of 4,096 neurons, in float64
    assert one["Taylor pass"] >= 74_613 * 4096 * 8
    four = memory_estimate(jc.derivative_matching(6), sizes, jnp.float64, jc.Ball(8, 1.0),
                           devices=4)
    assert sum(four.values()) <= sum(one.values()) / 4 + 4
    monkeypatch.setattr(taylor, "MAX_FEATURE_BYTES", 2**20)  # a 1 MiB device
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 200, 1])
    with pytest.raises(ValueError, match=r"collocation.*needs about.*activations at the nodes"):
        # (D_20 = 231 >= 200 would keep the layer whole, with nothing to allocate)
        jc.compress(params, jc.collocation(20, widths=[100]), activation="sigmoid")
