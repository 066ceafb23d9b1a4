"""No silent result on any input (issue 20): every case found by trying bad inputs as a new user.

Each test names the case it covers. A case is either refused with a message naming the function,
the argument, the expected and the actual value, or honoured correctly; under ``jax.jit``, where
traced values cannot raise, the result says it is invalid (a NaN error estimate).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import cli
from jaxcompress.compression import compress_layer

jax.config.update("jax_enable_x64", True)

ACT = "sigmoid"


@pytest.fixture(scope="module")
def params():
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
    params = selecting

    # traced data cannot be refused: NaN data gives a NaN candidate, which must not win
    @jax.jit
    def run(x):
        return jc.compress(params, jc.best_of(jc.data_matching(x, order=2),
                                              jc.derivative_matching(2)),
                           activation=ACT, domain=jc.Ball(2, 1.0))

    small, info = run(x_data.at[0, 0].set(jnp.nan))
    assert int(info.choice) == 1
    assert np.isfinite(float(info.error_estimate))
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree.leaves(small))
    _, info_ok = run(x_data)
    assert np.isfinite(float(info_ok.error_estimate))


def test_case1_traced_non_finite_data_gives_nan_estimate(selecting, x_data) -> None:
    params = selecting

    @jax.jit
    def run(x):
        return jc.compress(params, jc.data_matching(x, order=2), activation=ACT,
                           domain=jc.Ball(2, 1.0))

    assert np.isnan(float(run(x_data.at[5, 0].set(jnp.inf))[1].error_estimate))
    # all candidates non-finite: the estimate stays NaN
    both = jax.jit(lambda x: jc.compress(
        params, jc.best_of(jc.data_matching(x, order=2), jc.data_matching(x[::-1], order=2)),
        activation=ACT, domain=jc.Ball(2, 1.0))[1].error_estimate)
    assert np.isnan(float(both(x_data.at[0, 0].set(jnp.nan))))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_case2_ball_non_finite_center(bad) -> None:
    with pytest.raises(ValueError, match=r"Ball: center must be finite"):
        jc.Ball(2, 1.0, center=[0.0, bad])
    with pytest.raises(ValueError, match=r"Ball: center must be finite"):
        jc.Ball(2, 1.0, center=jnp.asarray([bad, 0.0]))


def test_case3_parameterization_with_non_finite_map(params) -> None:
    def iota(u):
        return jnp.stack([u[0], jnp.log(u[0])])  # NaN for u < 0

    dom = jc.Parameterization(iota, jc.Ball(1, 0.5))
    with pytest.raises(ValueError, match=r"compress: the Parameterization's fn is not finite at "
                                         r"u = \[.*expected a finite analytic map"):
        jc.compress(params, jc.derivative_matching(2), activation=ACT, domain=dom)


def test_case4_error_estimate_refuses_other_output_size(params) -> None:
    two = jc.init_mlp(jax.random.PRNGKey(1), [2, 6, 2])
    with pytest.raises(ValueError, match=r"error_estimate: the networks have different output "
                                         r"sizes \(2 vs 1\)"):
        jc.error_estimate(two, params, activation=ACT, domain=jc.Ball(2, 1.0))
    three = jc.init_mlp(jax.random.PRNGKey(1), [3, 6, 1])
    with pytest.raises(ValueError, match=r"error_estimate: params_a takes inputs of size 3"):
        jc.error_estimate(three, params, activation=ACT, domain=jc.Ball(2, 1.0))


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


def test_case6_save_and_polish_refuse_a_record_of_another_network(params, tmp_path) -> None:
    small, info = jc.compress(params, jc.derivative_matching(1), activation=ACT)  # width 3
    other = jc.init_mlp(jax.random.PRNGKey(2), [2, 4, 4, 1])
    with pytest.raises(ValueError, match=r"save: info describes hidden widths \[3, 3\]; the "
                                         r"params have \[4, 4\]"):
        jc.save(tmp_path / "m.jcz", other, activation=ACT, info=info)
    with pytest.raises(ValueError, match=r"save: info says activation 'sigmoid'.*'tanh'"):
        jc.save(tmp_path / "m.jcz", small, activation="tanh", info=info)
    assert not os.listdir(tmp_path)
    with pytest.raises(ValueError, match=r"polish: info describes hidden widths \[3, 3\]"):
        jc.polish(other, params, activation=ACT, domain=jc.Ball(2, 1.0), info=info, steps=1)
    with pytest.raises(TypeError, match="save: info must be a jc.CompressInfo"):
        jc.save(tmp_path / "m.jcz", small, activation=ACT, info={"layers": []})


def test_case7_mixed_dtypes_refused(params) -> None:
    mixed = [dict(layer) for layer in params]
    mixed[1] = {"kernel": params[1]["kernel"].astype(jnp.float32), "bias": params[1]["bias"]}
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
def test_case9_traced_invalid_radius_gives_nan_estimate(params, radius) -> None:
    run = jax.jit(lambda r: jc.compress(params, jc.derivative_matching(2), activation=ACT,
                                        domain=jc.Ball(2, r))[1].error_estimate)
    assert np.isnan(float(run(jnp.float64(radius))))
    assert np.isfinite(float(run(jnp.float64(0.5))))


def test_case9_traced_invalid_box_or_center_gives_nan_estimate(params) -> None:
    box = jax.jit(lambda lo, hi: jc.error_estimate(params, params, activation=ACT,
                                                   domain=jc.Box(lo, hi)))
    assert np.isnan(float(box(jnp.asarray([0.0, 1.0]), jnp.asarray([1.0, 0.5]))))
    assert float(box(jnp.asarray([0.0, 0.0]), jnp.asarray([1.0, 0.5]))) == 0.0
    ball = jax.jit(lambda c: jc.error_estimate(params, params, activation=ACT,
                                               domain=jc.Ball(2, 1.0, center=c)))
    assert np.isnan(float(ball(jnp.asarray([0.0, jnp.nan]))))


def test_case10_trim_refuses_an_atol_that_drops_a_whole_layer(params) -> None:
    small, info = jc.compress(params, jc.derivative_matching(1), activation=ACT)
    with pytest.raises(ValueError, match=r"trim: atol=1e\+09 drops every neuron of hidden layer "
                                         r"\d \(its largest outgoing weight is"):
        jc.trim(small, atol=1e9)
    for bad in (-1.0, np.nan, "0"):
        with pytest.raises(ValueError, match="trim: atol must be one finite number >= 0"):
            jc.trim(small, atol=bad)
    assert jc.layer_sizes(jc.trim(small)) == [2, 3, 3, 1]


# --- raw errors that became messages --------------------------------------------------------------


def test_zero_output_dimension(params) -> None:
    zero = [dict(layer) for layer in params]
    zero[-1] = {"kernel": jnp.zeros((6, 0)), "bias": jnp.zeros((0,))}
    with pytest.raises(ValueError, match=r"compress: layer 2 kernel has shape \(6, 0\); expected "
                                         "every width >= 1"):
        jc.compress(zero, jc.derivative_matching(2), activation=ACT)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_params(params, dtype) -> None:
    half = jax.tree.map(lambda a: a.astype(dtype), params)
    with pytest.raises(TypeError, match=rf"compress: params have dtype {jnp.dtype(dtype).name}; "
                                        r"expected one of \('float32', 'float64'\)"):
        jc.compress(half, jc.derivative_matching(2), activation=ACT)


def test_nested_list_params(params) -> None:
    nested = [{k: np.asarray(v).tolist() for k, v in layer.items()} for layer in params]
    with pytest.raises(TypeError, match=r"compress: layer 0 kernel must be an array") as exc:
        jc.compress(nested, jc.derivative_matching(2), activation=ACT)
    assert len(str(exc.value)) < 200  # the values are not dumped


@pytest.mark.parametrize("key, kind", [
    (0, TypeError), (None, TypeError), (7.0, TypeError),
    (np.zeros(3, np.uint32), ValueError), (jnp.zeros(2, jnp.float32), ValueError),
    (jax.random.split(jax.random.PRNGKey(0), 2), ValueError)])
def test_bad_prng_keys(params, key, kind) -> None:
    with pytest.raises(kind, match="RandomChoice: key must be .*PRNG key"):
        jc.RandomChoice(key)
    with pytest.raises(kind, match="sup_error: key must be .*PRNG key"):
        jc.sup_error(params, params, activation=ACT, domain=jc.Ball(2), key=key)
    with pytest.raises(kind, match="init_mlp: key must be .*PRNG key"):
        jc.init_mlp(key, [2, 3, 1])
    if key is None:  # compress_to_tolerance's default: PRNGKey(0)
        return
    with pytest.raises(kind, match="Measured: key must be .*PRNG key"):
        jc.compress_to_tolerance(params, jc.Measured(key=key), activation=ACT, domain=jc.Ball(2),
                                 eps=1e-3)


def test_good_prng_keys_pass() -> None:
    jc.RandomChoice(jax.random.key(0))
    jc.RandomChoice(jax.random.PRNGKey(0))


def test_polish_optimizer_by_name(params) -> None:
    with pytest.raises(TypeError, match=r"polish: optimizer must be an optax "
                                        r"GradientTransformation.*got str 'adam'"):
        jc.polish(params, params, activation=ACT, domain=jc.Ball(2), optimizer="adam")


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_point_counts(params, n) -> None:
    with pytest.raises(ValueError, match=r"error_estimate: n_points must be >= 1"):
        jc.error_estimate(params, params, activation=ACT, domain=jc.Ball(2), n_points=n)
    with pytest.raises(ValueError, match=r"certify: n_samples must be >= 1"):
        jc.certify(params, activation=ACT, domain=jc.Ball(2), eps=1e-3, n_samples=n)


def test_negative_max_order(params, tmp_path, capsys) -> None:
    with pytest.raises(ValueError, match=r"Measured: max_order must be >= 0 \(an int\), got -1"):
        jc.compress_to_tolerance(params, jc.Measured(max_order=-1), activation=ACT,
                                 domain=jc.Ball(2), eps=1e-3)
    path = tmp_path / "t.jcz"
    jc.save(path, params, activation=ACT)
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
    assert "myrelu" not in jc.registered_activations()
    assert "foo" not in jc.registered_activations()


def test_compress_layer_bare_array(params) -> None:
    with pytest.raises(TypeError, match=r"compress_layer: features must be a "
                                        r"jaxcompress.features.LayerFeatures.*got float64\[6, 6\]"):
        compress_layer(jnp.ones((6, 6)), params[1]["kernel"], 3, jc.PivotedQR())


def test_save_onto_a_folder(params, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"save: path .* is a folder; expected a file name"):
        jc.save(tmp_path, params, activation=ACT)
    assert not list(tmp_path.parent.glob(f"{tmp_path.name}.tmp"))


def test_cli_certify_bad_center(params, tmp_path, capsys) -> None:
    path = tmp_path / "t.jcz"
    jc.save(path, params, activation=ACT)
    assert cli.main(["certify", str(path), "--eps", "1e-3", "--center", "a,b"]) == 2
    assert "certify: --center must be comma-separated numbers (e.g. 0.5,0), got 'a,b' ('a' is " \
           "not a number)" in capsys.readouterr().err


def test_cli_certify_help_has_no_default_for_required_eps(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["certify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--eps EPS target sup error (required)" in out
    assert "target sup error (required) (default" not in out


def test_method_given_by_name(params) -> None:
    with pytest.raises(TypeError, match=r"compress: method must be a jc.Method.*got str "
                                        r"'derivative_matching'; for the method "
                                        r"'derivative_matching' write jc.derivative_matching\(k\)"):
        jc.compress(params, "derivative_matching", activation=ACT, order=4)


def test_parameterization_dimension_in_messages(params) -> None:
    dom = jc.Parameterization(lambda u: jnp.stack([u[0], u[0] ** 2]), jc.Ball(1, 0.5))
    with pytest.raises(TypeError, match=r"sup_error: domain must be a jaxcompress.Ball or "
                                        r"jaxcompress.Box.*Parameterization"):
        jc.sup_error(params, params, activation=ACT, domain=dom, key=jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match=r"certify: .*a Parameterization \(features in its "
                                        r"parameters u, of dimension 1, for a network of 2 "
                                        r"inputs\)"):
        jc.certify(params, activation=ACT, domain=dom, eps=1e-3)


def test_load_npz_on_a_messagepack_file(params, tmp_path) -> None:
    path = tmp_path / "m.jcz"
    jc.save(path, params, activation=ACT)
    with pytest.raises(ValueError, match=r"load_npz: .* the file is a jaxcompress.save file "
                                         r"\(MessagePack\): read it with jc.load"):
        jc.load_npz(path, activation=ACT)
