"""The certificate (jaxcompress.certificates) and compression to a tolerance (jaxcompress.search).

Our own bounds in closed form where that exists, the structural properties (monotonicity,
Assumption 4 refusals, report formats, the CLI), the bound rules against samples, and
compress_to_tolerance. The paper's formulas are checked against independent NumPy transcriptions
in tests/test_certify_paper.py; the bounds against measured errors on many random networks in
tests/test_certify_validity.py.
"""

import dataclasses
import json
import math
import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import cli
from jaxcompress.activations import GELU_TANH_OMITTED_IM, gelu_tanh_poles
from jaxcompress.certificates import records
from jaxcompress.certificates.bounds import interval_distance
from jaxcompress.certificates.chain import radius_grid

#: Our a posteriori certificate may exceed the measured sup error by at most this factor (the
#: distribution over many networks is in tests/test_certify_validity.py).
LOOSENESS_FACTOR = 100.0


def _scaled(seed, sizes, scale):
    """The uniform init of jc.init_mlp with kernels scaled by ``scale``, drawn with NumPy (no
    per-shape compilation)."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / np.sqrt(fan_in)
        # device_put, not jnp.asarray (which compiles a program per shape)
        params.append({"kernel": jax.device_put(scale * rng.uniform(-bound, bound,
                                                                     (fan_in, fan_out))),
                       "bias": jax.device_put(rng.uniform(-bound, bound, (fan_out,)))})
    return params


# --------------------------------------------------------------------------------------------
# ours in closed form: one hidden layer, d_in = 1, sigmoid, small weights
# --------------------------------------------------------------------------------------------


def _hand_bound(w, b, r, radius, v_abs, gamma, k):
    """Our Schwarz-form bound for one hidden layer, d_in = 1, written out by hand."""
    s = np.abs(w) * r  # strip half-widths = real deviations
    m = np.where(s <= np.pi / 2, 1.0, 1.0 / np.sin(s))
    sp = 0.25 / np.cos(s / 2) ** 2
    sig_b = 1.0 / (1.0 + np.exp(-b))
    m_prime = np.minimum(m + sig_b, sp * 2 * s)
    m_eff = min(m.max(), m_prime.max())
    return gamma * v_abs * m_eff * (radius / r) ** (k + 1)


def test_ours_closed_form_one_hidden_layer():
    params = _scaled(3, [1, 6, 1], 0.5)
    w = np.asarray(params[0]["kernel"])[0]
    b = np.asarray(params[0]["bias"])
    v = np.asarray(params[1]["kernel"])[:, 0]
    radius, eps, delta = 0.5, 1e-4, 1e-2
    rep = jc.certify(params, activation="sigmoid", domain=jc.Ball(1, radius), eps=eps,
                     delta=delta, n_samples=16)
    (li,) = rep.layers
    rho = np.pi / np.max(np.abs(w))  # the chain measures |Im u|: the bias does not enter
    assert li.rho_ours == pytest.approx(rho, rel=1e-12)
    v_max = np.sum(np.abs(v))
    gamma = np.array([1 + min(k + 1, 6) * (1 + delta) for k in range(40)])
    grid = radius_grid(radius, rho)
    best = [min(_hand_bound(w, b, r, radius, v_max, gamma[k], k) for r in grid)
            for k in range(30)]
    k_ours = next(k for k in range(30) if best[k] <= eps)
    assert li.k_ours == k_ours and rep.orders_ours == (k_ours,)
    assert _hand_bound(w, b, li.rho0_ours, radius, v_max, gamma[k_ours], k_ours) == pytest.approx(
        li.bound_ours, rel=1e-12)
    assert li.Lambda_ours == 1.0 and rep.Lambda_bar_ours == 1.0
    assert li.eps_layer_ours == pytest.approx(eps)
    n = min(k_ours + 1, 6)
    assert rep.widths_ours == (n,) and rep.width_bound_ours == n
    assert rep.param_bound_ours == 3 * n + 1 and rep.num_params == 19
    assert rep.non_vacuous_ours == (3 * n + 1 < 19)
    assert rep.bound_a_priori_ours == pytest.approx(li.bound_ours) and li.bound_ours <= eps
    assert li.source["k_ours"] == "ours" and li.status["k_ours"] == "rigorous"
    assert li.source["k_cert"] == "paper Eq. 72" and li.source["q_hat"] == "paper Eq. 101"
    # ours is sharper than the paper here: a larger radius and a smaller order
    assert li.rho_ours >= li.rho and li.k_ours <= li.k_cert


# --------------------------------------------------------------------------------------------
# a posteriori: centred balls, any selector
# --------------------------------------------------------------------------------------------


def test_a_posteriori_centred_ball_and_any_selector():
    # both a posteriori bounds hold for a non-centred ball and for pivoted QR too
    params = _scaled(7, [2, 12, 12, 1], 0.5)
    domain = jc.Ball(2, 0.5, center=jnp.array([0.3, -0.2]))
    small, info = jc.compress(params, jc.derivative_matching(2), activation="tanh",
                              domain=domain)
    rep = jc.certify(params, activation="tanh", domain=domain, eps=1e-3, compressed=small,
                     info=info, n_samples=16)
    err = float(jc.sup_error(params, small, activation="tanh", domain=domain,
                             key=jax.random.PRNGKey(0), n_samples=2048, local_search_steps=50))
    assert rep.center == pytest.approx((0.3, -0.2))
    assert err <= rep.a_posteriori_bound <= LOOSENESS_FACTOR * err
    assert err <= rep.a_posteriori_paper and rep.a_posteriori_bound <= rep.a_posteriori_paper
    for li in rep.layers:
        assert li.order == 2 and li.source["bound_thm5"] == "paper Eq. 16"
        assert 0 < li.inflation and li.max_coef >= 1.0 - 1e-12
    with pytest.raises(ValueError, match="do not belong to params"):
        jc.certify(_scaled(8, [2, 12, 12, 1], 0.5), activation="tanh",
                   domain=domain, eps=1e-3, compressed=small, info=info)
    with pytest.raises(ValueError, match="pass both compressed= and info="):
        jc.certify(params, activation="tanh", domain=domain, eps=1e-3, compressed=small)


# --------------------------------------------------------------------------------------------
# Assumption 4 violated; q-hat
# --------------------------------------------------------------------------------------------


def test_assumption4_violated_large_weights():
    params = _scaled(1, [2, 16, 16, 1], 8.0)
    rep = jc.certify(params, activation="sigmoid", domain=jc.Ball(2, 1.0), eps=1e-3,
                     n_samples=64)
    first = rep.layers[0]
    assert first.rho < 1.0 and first.assumption4 is False and first.rho_ours < 1.0
    assert first.q_hat > 1.0
    assert first.q_hat == pytest.approx(1.0 / first.rho, rel=1e-9)  # layer 1: q_hat = R / rho
    assert rep.non_vacuous is None and rep.width_bound is None and rep.orders is None
    assert rep.orders_ours is None and first.k_cert is None and first.k_ours is None
    assert "Assumption 4 is not proven in hidden layer(s) 1" in str(rep)
    assert rep.layers[1].r_violate is not None and rep.layers[1].r_violate <= 1.0
    with pytest.raises(ValueError, match="fails in hidden layer 1"):
        jc.compress_to_tolerance(params, activation="sigmoid", domain=jc.Ball(2, 1.0), eps=1e-3)
    with pytest.raises(ValueError, match="orders_from must be"):
        jc.compress_to_tolerance(params, jc.Certified(orders_from="theirs"),
                                 activation="sigmoid", domain=jc.Ball(2, 1.0), eps=1e-3)


# --------------------------------------------------------------------------------------------
# monotonicity of k* and k_cert
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["sigmoid", "tanh", "gelu", "sin"])
def test_orders_monotone_in_eps(activation):
    params = _scaled(2, [2, 24, 24, 1], 0.5)
    prev = None
    for eps in np.geomspace(1e-14, 1e-1, 8):
        rep = jc.certify(params, activation=activation, domain=jc.Ball(2, 0.5), eps=eps,
                         n_samples=8)
        ks = [(li.k_star, li.k_cert, li.k_ours) for li in rep.layers]
        for k_star, k_cert, k_ours in ks:  # Appendix D.1: k_cert <= k*
            assert k_star is not None and k_ours is not None and k_cert <= k_star
        if prev is not None:  # eps grows: orders never grow
            for a, b in zip(prev, ks, strict=True):
                assert all(y <= x for x, y in zip(a, b, strict=True))
        assert rep.bound_a_priori <= eps * (1 + 1e-12)
        assert rep.bound_a_priori_ours <= eps * (1 + 1e-12)
        prev = ks


# --------------------------------------------------------------------------------------------
# compress_to_tolerance
# --------------------------------------------------------------------------------------------


def test_measured_mode_fig2_network():
    # a Fig 2-like network ([2, 1024 x 4, 2]) with its width and depth reduced for test speed
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 16, 2])
    domain, eps, key = jc.Ball(2, 1.0), 1e-5, jax.random.PRNGKey(5)
    kw = {"n_samples": 2048, "local_search_steps": 50}
    res = jc.compress_to_tolerance(params, jc.MeasuredOrders(key=key, **kw), activation="sigmoid",
                                   domain=domain, eps=eps)
    assert res.measured_error <= eps
    again = float(jc.sup_error(params, res.params, activation="sigmoid", domain=domain,
                               key=jax.random.PRNGKey(9), **kw))
    assert again <= 1.5 * eps  # an independent measurement agrees
    # the result is what jc.compress gives for these orders
    same, _ = jc.compress(params, activation="sigmoid", order=res.orders, radius=1.0)
    for a, b in zip(same, res.params, strict=True):
        np.testing.assert_allclose(a["kernel"], b["kernel"], rtol=0, atol=1e-12)
    # no width exceeds the uniform one: uniform order max(orders) - 1 does not meet eps, so the
    # smallest uniform order meeting eps is >= every chosen order
    k_hi = max(res.orders)
    assert k_hi >= 1
    uniform, _ = jc.compress(params, activation="sigmoid", order=k_hi - 1, radius=1.0)
    assert float(jc.sup_error(params, uniform, activation="sigmoid", domain=domain, key=key,
                              **kw)) > eps
    params_out, orders, report = res  # "returns params, the orders chosen, and the report"
    assert orders == res.orders and report.a_posteriori_bound >= res.measured_error


def test_certified_mode():
    # d_in = 1: D_k = k + 1 is small, so even the a priori certificates compress
    params = _scaled(0, [1, 32, 32, 1], 0.5)
    domain, eps = jc.Ball(1, 0.5), 1e-6
    kw = {"n_samples": 1024, "local_search_steps": 30}
    a_priori = jc.certify(params, activation="sigmoid", domain=domain, eps=eps, n_samples=16)
    assert a_priori.non_vacuous_ours and a_priori.width_bound_ours < 32
    res = jc.compress_to_tolerance(params, jc.Certified(refine=True, **kw),
                                   activation="sigmoid", domain=domain, eps=eps)
    assert res.mode == "certified" and res.info.selector == "maxvol"
    # "best": the certificate whose a priori orders give the smaller network, said in the
    # result; refine=True then lowers them while the a posteriori certificate stays <= eps
    source = res.orders_source
    start = a_priori.orders if source == "paper" else a_priori.orders_ours
    assert source in ("paper", "ours")
    assert res.history[0].startswith(
        ("a priori orders: the paper's k_cert (Eq. 72) = " if source == "paper" else
         "a priori orders: ours k_ours = ") + str(list(start)))
    assert any(line.startswith("refine: ") for line in res.history)
    assert all(k <= k0 for k, k0 in zip(res.orders, start, strict=True))
    assert res.measured_error <= res.report.a_posteriori_bound <= eps
    assert jc.num_params(res.params) < jc.num_params(params)
    # the paper's orders on request (a larger budget keeps them, and the test, small)
    rep3 = jc.certify(params, activation="sigmoid", domain=domain, eps=1e-3, n_samples=16)
    paper = jc.compress_to_tolerance(params, jc.Certified(orders_from="paper", **kw),
                                     activation="sigmoid", domain=domain, eps=1e-3)
    assert paper.orders_source == "paper" and paper.orders == rep3.orders
    assert paper.history[0] == (f"a priori orders: the paper's k_cert (Eq. 72) = "
                                f"{list(rep3.orders)} (budget eps_l = {rep3.eps_uniform:.3g} "
                                f"(Eq. 62), Lambda_bar = {rep3.Lambda_bar:.3g} (Lemma 19))")
    assert paper.measured_error <= paper.report.a_posteriori_bound <= 1e-3
    with pytest.raises(ValueError, match="uses the maxvol selector"):
        jc.compress_to_tolerance(params, jc.Certified(selector="pivoted_qr"),
                                 activation="sigmoid", domain=domain, eps=eps)


# --------------------------------------------------------------------------------------------
# the bound rules themselves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "softplus", "silu", "gelu", "gelu_tanh",
                                  "sin", "identity"])
def test_bound_rules_dominate_samples(name):
    rule = jc.certificates.get_bound_rule(name)
    rng = np.random.default_rng(0)
    rho_sigma = jc.activations.get_activation(name).rho_sigma
    for s_max in (0.3, 1.0, 1.5, 2.5):
        if s_max >= rho_sigma:
            continue
        a_max = 4.0
        bound, dbound = rule.sup(s_max, a_max), rule.dsup(s_max, a_max)
        if not np.isfinite(bound):
            continue
        u = rng.uniform(-a_max, a_max, 4000) + 1j * rng.uniform(-s_max, s_max, 4000)
        assert np.max(np.abs(rule.cfn(u))) <= bound * (1 + 1e-12)
        assert np.max(np.abs(rule.cdfn(u))) <= dbound * (1 + 1e-12)
    # real-line Lipschitz constants: grid maximum plus the grid's second-derivative correction
    # (closed forms for sigmoid, tanh, softplus, identity: the maximum is attained exactly)
    x = np.linspace(-40, 40, 800_001)
    h = x[1] - x[0]
    der = np.abs(np.real(rule.cdfn(x.astype(complex))))
    if name in ("sigmoid", "tanh", "softplus", "sin", "identity"):
        assert np.max(der) <= rule.lipschitz * (1 + 1e-12)
    else:
        second = np.abs(np.diff(der)) / h
        assert np.max(der) + h * np.max(second) <= rule.lipschitz
    # nondecreasing in s and A (the bisections of the certificate rely on it)
    s_grid = np.linspace(0.0, min(rho_sigma, 3.0) * 0.999, 200)[:, None]
    a_grid = np.linspace(0.0, 6.0, 50)[None, :]
    for fn in (rule.sup, rule.dsup):
        with np.errstate(invalid="ignore"):
            vals = np.broadcast_to(fn(s_grid, a_grid), (200, 50))
        vals = np.where(np.isfinite(vals), vals, 1e300)  # once infinite, it must stay infinite
        assert np.all(np.diff(vals, axis=0) >= -1e-12 * np.abs(vals[1:]))
        assert np.all(np.diff(vals, axis=1) >= -1e-12 * np.abs(vals[:, 1:]))
    # Eq. 5's interval distance: a closed form where given, never above the brute-force minimum
    for u_max in (0.0, 0.3, 1.0, 4.0, 40.0):
        grid = np.linspace(-u_max, u_max, 20001)
        brute = float(np.min(rule.singular_distance(grid)))
        got = interval_distance(rule, u_max)
        assert got <= brute * (1 + 1e-12)
        assert got >= brute - 2 * u_max / 20000 or not np.isfinite(brute)


def test_gelu_tanh_poles_omitted_far_away():
    # activations.gelu_tanh_poles keeps |m| < 200; the omitted poles are farther than the cap
    c, b = math.sqrt(2 / math.pi), 0.044715
    for m in list(range(200, 1200, 7)) + list(range(-1200, -199, 7)):
        roots = np.roots([b, 0.0, 1.0, -1j * math.pi * (m + 0.5) / c])
        assert np.min(np.abs(roots.imag)) > GELU_TANH_OMITTED_IM and np.min(np.abs(roots)) > 25
    kept = gelu_tanh_poles()
    assert kept.size == 3 * 400
    np.testing.assert_allclose(np.min(np.abs(kept.imag)),
                               jc.activations.get_activation("gelu_tanh").rho_sigma)


def test_unknown_activation_has_no_rule():
    jc.register_activation("cube_test", lambda x: x**3, overwrite=True)
    params = jc.init_mlp(jax.random.PRNGKey(0), [1, 4, 1])
    with pytest.raises(ValueError, match="register_bound_rule"):
        jc.certify(params, activation="cube_test", domain=jc.Ball(1, 1.0), eps=1e-3)


# --------------------------------------------------------------------------------------------
# report formats and the CLI
# --------------------------------------------------------------------------------------------


def _record_keys(cls) -> list[str]:
    """The report keys of a record class: its fields, a sub-record's fields in its place."""
    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        subs = [a for a in typing.get_args(hints[f.name]) if dataclasses.is_dataclass(a)]
        keys += _record_keys(subs[0]) if subs else [f.name]
    return keys


