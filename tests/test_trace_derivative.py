"""Derivatives of the network inside ``fn``: a Hamiltonian network returning ``J grad H``, an
energy network returning its forces beside the energy, an SDF returning its unit normal. Under
``jax.grad`` the program computes every group again as a *cotangent* (the kernels applied
transposed) and never the output kernel's ``h K``: the analysis reads the transposed kernels as
the same neurons, the output kernel's rows as readers of the last group through the derivative,
and the features are the activations with their first derivatives (collocation, data matching)
and, for rows read only through the derivative, their contribution ``grad h_j`` to the output.
The user's own ``fn`` runs on the smaller leaves."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from user_nets import ensemble, mlp
from user_nets import flat as _flat
from user_nets import rel_l2 as _rel

import jaxcompress as jc

pytestmark = pytest.mark.usefixtures("user_broadcasting")

X = jnp.zeros((4, 2), jnp.float64)
BALL = jc.Ball(2, 1.0)


def energy(p, x):
    return mlp(p, x)[:, 0]


def hamiltonian_field(p, x):
    """``(dH/dp, -dH/dq)`` of ``H(q, p)``: the gradient of the batch's summed energy is each
    row's own gradient."""
    g = jax.grad(lambda x: energy(p, x).sum())(x)
    return jnp.stack([g[:, 1], -g[:, 0]], axis=-1)


def energy_and_forces(p, x):
    e, g = jax.value_and_grad(lambda x: energy(p, x).sum())(x)
    return {"energy": energy(p, x), "forces": -g}


def per_example_gradient(p, x):
    """``vmap(grad(H))`` over the rows, as written for one example."""
    return jax.vmap(jax.grad(lambda xi: mlp(p, xi[None])[0, 0]))(x)


def sdf_normal(p, x):
    """A sine network's unit normal (the last layer's ``sin`` is never computed under
    ``jax.grad``: only its derivative, ``cos``)."""
    g = jax.grad(lambda x: mlp(p, x, lambda u: jnp.sin(2.0 * u))[:, 0].sum())(x)
    return g / jnp.linalg.norm(g, axis=-1, keepdims=True)


SHAPES = {
    "Hamiltonian field J grad H": hamiltonian_field,
    "energy and forces": energy_and_forces,
    "vmap(grad) per example": per_example_gradient,
    "SDF normal of a sine network": sdf_normal,
}


@pytest.fixture(scope="module")
def params():
    return jc.init_mlp(jax.random.PRNGKey(0), [2, 24, 24, 1], dtype=jnp.float64)


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_derivative_of_the_network_inside_fn_compresses(params, name):
    fn = SHAPES[name]
    net = jc.trace(fn, params, X)
    assert net.derivative
    assert [g.width for g in net.compressible] == [24, 24]
    text = str(net)
    assert "fn differentiates the network" in text
    if name != "energy and forces":      # the energy reads the last group's h K itself
        assert "[2]['kernel'] (through jax.grad)" in text
    small, info = jc.compress(net, jc.collocation(5), domain=BALL)
    assert [g.width for g in small.as_network().compressible] == [21, 21]
    assert small.params[1]["kernel"].shape == (21, 21)
    assert _rel(fn, params, small.params) <= 5e-2, name
    np.testing.assert_allclose(_flat(small(X + 0.1)), _flat(jax.jit(fn)(small.params, X + 0.1)))


def test_the_last_group_is_fitted_on_its_gradients(params):
    """The output kernel's rows are read only through ``grad h``: fitting them on the values
    of ``h`` (as for a plain network) is a different, worse fit of the field."""
    fn = hamiltonian_field
    field, _ = jc.compress(jc.trace(fn, params, X), jc.collocation(4), domain=BALL)
    plain, _ = jc.compress(params, jc.collocation(4), activation="tanh", domain=BALL)
    ours, theirs = _rel(fn, params, field.params), _rel(fn, params, plain)
    assert ours < theirs, (ours, theirs)


def test_gradients_is_an_option_of_collocation_and_data_matching(params):
    """``gradients=True`` on a plain network: the first derivatives at the nodes are features
    too, ``(1 + d_in)`` times the rows; ``False`` on a differentiated one turns them off."""
    fmap = jc.collocation(3, gradients=True).features
    feats = fmap(params, [1], activation="tanh", domain=BALL)[1]
    plain = jc.collocation(3).features(params, [1], activation="tanh", domain=BALL)[1]
    assert feats.z.shape == (3 * plain.z.shape[0], 24)
    z = np.asarray(feats.z)
    np.testing.assert_allclose(z[::3], plain.z, rtol=1e-12)     # value, d/dx1, d/dx2
    x = draws.uniform(jax.random.PRNGKey(2), (64, 2), jnp.float64, -1, 1)
    small, _ = jc.compress(params, jc.data_matching(x, widths=[12, 12], gradients=True),
                           activation="tanh", domain=BALL)
    assert jc.layer_sizes(small) == [2, 12, 12, 1]
    net = jc.trace(hamiltonian_field, params, X)
    off, _ = jc.compress(net, jc.collocation(4, gradients=False), domain=BALL)
    on, _ = jc.compress(net, jc.collocation(4), domain=BALL)
    assert not np.allclose(_flat(off.params), _flat(on.params))


