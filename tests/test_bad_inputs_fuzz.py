"""Property-based fuzzing of the public API: no silent result on any input.

Every drawn call either raises a library error (``ValueError`` / ``TypeError`` whose message
starts with the function's name and names the argument) or returns finite parameters with a
finite ``error_estimate`` within a factor 2 of an independent measurement: the largest error on
independent uniform samples of the domain (``sup_error`` without its local search), in both
directions (plus a rounding floor for exact compressions). Shapes come from small fixed sets so
that compilations are reused; the numbers (radii, centres, corners, data, keys) are drawn freely.

Seeded (``derandomize=True``, no example database); a failing example is printed by
hypothesis and by ``note`` with every drawn value, so it can be replayed. The default profile
runs in the default suite; ``-m slow`` runs a larger one.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import jaxcompress as jc  # noqa: E402

jax.config.update("jax_enable_x64", True)

ACT = "sigmoid"
SIZES = ([2, 6, 6, 1], [1, 5, 2])
COUNT = {"cases": 0, "refused": 0, "returned": 0}


def _iota(u):
    return jnp.stack([jnp.cos(u[0]), jnp.sin(u[0])])


@st.composite
def domains(draw, d):
    kind = draw(st.sampled_from(["ball", "ball_center", "box"] + (["param"] if d == 2 else [])))
    r = draw(st.floats(0.1, 2.0))
    if kind == "ball":
        return jc.Ball(d, r)
    if kind == "ball_center":
        return jc.Ball(d, r, center=np.asarray(draw(st.lists(st.floats(-1, 1), min_size=d,
                                                             max_size=d))))
    if kind == "box":
        lo = np.asarray(draw(st.lists(st.floats(-1.5, 0.5), min_size=d, max_size=d)))
        return jc.Box(lo, lo + np.asarray(draw(st.lists(st.floats(0.1, 1.5), min_size=d,
                                                        max_size=d))))
    return jc.Parameterization(_iota, jc.Ball(1, r))


# mutations: (name, the argument the message must name)
MUTATIONS = [
    ("nan_param", "NaN"), ("half_dtype", "dtype"), ("int_params", "non-floating"),
    ("bad_activation", "activation"), ("domain_dim", "domain|inputs of size"),
    ("bad_order", "order"), ("bad_key", "key"), ("nan_center", "center"),
    ("nan_data", "x"), ("wide", "width"), ("list_params", "array"), ("n_points", "n_points"),
    ("method_type", "method"), ("bad_trim", "atol"),
]


@st.composite
def cases(draw):
    sizes = draw(st.sampled_from(SIZES))
    d = sizes[0]
    dtype = draw(st.sampled_from([jnp.float64, jnp.float32]))
    seed = draw(st.integers(0, 2**31 - 1))
    mutation = draw(st.sampled_from(MUTATIONS)) if draw(st.booleans()) else ("none", None)
    method = draw(st.sampled_from(["derivative", "collocation", "data", "best_of"]))
    k = draw(st.integers(1, 2))
    dom = draw(domains(d))
    n_data = draw(st.sampled_from([12, 30]))
    return sizes, dtype, seed, mutation, method, k, dom, n_data


def _method(kind, k, x):
    if kind == "derivative":
        return jc.derivative_matching(k)
    if kind == "collocation":
        return jc.collocation(k)
    if kind == "data":
        return jc.data_matching(x, order=k)
    return jc.best_of(jc.derivative_matching(k), jc.collocation(k))


def _run(case):
    """The call of one case: returns (params, info, teacher, domain) or raises."""
    sizes, dtype, seed, (mutation, _), kind, k, dom, n_data = case
    key = jax.random.PRNGKey(seed)
    teacher = jc.init_mlp(key, sizes, dtype=dtype)
    d = sizes[0]
    x = np.array(jax.random.uniform(jax.random.fold_in(key, 1), (n_data, d), jnp.float64,
                                     -1.0, 1.0))
    act = ACT
    if mutation == "nan_param":
        teacher[0] = {"kernel": teacher[0]["kernel"].at[0, 0].set(jnp.nan),
                      "bias": teacher[0]["bias"]}
    elif mutation == "half_dtype":
        teacher = jax.tree.map(lambda a: a.astype(jnp.float16), teacher)
    elif mutation == "int_params":
        teacher = jax.tree.map(lambda a: a.astype(jnp.int32), teacher)
    elif mutation == "list_params":
        teacher = [{n: np.asarray(v).tolist() for n, v in layer.items()} for layer in teacher]
    elif mutation == "bad_activation":
        act = ["relu", 3, "nope", None][seed % 4]
    elif mutation == "domain_dim":
        dom = jc.Ball(d + 1, 1.0)
    elif mutation == "bad_order":
        k = [-1, 1.5, "2", None][seed % 4]
    elif mutation == "bad_key":
        return jc.compress(teacher, jc.derivative_matching(1, selector=jc.select.RandomChoice(
            [0, 7.0, None, np.zeros(3, np.uint32)][seed % 4])), activation=act, domain=dom)
    elif mutation == "nan_center":
        dom = jc.Ball(d, 1.0, center=np.full(d, [np.nan, np.inf][seed % 2]))
    elif mutation == "nan_data":
        x[seed % n_data, 0] = np.nan
        kind = "data"
    elif mutation == "wide":
        return jc.compress(teacher, jc.derivative_matching(1, widths=(99,) * (len(sizes) - 2)),
                           activation=act, domain=dom)
    elif mutation == "n_points":
        return jc.error_estimate(teacher, teacher, activation=act, domain=dom,
                                 n_points=[0, -3][seed % 2])
    elif mutation == "method_type":
        return jc.compress(teacher, "collocation", activation=act, domain=dom)
    small, info = jc.compress(teacher, _method(kind, k, x), activation=act, domain=dom)
    if mutation == "bad_trim":
        jc.trim(small, atol=[-1.0, np.nan, 1e9][seed % 3])
    return small, info, teacher, dom


def _independent(teacher, small, dom, dtype, seed):
    """Max |F - F~| on 1024 uniform samples of the domain (of U's image for a
    parameterisation): no local search, other points than the estimate's."""
    key = jax.random.PRNGKey(seed + 17)
    if isinstance(dom, jc.Parameterization):
        u = dom.domain.sample(key, 1024, dtype)
        x = jax.vmap(dom.fn)(u)
    else:
        x = dom.sample(key, 1024, dtype)
    diff = jc.apply(teacher, x, activation=ACT) - jc.apply(small, x, activation=ACT)
    return float(jnp.max(jnp.abs(diff))), float(jnp.max(jnp.abs(jc.apply(teacher, x,
                                                                          activation=ACT))))


