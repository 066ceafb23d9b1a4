"""The first hidden layer's Taylor coefficients in closed form, against the Taylor pass.

``taylor.affine_features`` computes ``s_|alpha|(u0) |alpha|!/alpha! w^alpha`` (no truncated
products); the reference is the multivariate Taylor pass from the input polynomial ``x0 + t``
(``propagate_polynomial(input_polynomial(x0, k), ...)``: Horner's rule with truncated products,
itself tested against nested jacfwd in ``test_features.py``). The reference is run once per
input dimension on every case's columns side by side (``compose`` takes any columns), so the
whole comparison compiles in one program of a few passes.
"""

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
    series = [jc.get_activation(a).series(u[0], k) for a, u in zip(acts, us, strict=True)]
    out = taylor.compose(jnp.concatenate(series, axis=1), jnp.concatenate(us, axis=1), d, k)
    return jnp.split(out, np.cumsum([u.shape[1] for u in us])[:-1], axis=1)


@jax.jit
def _first_layer_cases():
    out = {}
    for d in (1, 2, 3):
        cases = [c for c in CASES if c[1] == d]
        params = _teacher(d)
        got = [jc.DerivativeFeatures(K)(params, [1], activation=act, domain=_domain(d, kind))[1].z
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
        assert got.shape == ref.shape == (jc.num_monomials(d, K), 7)
        # every coefficient to 1e-12 relative: a product of positive counts, powers and s_j,
        # no cancellation on either side
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0,
                                   err_msg=f"{act}, d_in = {d}, {kind}")
