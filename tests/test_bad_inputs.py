"""Bad input: every mistake a user makes ends in a clear error that names the argument, the
expected and the actual value (and, where useful, the fix), never in a silent result.

The first part is the catalogue of messages by function; the second the cases found by trying
bad inputs as a new user would, each of which used to pass silently or misleadingly (the
property-based search for more is ``test_bad_inputs_fuzz.py``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import cli
from jaxcompress.compression import compress_layer

jax.config.update("jax_enable_x64", True)


# ==================================================================================================
# The messages, function by function
# ==================================================================================================

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


@pytest.mark.parametrize("fn", [jc.features.derivative_features, jc.apply])
def test_non_analytic_activation_elsewhere(params, fn) -> None:
    kwargs = {"order": 1} if fn is jc.features.derivative_features else {"x": jnp.zeros((2,))}
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
        jc.features.derivative_features(broken, activation="sigmoid", order=2)


def test_mismatched_kernel_shape(params) -> None:
    broken = _with(params, 1, "kernel", jnp.ones((5, 7)))
    broken = _with(broken, 1, "bias", jnp.ones((7,)))
    with pytest.raises(ValueError, match=r"layer 1 kernel has shape \(5, 7\); expected \(6, "):
        jc.compress(broken, activation="sigmoid", order=2)
    with pytest.raises(ValueError, match=r"layer 0's width 6"):
        jc.features.derivative_features(broken, activation="sigmoid", order=2)


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
        jc.features.derivative_features(stacked, activation="sigmoid", order=2)


# --- order ---------------------------------------------------------------------------------------


_BAD_ORDERS = [(-1, ValueError), (2.5, TypeError), (2.0, TypeError), (True, TypeError),
               ("2", TypeError), (None, TypeError)]


#: The functions whose order is checked, by name (derivative_features in jaxcompress.features).
_VERBS = {"compress": jc.compress, "derivative_features": jc.features.derivative_features}


@pytest.mark.parametrize(("order", "error"), _BAD_ORDERS)
@pytest.mark.parametrize("fn", ["compress", "derivative_features"])
def test_bad_order(params, order, error, fn: str) -> None:
    # compress without an order has no method: the error says to give one
    match = (r"give a method" if order is None and fn == "compress"
             else r"order must be (>= 0|a non-negative int)")
    with pytest.raises(error, match=match):
        _VERBS[fn](params, activation="sigmoid", order=order)


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
        _VERBS[fn](*args, activation="sigmoid", **kwargs)
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
        jc.features.derivative_features(wide, activation="sigmoid", order=6)


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
        jc.features.derivative_features(params, activation="sigmoid", order=2, backend="jvp")


@pytest.mark.parametrize("center", [[0.0, 0.0, 0.0], [0.0], np.zeros((1, 2)), 0.0])
def test_center_of_wrong_shape(params, center) -> None:
    with pytest.raises(ValueError, match=r"center has shape .*; expected \(2,\)"):
        jc.features.derivative_features(params, activation="sigmoid", order=2, center=center)


# --- registry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["relu", "abs", "hard_tanh"])
def test_register_non_analytic_name_refused(name: str) -> None:
    with pytest.raises(ValueError, match=rf"'{name}' is reserved for a non-analytic"):
        jc.register_activation(name, jnp.tanh)
    with pytest.raises(ValueError, match="not analytic"):
        jc.activations.get_activation(name)


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_reregister_without_overwrite_refused(name: str) -> None:
    before = jc.activations.get_activation(name)
    with pytest.raises(ValueError, match=rf"'{name}' is already registered.*overwrite=True"):
        jc.register_activation(name, jnp.sin)
    assert jc.activations.get_activation(name) is before  # the registry is untouched


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
    for selector in (jc.PivotedQR, jc.MaxVol, jc.OMP, jc.select.GreedyGS, jc.select.WeightNorm):
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
    jc.io.save_npz(npz, params, activation="sigmoid")
    with pytest.raises(ValueError, match="stores activation 'sigmoid'; the given activation "
                                         "'tanh' contradicts it"):
        jc.io.load_npz(npz, activation="tanh")
    assert jc.io.load_npz(npz, activation="logistic").activation == "sigmoid"  # an alias: fine
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


def test_seed_key_is_prngkey_built_on_the_host(monkeypatch) -> None:
    from jaxcompress._checks import seed_key

    refs = {seed: jax.random.PRNGKey(seed) for seed in (0, 1, 7, 12345, 2**31 - 1, 2**31)}
    prngkey = jax.random.PRNGKey
    asked = []
    monkeypatch.setattr(jax.random, "PRNGKey", lambda s: asked.append(s) or prngkey(s))
    for seed, ref in refs.items():
        key = seed_key(seed)
        assert key.dtype == ref.dtype and key.shape == ref.shape
        np.testing.assert_array_equal(np.asarray(key), np.asarray(ref))
        np.testing.assert_array_equal(jax.random.normal(key, (3,)), jax.random.normal(ref, (3,)))
    assert asked == [2**31]   # the others never compile PRNGKey's programs; past them, its own


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


# ==================================================================================================
# Cases that used to pass silently (a float64 [2, 6, 6, 1] network: params64)
# ==================================================================================================

ACT = "sigmoid"


@pytest.fixture(scope="module")
def params64():
    """A tiny [2, 6, 6, 1] float64 network."""
    return jc.init_mlp(jax.random.PRNGKey(0), [2, 6, 6, 1], dtype=jnp.float64)


@pytest.fixture(scope="module")
def x_data():
    return jax.random.uniform(jax.random.PRNGKey(3), (40, 2), jnp.float64, -1.0, 1.0)


# --- the ten silent or misleading cases -----------------------------------------------------------


def test_case1_data_matching_non_finite_or_complex_data(x_data) -> None:
    bad = np.asarray(x_data).copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"data_matching: x must be finite.*index \(3, 1\)"):
        jc.data_matching(bad, order=2)
    with pytest.raises(ValueError, match="data_matching: x must be finite"):
        jc.data_matching(jnp.full((4, 2), jnp.inf), order=2)
    with pytest.raises(TypeError, match="data_matching: x must be real"):
        jc.data_matching(np.asarray(x_data) + 1j, order=2)
    # nested lists are data too: converted, not split into one pytree leaf per number
    m = jc.data_matching(np.asarray(x_data).tolist(), order=2)
    assert isinstance(m.features.x, np.ndarray) and m.features.x.shape == (40, 2)


@pytest.fixture(scope="module")
def selecting():
    """A [2, 8, 8, 1] network: at order 2 (D_2 = 6 < 8) every layer selects, so the data is used
    (a layer kept whole, D_k >= d_l, computes nothing and the teacher comes back exactly)."""
    return jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 8, 1], dtype=jnp.float64)


def test_case1_best_of_never_picks_a_non_finite_candidate(selecting, x_data) -> None:
    params64 = selecting

    # traced data cannot be refused: NaN data gives a NaN candidate, which must not win
    @jax.jit
    def run(x):
        return jc.compress(params64, jc.best_of(jc.data_matching(x, order=2),
                                              jc.derivative_matching(2)),
                           activation=ACT, domain=jc.Ball(2, 1.0))

    small, info = run(x_data.at[0, 0].set(jnp.nan))
    assert int(info.choice) == 1
    assert np.isfinite(float(info.error_estimate))
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree.leaves(small))
    _, info_ok = run(x_data)
    assert np.isfinite(float(info_ok.error_estimate))


def test_case1_traced_non_finite_data_gives_nan_estimate(selecting, x_data) -> None:
    params64 = selecting

    @jax.jit
    def run(x):
        return jc.compress(params64, jc.data_matching(x, order=2), activation=ACT,
                           domain=jc.Ball(2, 1.0))

    assert np.isnan(float(run(x_data.at[5, 0].set(jnp.inf))[1].error_estimate))
    # all candidates non-finite: the estimate stays NaN
    both = jax.jit(lambda x: jc.compress(
        params64, jc.best_of(jc.data_matching(x, order=2), jc.data_matching(x[::-1], order=2)),
        activation=ACT, domain=jc.Ball(2, 1.0))[1].error_estimate)
    assert np.isnan(float(both(x_data.at[0, 0].set(jnp.nan))))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_case2_ball_non_finite_center(bad) -> None:
    with pytest.raises(ValueError, match=r"Ball: center must be finite"):
        jc.Ball(2, 1.0, center=[0.0, bad])
    with pytest.raises(ValueError, match=r"Ball: center must be finite"):
        jc.Ball(2, 1.0, center=jnp.asarray([bad, 0.0]))


def test_case3_parameterization_with_non_finite_map(params64) -> None:
    def iota(u):
        return jnp.stack([u[0], jnp.log(u[0])])  # NaN for u < 0

    dom = jc.Parameterization(iota, jc.Ball(1, 0.5))
    with pytest.raises(ValueError, match=r"compress: the Parameterization's fn is not finite at "
                                         r"u = \[.*expected a finite analytic map"):
        jc.compress(params64, jc.derivative_matching(2), activation=ACT, domain=dom)


def test_case4_error_estimate_refuses_other_output_size(params64) -> None:
    two = jc.init_mlp(jax.random.PRNGKey(1), [2, 6, 2])
    with pytest.raises(ValueError, match=r"error_estimate: the networks have different output "
                                         r"sizes \(2 vs 1\)"):
        jc.error_estimate(two, params64, activation=ACT, domain=jc.Ball(2, 1.0))
    three = jc.init_mlp(jax.random.PRNGKey(1), [3, 6, 1])
    with pytest.raises(ValueError, match=r"error_estimate: params_a takes inputs of size 3"):
        jc.error_estimate(three, params64, activation=ACT, domain=jc.Ball(2, 1.0))


def test_case5_flax_model_with_tanh_gelu_is_not_taken_for_exact_gelu() -> None:
    nnx = pytest.importorskip("flax.nnx")
    jf = pytest.importorskip("jaxcompress.flax")

    class Net(nnx.Module):  # float32, no declared activation: only the check can tell
        def __init__(self, gelu):
            rngs = nnx.Rngs(0)
            self.inp = nnx.Linear(2, 32, rngs=rngs, param_dtype=jnp.float32)
            self.out = nnx.Linear(32, 1, rngs=rngs, param_dtype=jnp.float32)
            self.gelu = gelu

        def __call__(self, x):
            return self.out(self.gelu(self.inp(x)))

    with pytest.raises(ValueError, match=r"differs from the MLP.*'gelu'.*max difference"):
        jf.nnx_params(Net(jax.nn.gelu), activation="gelu")
    exact, _ = jf.nnx_params(Net(lambda x: jax.nn.gelu(x, approximate=False)),
                             activation="gelu")
    assert exact[0]["kernel"].dtype == jnp.float32  # float32 models still pass
    # traced, the tanh form is matched numerically and structurally, never the exact GELU
    net = jc.trace_module(Net(jax.nn.gelu), jnp.zeros((4, 2), jnp.float32))
    _, info = jc.compress(net, jc.derivative_matching(2), domain=jc.Ball(2, 1.0))
    assert info.activation == "gelu_tanh"


def test_case6_save_and_polish_refuse_a_record_of_another_network(params64, tmp_path) -> None:
    small, info = jc.compress(params64, jc.derivative_matching(1), activation=ACT)  # width 3
    other = jc.init_mlp(jax.random.PRNGKey(2), [2, 4, 4, 1])
    with pytest.raises(ValueError, match=r"save: info describes hidden widths \[3, 3\]; the "
                                         r"params have \[4, 4\]"):
        jc.save(tmp_path / "m.jcz", other, activation=ACT, info=info)
    with pytest.raises(ValueError, match=r"save: info says activation 'sigmoid'.*'tanh'"):
        jc.save(tmp_path / "m.jcz", small, activation="tanh", info=info)
    assert not os.listdir(tmp_path)
    with pytest.raises(ValueError, match=r"polish: info describes hidden widths \[3, 3\]"):
        jc.polish(other, params64, activation=ACT, domain=jc.Ball(2, 1.0), info=info, steps=1)
    with pytest.raises(TypeError, match="save: info must be a jc.CompressInfo"):
        jc.save(tmp_path / "m.jcz", small, activation=ACT, info={"layers": []})


def test_case7_mixed_dtypes_refused(params64) -> None:
    mixed = [dict(layer) for layer in params64]
    mixed[1] = {"kernel": params64[1]["kernel"].astype(jnp.float32), "bias": params64[1]["bias"]}
    with pytest.raises(TypeError, match=r"compress: layer 1 kernel has dtype float32; expected "
                                        r"float64"):
        jc.compress(mixed, jc.derivative_matching(2), activation=ACT)


def test_case8_demo_with_empty_order_range(tmp_path, capsys) -> None:
    rc = cli.main(["demo", "--kmin", "5", "--kmax", "2", "--width", "8",
                   "--out", str(tmp_path / "out")])
    assert rc == 2
    assert "demo: need 0 <= --kmin <= --kmax, got --kmin 5 --kmax 2" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("radius", [0.0, np.nan, np.inf, -1.0])
def test_case9_traced_invalid_radius_gives_nan_estimate(params64, radius) -> None:
    run = jax.jit(lambda r: jc.compress(params64, jc.derivative_matching(2), activation=ACT,
                                        domain=jc.Ball(2, r))[1].error_estimate)
    assert np.isnan(float(run(jnp.float64(radius))))
    assert np.isfinite(float(run(jnp.float64(0.5))))


def test_case9_traced_invalid_box_or_center_gives_nan_estimate(params64) -> None:
    box = jax.jit(lambda lo, hi: jc.error_estimate(params64, params64, activation=ACT,
                                                   domain=jc.Box(lo, hi)))
    assert np.isnan(float(box(jnp.asarray([0.0, 1.0]), jnp.asarray([1.0, 0.5]))))
    assert float(box(jnp.asarray([0.0, 0.0]), jnp.asarray([1.0, 0.5]))) == 0.0
    ball = jax.jit(lambda c: jc.error_estimate(params64, params64, activation=ACT,
                                               domain=jc.Ball(2, 1.0, center=c)))
    assert np.isnan(float(ball(jnp.asarray([0.0, jnp.nan]))))


def test_case10_trim_refuses_an_atol_that_drops_a_whole_layer(params64) -> None:
    small, info = jc.compress(params64, jc.derivative_matching(1), activation=ACT)
    with pytest.raises(ValueError, match=r"trim: atol=1e\+09 drops every neuron of hidden layer "
                                         r"\d \(its largest outgoing weight is"):
        jc.trim(small, atol=1e9)
    for bad in (-1.0, np.nan, "0"):
        with pytest.raises(ValueError, match="trim: atol must be one finite number >= 0"):
            jc.trim(small, atol=bad)
    assert jc.layer_sizes(jc.trim(small)) == [2, 3, 3, 1]


# --- raw errors that became messages --------------------------------------------------------------


def test_zero_output_dimension(params64) -> None:
    zero = [dict(layer) for layer in params64]
    zero[-1] = {"kernel": jnp.zeros((6, 0)), "bias": jnp.zeros((0,))}
    with pytest.raises(ValueError, match=r"compress: layer 2 kernel has shape \(6, 0\); expected "
                                         "every width >= 1"):
        jc.compress(zero, jc.derivative_matching(2), activation=ACT)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_params(params64, dtype) -> None:
    half = jax.tree.map(lambda a: a.astype(dtype), params64)
    with pytest.raises(TypeError, match=rf"compress: params have dtype {jnp.dtype(dtype).name}; "
                                        r"expected one of \('float32', 'float64'\)"):
        jc.compress(half, jc.derivative_matching(2), activation=ACT)


def test_nested_list_params(params64) -> None:
    nested = [{k: np.asarray(v).tolist() for k, v in layer.items()} for layer in params64]
    with pytest.raises(TypeError, match=r"compress: layer 0 kernel must be an array") as exc:
        jc.compress(nested, jc.derivative_matching(2), activation=ACT)
    assert len(str(exc.value)) < 200  # the values are not dumped


@pytest.mark.parametrize("key, kind", [
    (0, TypeError), (None, TypeError), (7.0, TypeError),
    (np.zeros(3, np.uint32), ValueError), (jnp.zeros(2, jnp.float32), ValueError),
    (jax.random.split(jax.random.PRNGKey(0), 2), ValueError)])
def test_bad_prng_keys(params64, key, kind) -> None:
    with pytest.raises(kind, match="RandomChoice: key must be .*PRNG key"):
        jc.select.RandomChoice(key)
    with pytest.raises(kind, match="sup_error: key must be .*PRNG key"):
        jc.sup_error(params64, params64, activation=ACT, domain=jc.Ball(2), key=key)
    with pytest.raises(kind, match="init_mlp: key must be .*PRNG key"):
        jc.init_mlp(key, [2, 3, 1])
    if key is None:  # compress_to_tolerance's default: PRNGKey(0)
        return
    with pytest.raises(kind, match="Measured: key must be .*PRNG key"):
        jc.compress_to_tolerance(params64, jc.Measured(key=key), activation=ACT, domain=jc.Ball(2),
                                 eps=1e-3)


def test_good_prng_keys_pass() -> None:
    jc.select.RandomChoice(jax.random.key(0))
    jc.select.RandomChoice(jax.random.PRNGKey(0))


def test_polish_optimizer_by_name(params64) -> None:
    with pytest.raises(TypeError, match=r"polish: optimizer must be an optax "
                                        r"GradientTransformation.*got str 'adam'"):
        jc.polish(params64, params64, activation=ACT, domain=jc.Ball(2), optimizer="adam")


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_point_counts(params64, n) -> None:
    with pytest.raises(ValueError, match=r"error_estimate: n_points must be >= 1"):
        jc.error_estimate(params64, params64, activation=ACT, domain=jc.Ball(2), n_points=n)
    with pytest.raises(ValueError, match=r"certify: n_samples must be >= 1"):
        jc.certify(params64, activation=ACT, domain=jc.Ball(2), eps=1e-3, n_samples=n)


def test_negative_max_order(params64, tmp_path, capsys) -> None:
    with pytest.raises(ValueError, match=r"Measured: max_order must be >= 0 \(an int\), got -1"):
        jc.compress_to_tolerance(params64, jc.Measured(max_order=-1), activation=ACT,
                                 domain=jc.Ball(2), eps=1e-3)
    path = tmp_path / "t.jcz"
    jc.save(path, params64, activation=ACT)
    rc = cli.main(["compress", str(path), "-o", str(tmp_path / "o.jcz"), "--eps", "1e-3",
                   "--max-order", "-1"])
    assert rc == 2 and "--max-order must be >= 0, got -1" in capsys.readouterr().err


def test_register_activation_non_analytic_or_not_callable() -> None:
    with pytest.raises(ValueError, match=r"register_activation: 'myrelu': fn 'relu' is not "
                                         "analytic"):
        jc.register_activation("myrelu", jax.nn.relu)
    with pytest.raises(TypeError, match=r"register_activation: fn must be a function, got int"):
        jc.register_activation("foo", 3)
    with pytest.raises(ValueError, match=r"register_activation: rho_sigma must be a number > 0"):
        jc.register_activation("foo", jnp.sin, rho_sigma=0.0)
    assert "myrelu" not in jc.activations.registered_activations()
    assert "foo" not in jc.activations.registered_activations()


def test_compress_layer_bare_array(params64) -> None:
    with pytest.raises(TypeError, match=r"compress_layer: features must be a "
                                        r"jaxcompress.features.LayerFeatures.*got float64\[6, 6\]"):
        compress_layer(jnp.ones((6, 6)), params64[1]["kernel"], 3, jc.PivotedQR())


def test_save_onto_a_folder(params64, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"save: path .* is a folder; expected a file name"):
        jc.save(tmp_path, params64, activation=ACT)
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}.tmp"))


def test_cli_certify_bad_center(params64, tmp_path, capsys) -> None:
    path = tmp_path / "t.jcz"
    jc.save(path, params64, activation=ACT)
    assert cli.main(["certify", str(path), "--eps", "1e-3", "--center", "a,b"]) == 2
    assert "certify: --center must be comma-separated numbers (e.g. 0.5,0), got 'a,b' ('a' is "\
           "not a number)" in capsys.readouterr().err


def test_cli_certify_help_has_no_default_for_required_eps(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["certify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--eps EPS target sup error (required)" in out
    assert "target sup error (required) (default" not in out


def test_method_given_by_name(params64) -> None:
    with pytest.raises(TypeError, match=r"compress: method must be a jc.Method.*got str "
                                        r"'derivative_matching'; for the method "
                                        r"'derivative_matching' write jc.derivative_matching\(k\)"):
        jc.compress(params64, "derivative_matching", activation=ACT, order=4)


def test_parameterization_dimension_in_messages(params64) -> None:
    dom = jc.Parameterization(lambda u: jnp.stack([u[0], u[0] ** 2]), jc.Ball(1, 0.5))
    with pytest.raises(TypeError, match=r"sup_error: domain must be a jaxcompress.Ball or "
                                        r"jaxcompress.Box.*Parameterization"):
        jc.sup_error(params64, params64, activation=ACT, domain=dom, key=jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match=r"certify: .*a Parameterization \(features in its "
                                        r"parameters u, of dimension 1, for a network of 2 "
                                        r"inputs\)"):
        jc.certify(params64, activation=ACT, domain=dom, eps=1e-3)


def test_load_npz_on_a_messagepack_file(params64, tmp_path) -> None:
    path = tmp_path / "m.jcz"
    jc.save(path, params64, activation=ACT)
    with pytest.raises(ValueError, match=r"load_npz: .* the file is a jaxcompress.save file "
                                         r"\(MessagePack\): read it with jc.load"):
        jc.io.load_npz(path, activation=ACT)


def test_non_finite_parameters_of_any_network_are_named(params64) -> None:
    """NaN or Inf in a traced network's kernel or bias: refused, naming the leaf and where (it
    used to give a NaN estimate, or, for an Inf bias, a finite and wrong network)."""
    def fn(p, x):
        return jc.apply(p, x, activation=ACT)

    x = jnp.zeros((4, 2))
    nan_kernel = [dict(layer) for layer in params64]
    nan_kernel[0]["kernel"] = nan_kernel[0]["kernel"].at[0, 1].set(jnp.nan)
    with pytest.raises(ValueError, match=r"compress: the parameter \[0\]\['kernel'\] must be "
                                         r"finite.*index \(0, 1\)"):
        jc.compress(jc.trace(fn, nan_kernel, x), jc.collocation(2))
    inf_bias = [dict(layer) for layer in params64]
    inf_bias[1]["bias"] = inf_bias[1]["bias"].at[2].set(jnp.inf)
    with pytest.raises(ValueError, match=r"the parameter \[1\]\['bias'\] must be finite.*"
                                         r"index \(2,\): inf"):
        jc.compress(jc.trace(fn, inf_bias, x), jc.collocation(2))


def test_complex_networks_are_refused_clearly() -> None:
    """Complex parameters, and a complex-valued activation (WIRE's Gabor wavelet), are refused
    by name (they raised raw TypeErrors from inside the analysis)."""
    w = {"w": jnp.ones((2, 8)), "b": jnp.zeros(8), "w2": jnp.ones((8, 1))}

    def wire(p, x):
        u = x @ p["w"] + p["b"]
        return (jnp.exp(1j * 10.0 * u - (5.0 * u) ** 2) @ p["w2"].astype(jnp.complex128)).real

    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        with pytest.raises(ValueError, match=r"trace: fn computes complex values .*WIRE"):
            jc.trace(wire, w, jnp.zeros((4, 2)))
        cw = {**w, "w": w["w"].astype(jnp.complex128)}
        with pytest.raises(TypeError, match=r"trace: complex parameters .*\['w'\] \(complex128\)"):
            jc.trace(lambda p, x: (jnp.tanh(x @ p["w"] + p["b"]) @ p["w2"]).real, cw,
                     jnp.zeros((4, 2)))


def test_an_empty_frontier_and_a_missing_folder_are_refused(params64, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"frontier: no candidate to measure \(orders=\[\]"):
        jc.frontier(params64, jc.collocation, activation=ACT, domain=jc.Ball(2, 1.0), orders=[],
                    batch=None)
    missing = tmp_path / "not_made" / "small.jcz"
    with pytest.raises(ValueError, match=r"save: the folder .*not_made.* does not exist"):
        jc.save(missing, params64, activation=ACT)
    assert not (tmp_path / "not_made").exists()


def test_half_precision_parameters_are_refused_for_every_network(params64) -> None:
    half = [{k: v.astype(jnp.float16) for k, v in layer.items()} for layer in params64]
    with pytest.raises(TypeError, match=r"compress: params have dtype float16.*astype"):
        jc.compress(half, jc.collocation(2), activation=ACT)
    net = jc.trace(lambda p, x: jc.apply(p, x, activation=ACT), half,
                   jnp.zeros((4, 2), jnp.float16))
    with pytest.raises(TypeError, match=r"compress: params have dtype float16"):
        jc.compress(net, jc.collocation(2))