def test_records_cover_the_report_keys():
    """Each report key is exactly one field of one typed record; the records are frozen and the
    composed report reads them (typed access and the flat properties agree)."""
    layer_records = (records.PaperLayer, records.OursLayer, records.AppendixG,
                     records.APosterioriLayer)
    top_records = (records.PaperNetwork, records.OursNetwork, records.APosterioriNetwork)
    layer_keys = [k for cls in layer_records for k in _record_keys(cls)]
    top_keys = [k for cls in top_records for k in _record_keys(cls)]
    assert sorted(layer_keys) == sorted(jc.certificates.LAYER_KEYS)
    assert sorted(top_keys) == sorted(jc.certificates.TOP_KEYS)
    own = {f.name for cls in (jc.certificates.LayerCertificate, jc.Certificate)
           for f in dataclasses.fields(cls)}
    assert not own & (set(layer_keys) | set(top_keys))
    params = _scaled(1, [2, 6, 6, 1], 0.5)
    rep = jc.certify(params, activation="tanh", domain=jc.Ball(2, 0.3), eps=1e-4, n_samples=8)
    li = rep.layers[0]
    assert li.paper.budget.k_cert == li.k_cert and li.ours.k_ours == li.k_ours
    assert li.appendix_g.q_hat == li.q_hat and li.a_posteriori is None and li.order is None
    assert rep.paper.budget.orders == rep.orders and rep.ours.orders_ours == rep.orders_ours
    assert rep.a_posteriori is None and "a_posteriori_bound" not in rep.values
    with pytest.raises(dataclasses.FrozenInstanceError):
        li.paper.W_max = 0.0
    with pytest.raises(AttributeError):
        li.k_cert = 0