def _check(case) -> None:
    sizes, dtype, seed, (mutation, names), kind, k, dom, n_data = case
    note(f"case: sizes={sizes} dtype={jnp.dtype(dtype).name} seed={seed} mutation={mutation} "
         f"method={kind} k={k} n_data={n_data} domain={dom}")
    COUNT["cases"] += 1
    try:
        out = _run(case)
    except (ValueError, TypeError) as e:
        msg = str(e)
        note(f"refused: {type(e).__name__}: {msg}")
        assert names is not None, f"a valid call was refused: {msg}"
        # a library error: the function's name first, then the argument it is about
        assert re.match(r"^[\w.]+(\(\))?: |^activation |^unknown activation ", msg), msg
        assert re.search(names, msg), f"the message does not name {names!r}: {msg}"
        assert len(msg) < 1500, "the message dumps values"
        COUNT["refused"] += 1
        return
    assert names is None, f"mutation {mutation} was accepted: {out!r:.300}"
    small, info, teacher, dom = out
    COUNT["returned"] += 1
    for leaf in jax.tree.leaves(small):
        assert np.all(np.isfinite(np.asarray(leaf))), "non-finite parameters returned"
        assert leaf.dtype == jnp.dtype(dtype)
    est = float(info.error_estimate)
    assert np.isfinite(est), "non-finite error estimate returned without an error"
    indep, scale = _independent(teacher, small, dom, dtype, seed)
    floor = 200 * float(jnp.finfo(dtype).eps) * max(scale, 1.0)
    note(f"estimate {est:.3e}, independent {indep:.3e}, floor {floor:.1e}")
    assert est <= 2 * indep + floor, (est, indep)
    assert indep <= 2 * est + floor, (est, indep)


def _profile(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(hypothesis.HealthCheck))


@_profile(30)
@given(cases())
def test_fuzz_public_api(case):
    _check(case)


@pytest.mark.slow
@_profile(400)
@given(cases())
def test_fuzz_public_api_large(case):
    _check(case)


def test_fuzz_counted():
    """Runs after the default profile (same file, in order): it tried every case it drew."""
    if COUNT["cases"] == 0:
        pytest.skip("the default profile did not run in this process")
    print(f"fuzz: {COUNT['cases']} cases, {COUNT['refused']} refused with a message, "
          f"{COUNT['returned']} returned and checked")
    assert COUNT["refused"] > 0 and COUNT["returned"] > 0
