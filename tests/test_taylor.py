"""Truncated multivariate Taylor arithmetic (jaxcompress.taylor) against plain-Python references."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import taylor


def test_monomials_order_count_and_prefix_property():
    mons = jc.taylor.monomials(2, 3)
    assert mons.tolist() == [[0, 0], [1, 0], [0, 1], [2, 0], [1, 1], [0, 2],
                             [3, 0], [2, 1], [1, 2], [0, 3]]
    for d, k in itertools.product((1, 2, 3, 4), (0, 1, 4, 7)):
        m = jc.taylor.monomials(d, k)
        assert m.shape == (jc.taylor.num_monomials(d, k), d) == (math.comb(d + k, d), d)
        assert len({tuple(r) for r in m}) == len(m) and m.sum(axis=1).max(initial=0) <= k
        # lower orders come first: the order-j features are a prefix of the order-k ones
        np.testing.assert_array_equal(m[: jc.taylor.num_monomials(d, k - 1)] if k else m[:1],
                                      jc.taylor.monomials(d, max(k - 1, 0)))
    with pytest.raises(ValueError, match="read-only"):
        mons[0, 0] = 5
    with pytest.raises(ValueError, match="d must be >= 1"):
        jc.taylor.monomials(0, 2)


def _dict_poly(coeffs, mons):
    return {tuple(a): c for a, c in zip(mons.tolist(), coeffs, strict=True)}


@pytest.mark.parametrize("d,k", [(1, 5), (2, 4), (3, 3)])
def test_truncated_product_matches_a_dictionary_reference(d, k):
    rng = np.random.default_rng(d * 10 + k)
    mons = jc.taylor.monomials(d, k)
    a, b = rng.standard_normal(len(mons)), rng.standard_normal(len(mons))
    # one program (op by op, the truncated product compiled ~11 programs per case)
    got = np.asarray(jax.jit(taylor.poly_mul, static_argnums=(2, 3))(a, b, d, k))
    want = dict.fromkeys(map(tuple, mons.tolist()), 0.0)
    for (ea, ca), (eb, cb) in itertools.product(_dict_poly(a, mons).items(),
                                                _dict_poly(b, mons).items()):
        e = tuple(x + y for x, y in zip(ea, eb, strict=True))
        if sum(e) <= k:
            want[e] += ca * cb
    np.testing.assert_allclose(got, [want[tuple(m)] for m in mons.tolist()], rtol=1e-12,
                               atol=1e-12)
    # the product table has one entry per pair of monomials of total degree <= k
    assert len(taylor._product_table(d, k)[0]) == math.comb(2 * d + k, 2 * d)


@pytest.mark.parametrize("d,k", [(1, 6), (2, 5), (3, 4), (2, 0), (3, 1)])
def test_compose_matches_horner_with_full_truncated_products(d, k):
    # the reference: Horner's rule, every step a full truncated product (poly_mul, itself
    # checked against a dictionary above); compose skips the pairs that are zero
    rng = np.random.default_rng(7 * d + k)
    n = 5
    u = rng.standard_normal((jc.taylor.num_monomials(d, k), n))
    series = rng.standard_normal((k + 1, n))
    # both sides compiled, in one program (op by op, the Horner loop compiled ~4x as many small
    # programs)
    def horner(series, u):
        u_hat = u.at[0].set(0)
        want = jnp.zeros_like(u).at[0].set(series[k])
        for j in range(k - 1, -1, -1):
            want = taylor.poly_mul(want, u_hat, d, k).at[0].add(series[j])
        return want

    got, want = jax.jit(lambda s, v: (taylor.compose(s, v, d, k), horner(s, v)))(series, u)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    # u^^j has no terms below degree j: the table for u^^(j+1) = u^^j u^ has fewer pairs
    for v in range(1, k):
        ii, jj, _ = taylor._power_table(d, k, v)
        deg = jc.taylor.monomials(d, k).sum(axis=1)
        assert np.all(deg[ii] >= v) and np.all(deg[jj] >= 1)
        assert np.all(deg[ii] + deg[jj] <= k)
        full = sum(math.comb(d + a - 1, a) * math.comb(d + b - 1, b)
                   for a in range(v, k + 1) for b in range(1, k + 1) if a + b <= k)
        assert len(ii) == full

@pytest.mark.parametrize("n,block", [(10, 4), (12, 4), (3, 4)])
def test_compose_in_neuron_blocks_is_the_same_computation(n, block):
    # blocks of 4 neurons through jax.lax.map, the last one zero-padded (10 = 4 + 4 + 2), or
    # fewer neurons than a block (no loop): the single pass's sums (compiled too), to rounding
    # (XLA compiles the loop body apart, and may contract multiply-adds differently)
    d, k = 3, 5
    rng = np.random.default_rng(n)
    u = rng.standard_normal((jc.taylor.num_monomials(d, k), n))
    series = rng.standard_normal((k + 1, n))
    want, got = jax.jit(lambda s, v: (taylor.compose(s, v, d, k),
                                      taylor.compose(s, v, d, k, block=block)))(series, u)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_product_block_only_when_the_products_outgrow_the_cache():
    # on this CPU: blocks of CPU_BLOCK_NEURONS once one power's pair products exceed
    # CPU_BLOCK_BYTES, none below it, none at k < 2 (no products)
    assert jax.default_backend() == "cpu"
    pairs = len(taylor._power_table(3, 7, 1)[0])
    edge = taylor.CPU_BLOCK_BYTES // (pairs * 8)
    assert taylor.product_block(3, 7, edge, 8) is None
    assert taylor.product_block(3, 7, edge + 1, 8) == taylor.CPU_BLOCK_NEURONS
    assert taylor.product_block(3, 1, 10**9, 8) is None
    # and the Taylor pass through a layer that is blocked gives the unblocked numbers; each call
    # is traced afresh (a new jax.jit), since the blocks are chosen while tracing
    def features(p):
        return jax.jit(lambda q: taylor.taylor_features(q, activation="sigmoid", order=4))(p)

    params = jc.init_mlp(jax.random.PRNGKey(1), [2, 6, 40, 1])
    other = jc.init_mlp(jax.random.PRNGKey(2), [2, 6, 40, 1])
    feats, want_other = features(params), features(other)
    old = taylor.CPU_BLOCK_BYTES, taylor.CPU_BLOCK_NEURONS
    try:
        # every layer with products goes in blocks: 40 neurons as 16 + 16 + 8 (padded)
        taylor.CPU_BLOCK_BYTES, taylor.CPU_BLOCK_NEURONS = 1, 16
        assert taylor.product_block(2, 4, 40, 8) == 16
        blocked = features(params)
        # under jax.vmap over a stack of two networks the loop is batched, not broken
        stack = jax.tree.map(lambda a, b: np.stack([a, b]), params, other)  # on the host
        batched = jax.jit(jax.vmap(lambda p: taylor.taylor_features(p, activation="sigmoid",
                                                                    order=4)))(stack)
    finally:
        taylor.CPU_BLOCK_BYTES, taylor.CPU_BLOCK_NEURONS = old
    for a, b in zip(feats, blocked, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    for i, want in enumerate((feats, want_other)):
        for a, b in zip(want, batched, strict=True):
            np.testing.assert_allclose(np.asarray(b)[i], a, rtol=1e-13, atol=1e-15)


def test_compose_and_input_polynomial():
    d, k = 2, 4
    center = jax.device_put(np.array([0.3, -0.2]))
    x = jax.jit(taylor.input_polynomial, static_argnums=1)(center, k)   # one program
    assert x.shape == (jc.taylor.num_monomials(d, k), d)
    x = np.asarray(x)   # checked on the host (slicing a device array compiles a program)
    np.testing.assert_array_equal(x[0], center)
    np.testing.assert_array_equal(x[1:3], np.eye(2))
    assert not np.any(x[3:])
    # the identity series (u0, 1, 0, ...) composed with u gives u back (inputs built on the host)
    u = np.random.default_rng(0).standard_normal((jc.taylor.num_monomials(d, k), 3))
    ident = np.stack([u[0], np.ones(3)] + [np.zeros(3)] * (k - 1))
    compose = jax.jit(taylor.compose, static_argnums=(2, 3))   # one program, not op by op
    np.testing.assert_allclose(compose(ident, u, d, k), u, rtol=1e-14, atol=1e-15)
    # exp(u0 + t x1) along x1: coefficients exp(u0) / j!
    t = np.zeros((jc.taylor.num_monomials(1, k), 1))
    t[0, 0], t[1, 0] = 0.5, 1.0
    series = np.stack([np.full((1,), math.exp(0.5) / math.factorial(j)) for j in range(k + 1)])
    np.testing.assert_allclose(np.asarray(compose(series, t, 1, k))[:, 0],
                               [math.exp(0.5) / math.factorial(j) for j in range(k + 1)],
                               rtol=1e-14)


def test_propagation_is_the_taylor_expansion_of_the_network():
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 7, 5, 1])
    center = jax.device_put(np.array([0.2, 0.1]))
    # both in one program each (op by op they compiled ~70 programs)
    feats = jax.jit(lambda p, c: taylor.taylor_features(p, activation="tanh", order=3,
                                                        center=c))(params, center)
    # the pass: layer 1 in closed form, then propagation (tests/test_closed_form.py compares it
    # with propagate_polynomial from input_polynomial, 1e-12 relative)
    again = jax.jit(lambda c, p: taylor.taylor_pass(c, p, activation="tanh", order=3))(
        center, params[:2])
    for a, b in zip(feats, again, strict=True):
        np.testing.assert_array_equal(a, b)
    # evaluate the degree-3 Taylor polynomial of layer 2 near the centre: error O(|h|^4)
    mons = jc.taylor.monomials(2, 3)
    for h in (1e-1, 5e-2):
        dx = np.array([h, -0.5 * h])   # the polynomial and the error on the host
        poly = np.prod(dx[None, :] ** mons.astype(np.float64), axis=1) @ np.asarray(feats[1])
        x = jax.device_put((np.asarray(center) + dx)[None])
        exact = np.asarray(jc.features.point_features(params, x, activation="tanh")[1])[0]
        assert float(np.max(np.abs(poly - exact))) < 5 * h**4


def test_feature_budget_refuses_huge_tables():
    with pytest.raises(ValueError, match=r"order k=30 with d_in=8 .* GiB"):
        taylor.check_feature_budget(8, 30, 1024, 8, where="test")
    taylor.check_feature_budget(2, 10, 1024, 8, where="test")  # the Fig 2 network fits