def laplacian(p, x):
    """A PINN's Laplacian, forward over reverse, one example at a time."""
    def grad_u(xi):
        return jax.grad(lambda z: mlp(p, z[None])[0, 0])(xi)
    return jax.vmap(lambda xi: jnp.trace(jax.jacfwd(grad_u)(xi)))(x)[:, None]


def grad_of_squared_gradient(p, x):
    """Reverse over reverse: ``grad |grad H|^2``."""
    g = jax.grad(lambda x: energy(p, x).sum())
    return jax.grad(lambda x: (g(x) ** 2).sum())(x)


@pytest.mark.parametrize("fn", [laplacian, grad_of_squared_gradient])
def test_second_derivatives_compress(params, fn):
    """Differentiating the derivative computes each group at a second site (the tangent or
    the cotangent of the first derivative, a function of ``x``): sliced with the others, its
    readers fitted to both."""
    net = jc.trace(fn, params, X)
    assert [len(g.sites) for g in net.compressible] == [2, 2]
    assert not net.unknown                     # (jacfwd's identity, `iota`, is a constant)
    small, _ = jc.compress(net, jc.collocation(5), domain=BALL)
    assert _rel(fn, params, small.params) <= 5e-2


def test_a_cotangent_used_nonlinearly_pins_what_it_meets(params):
    """A cotangent of the network's neurons multiplied by itself inside the network is not
    what a derivative computes (its readers' rows would enter twice): pinned, with the
    reason, and so is everything it reaches. (Written by hand: ``jax.grad`` never does it.)"""
    def fn(p, x):
        ct = jnp.ones((x.shape[0], 1)) @ p[2]["kernel"].T          # the seed, c K^T
        h = jnp.tanh(x @ p[0]["kernel"] + p[0]["bias"])
        h = jnp.tanh(h @ p[1]["kernel"] + p[1]["bias"])
        dz = ct * (1 - h ** 2)
        return (dz * dz) @ p[1]["kernel"].T @ p[0]["kernel"].T

    net = jc.trace(fn, params, X)
    assert "`mul` of a cotangent (a derivative taken inside fn) that is not linear in it" \
        in str(net)
    assert not net.compressible


def test_a_gate_and_two_heads_under_grad(params):
    """A gated first layer ``tanh(x W + b) * tanh(x G + c)`` and two output heads, summed
    under ``jax.grad``: the gate's product is never computed (only ``ct * U`` and ``ct * h``),
    so the rows that read it tie its two groups; the two heads' cotangents are one seed of
    both kernels' rows."""
    k = jax.random.split(jax.random.PRNGKey(5), 4)
    p = {"w": draws.normal(k[0], (2, 16)), "g": draws.normal(k[1], (2, 16)),
         "heads": [draws.normal(k[2], (16, 1)) / 4, draws.normal(k[3], (16, 2)) / 4]}

    def fn(p, x):
        def energy(x):
            h = jnp.tanh(x @ p["w"]) * jnp.tanh(x @ p["g"] + 0.5)
            return sum(jnp.sum(h @ w) for w in p["heads"])
        return jax.grad(energy)(x)

    net = jc.trace(fn, p, X)
    assert [g.width for g in net.compressible] == [16, 16]
    assert net.compressible[0].tied == (1, 2)
    small, _ = jc.compress(net, jc.collocation(4), domain=BALL)
    assert small.params["heads"][1].shape == (15, 2)
    assert _rel(fn, p, small.params) <= 5e-2


def test_an_ensemble_of_hamiltonian_networks():
    """``jax.vmap`` over the members' stacked parameters of a field that differentiates each
    member: the output rows read through ``jax.grad`` are slices of a stacked leaf, and the
    stack's parts take their gradient features too."""
    p = ensemble(jax.random.PRNGKey(4), 3, [2, 24, 24, 1])

    def fn(p, x):
        return jax.vmap(hamiltonian_field, in_axes=(0, None))(p, x).mean(0)

    net = jc.trace(fn, p, X)
    assert net.derivative and len(net.compressible) == 6
    small, _ = jc.compress(net, jc.collocation(5), domain=BALL)
    assert small.params[2]["kernel"].shape == (3, 21, 1)
    assert _rel(fn, p, small.params) <= 5e-2