def test_to_dict_keys_and_table():
    params = _scaled(4, [2, 16, 16, 1], 0.5)
    small, info = jc.compress(params, activation="sigmoid", order=2, radius=0.5)
    rep = jc.certify(params, activation="sigmoid", domain=jc.Ball(2, 0.5), eps=1e-4,
                     compressed=small, info=info, n_samples=16)
    d = json.loads(json.dumps(rep.to_dict()))
    assert len(d["layers"]) == 2
    for key in jc.certificates.TOP_KEYS:
        assert key in d and getattr(rep, key) == rep.values.get(key)
        if rep.values.get(key) is not None:
            assert key in d["source"] and key in d["how"]
    for layer, li in zip(d["layers"], rep.layers, strict=True):
        for key in jc.certificates.LAYER_KEYS:
            assert key in layer and key in layer["status"] and key in layer["how"]
            assert key in layer["source"] and getattr(li, key) == li.values[key]
            assert layer["status"][key] in ("rigorous", "estimate")
            src = layer["source"][key]
            assert src.startswith(("paper ", "ours", "sampled (", "given")), (key, src)
    with pytest.raises(AttributeError):
        rep.layers[0].no_such_key  # noqa: B018
    text = str(rep)
    for word in ("W_max", "k_cert", "k_ours", "q_hat", "rigorous", "estimate", "Lambda_bar",
                 "non_vacuous", "paper Eq. 21/23", "paper Eq. 17 (upper bound)", "ours",
                 "sampled (paper Eq. 101)", "a_posteriori_bound", "bound_thm5"):
        assert word in text, word


