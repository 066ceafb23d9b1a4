"""The first hidden layer's Taylor coefficients in closed form, against the Taylor pass.

``taylor.affine_features`` computes ``s_|alpha|(u0) |alpha|!/alpha! w^alpha`` (no truncated
products); the reference is the multivariate Taylor pass from the input polynomial ``x0 + t``
(``propagate_polynomial(input_polynomial(x0, k), ...)``: Horner's rule with truncated products,
itself tested against nested jacfwd in ``test_features.py``). The reference is run once per
input dimension on every case's columns side by side (``compose`` takes any columns), so the
whole comparison compiles in one program of a few passes.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxcompress as jc
from jaxcompress import taylor
from jaxcompress.domains import domain_center

ACTS = ("sigmoid", "tanh", "gelu", "softplus", "sin")
K = 5


def _domain(d, kind):
    """A ball or a box, centred away from the origin."""
    if kind == "ball":
        return jc.Ball(d, 0.7, center=jnp.asarray([0.3, -0.2, 0.15][:d]))
    return jc.Box(np.asarray([-0.4, 0.1, -0.3][:d]), np.asarray([0.6, 0.5, 0.2][:d]))


# every activation in every input dimension, the domain alternating (each activation and each
# dimension sees both a ball and a box)
CASES = [(act, d, ("ball", "box")[(i + d) % 2]) for i, act in enumerate(ACTS) for d in (1, 2, 3)]


def _teacher(d, sizes=(7,), dtype=jnp.float64):
    return jc.init_mlp(jax.random.PRNGKey(d), [d, *sizes, 1], dtype=dtype)


def _reference_layer(p_in, layers, acts, d, k=K):
    """One Taylor-pass step (dense, then Horner's rule) for several cases' columns at once."""
    us = [jnp.matmul(p, lay["kernel"], precision="highest").at[0].add(lay["bias"])
          for p, lay in zip(p_in, layers, strict=True)]
    series = [jc.activations.get_activation(a).series(u[0], k)
              for a, u in zip(acts, us, strict=True)]
    out = taylor.compose(jnp.concatenate(series, axis=1), jnp.concatenate(us, axis=1), d, k)
    return jnp.split(out, np.cumsum([u.shape[1] for u in us])[:-1], axis=1)


@jax.jit
def _first_layer_cases():
    out = {}
    for d in (1, 2, 3):
        cases = [c for c in CASES if c[1] == d]
        params = _teacher(d)
        got = [jc.features.DerivativeFeatures(K)(params, [1], activation=act,
                                                 domain=_domain(d, kind))[1].z
               for act, _, kind in cases]
        p0 = [taylor.input_polynomial(domain_center(_domain(d, kind), jnp.float64), K)
              for _, _, kind in cases]
        ref = _reference_layer(p0, [params[0]] * len(cases), [c[0] for c in cases], d)
        out.update({c: (g, r) for c, g, r in zip(cases, got, ref, strict=True)})
    return out


def test_first_layer_closed_form_matches_the_taylor_pass():
    cases = _first_layer_cases()
    assert sorted(cases) == sorted(CASES)
    for (act, d, kind), (got, ref) in cases.items():
        assert got.shape == ref.shape == (jc.taylor.num_monomials(d, K), 7)
        # every coefficient to 1e-12 relative: a product of positive counts, powers and s_j,
        # no cancellation on either side
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0,
                                   err_msg=f"{act}, d_in = {d}, {kind}")


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@functools.cache
def _other_paths():
    """Bottleneck coordinates, several centres and float32, in one compiled program."""
    params32 = _teacher(2, dtype=jnp.float32)
    return _other_paths_jit(jc.init_mlp(jax.random.PRNGKey(7), [3, 2, 6, 5, 1]), params32,
                            jax.tree.map(lambda a: a.astype(jnp.float64), params32),
                            jnp.asarray([0.3, -0.2], jnp.float32))


@jax.jit
def _other_paths_jit(params, params32, params32_as64, center32):
    k, dom = 4, _domain(3, "box")
    bott = jc.features.DerivativeFeatures(k, coordinates="bottleneck")(
        params, [2, 3], activation="tanh", domain=dom)
    z0 = jc.features.point_features(params, domain_center(dom, jnp.float64)[None],
                                    activation="tanh")[0][0]
    bott_ref = taylor.propagate_polynomial(taylor.input_polynomial(z0, k), params[1:3],
                                           activation="tanh", order=k, num_vars=2)
    multi = jc.features.DerivativeFeatures(k, auto_centers=True)(params[1:], [1], activation="sin",
                                                        domain=jc.Ball(2, 0.5))[1].z
    centres = jc.features.default_centers(jnp.zeros(2), jnp.full((2,), 0.5))
    multi_ref = _reference_layer([taylor.input_polynomial(c, k) for c in centres],
                                 [params[1]] * len(centres), ["sin"] * len(centres), 2, k)
    f32 = [taylor.affine_features(c, p[0]["kernel"], p[0]["bias"], activation="gelu", order=K)
           for c, p in ((center32, params32), (center32.astype(jnp.float64), params32_as64))]
    (ref32,) = _reference_layer([taylor.input_polynomial(center32, K)], params32[:1], ["gelu"],
                                2)
    return {"bottleneck": ([bott[2].z, bott[3].z], bott_ref),
            "dims": [bott[l].coord_dim for l in (2, 3)],
            "multi": (multi, jnp.concatenate(multi_ref, axis=0)),
            "float32": (*f32, ref32)}


def test_closed_form_under_other_coordinates_and_centres():
    # bottleneck coordinates and several centres start the pass from the closed form too; they
    # match the Horner pass from each centre (hidden layer 2 in the bottleneck's coordinates
    # z = h^(1)(x) is the closed form in z, layer 3 is propagated from it)
    out = _other_paths()
    (bott, bott_ref), (multi, multi_ref) = out["bottleneck"], out["multi"]
    assert [int(m) for m in out["dims"]] == [2, 2]
    np.testing.assert_allclose(bott[0], bott_ref[0], rtol=1e-12, atol=0)
    assert _rel(bott[1], bott_ref[1]) < 1e-12
    assert multi.shape == (5 * jc.taylor.num_monomials(2, 4), 6)  # J = 2 m + 1 centres stacked
    np.testing.assert_allclose(multi, multi_ref, rtol=1e-12, atol=0)


def test_closed_form_in_float32():
    got, exact, ref = _other_paths()["float32"]
    assert got.dtype == ref.dtype == jnp.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=0)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=0)
