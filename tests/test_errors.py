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
    with pytest.raises(error, match=r"order must be (>= 0|a non-negative int)"):
        getattr(jc, fn)(params, activation="sigmoid", order=order)


@pytest.mark.parametrize(("order", "error"), [([2, -1], ValueError), ([2, 2.5], TypeError),
                                              ((False, 2), TypeError)])
def test_bad_entry_in_order_list(params, order, error) -> None:
    with pytest.raises(error, match=r"order must be (>= 0|a non-negative int)"):
        jc.compress(params, activation="sigmoid", order=order)


@pytest.mark.parametrize("order", [[2], [2, 2, 2], ()])
def test_order_list_of_wrong_length(params, order) -> None:
    with pytest.raises(ValueError, match=rf"order has {len(order)} entries; expected one per "
                                         r"hidden layer \(2\)"):
        jc.compress(params, activation="sigmoid", order=order)


@pytest.mark.parametrize("fn", ["compress", "derivative_features"])
def test_memory_guard_refuses_huge_feature_count_fast(fn: str) -> None:
    big_in = jc.init_mlp(jax.random.PRNGKey(1), [12, 4, 1])
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"k=30 with d_in=12.*GiB.*MAX_FEATURE_BYTES") as exc:
        getattr(jc, fn)(big_in, activation="sigmoid", order=30)
    elapsed = time.perf_counter() - start
    assert "Lower the order" in str(exc.value)
    assert elapsed < 5.0, f"the guard took {elapsed:.1f} s: it must refuse before any work"


def test_memory_guard_counts_the_width() -> None:
    # D_6 in 6 inputs is small, but the product table times a huge width is not
    wide = [{"kernel": jnp.zeros((6, 2_000_000), jnp.float32),
             "bias": jnp.zeros((2_000_000,), jnp.float32)},
            {"kernel": jnp.zeros((2_000_000, 1), jnp.float32), "bias": jnp.zeros((1,))}]
    with pytest.raises(ValueError, match=r"for width 2000000.*GiB"):
        jc.derivative_features(wide, activation="sigmoid", order=6)


# --- widths and configuration names --------------------------------------------------------------


@pytest.mark.parametrize("widths", [[7, 3], [3, 0], [3, -1]])
def test_width_out_of_range(params, widths) -> None:
    l = 1 if widths[0] == 7 else 2
    with pytest.raises(ValueError, match=rf"target width {widths[l - 1]} for hidden layer {l} "
                                         r"must be in \[1, 6\]"):
        jc.compress(params, activation="sigmoid", order=2, widths=widths)


def test_widths_of_wrong_length(params) -> None:
    with pytest.raises(ValueError, match=r"widths has 3 entries; expected 2"):
        jc.compress(params, activation="sigmoid", order=2, widths=[2, 2, 2])


@pytest.mark.parametrize(
    ("kwarg", "pattern"),
    [("layer_order", "layer_order must be one of"), ("features", "features must be one of"),
     ("selector", "selector must be one of")],
)
def test_unknown_configuration_names(params, kwarg: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=rf"{pattern} .*'bogus'"):
        jc.compress(params, activation="sigmoid", order=2, **{kwarg: "bogus"})


def test_exhaustive_refused_eagerly_on_a_large_layer() -> None:
    wide = jc.init_mlp(jax.random.PRNGKey(2), [2, 40, 1])
    with pytest.raises(ValueError, match=r"exhaustive.*C\(40, 15\).*subsets in hidden layer 1"):
        jc.compress(wide, activation="sigmoid", order=4, selector="exhaustive")


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