def test_cli_certify(tmp_path, capsys):
    params = _scaled(4, [2, 16, 16, 1], 0.5)
    path = tmp_path / "net.npz"
    jc.io.save_npz(path, params, activation="sigmoid")
    out = tmp_path / "cert.json"
    rc = cli.main(["certify", str(path), "--radius", "0.5", "--eps", "1e-4", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "Certificate: sigmoid MLP [2, 16, 16, 1]" in text and "k_cert" in text
    data = json.loads(out.read_text())
    assert data["layers"][0]["assumption4"] is True and data["non_vacuous"] in (True, False)
    assert cli.main(["certify", str(path), "--activation", "tanh", "--eps", "1e-3"]) == 2
    assert "contradicts" in capsys.readouterr().err


def test_tolerance_search_reports_progress_and_where_it_stopped():
    params = _scaled(3, [2, 10, 1], 0.5)
    lines = []
    with pytest.raises(ValueError, match=r"(?s)no order <= 1 reaches sup error 1e-14.*the search "
                                         r"so far.*uniform k = 1: measured"):
        jc.compress_to_tolerance(params, jc.MeasuredOrders(max_order=1, n_samples=256,
                                                           local_search_steps=0),
                                 activation="sigmoid", domain=jc.Ball(2, 1.0), eps=1e-14,
                                 progress=lines.append)
    assert [line.split(":")[0] for line in lines] == ["uniform k = 0", "uniform k = 1"]
