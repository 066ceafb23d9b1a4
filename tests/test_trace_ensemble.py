"""Ensembles read from the jaxpr: a ``vmap`` over stacked parameters, however it is spelled
(``jax.vmap``, ``vmap`` imported before tracing, ``nnx.vmap``, ``eqx.filter_vmap``), leaves a
matrix product with a batch dimension over parameter leaves; the trace reads it member by member
(slice ``i`` of every stacked leaf, as a scan's layer ``i``), each member with its own neurons and
the stack one width. Nothing of JAX is replaced while ``fn`` traces. A batch dimension that is no
ensemble (a KAN's per-edge einsum) is refused with the operation, the user's line and a fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import vmap  # bound before jc.trace runs (an attribute swap would never see it)
from user_nets import ensemble, mlp
from user_nets import rel_l2 as _rel

import jaxcompress as jc

pytestmark = pytest.mark.usefixtures("user_broadcasting")

X = jnp.zeros((4, 2), jnp.float64)
BALL = jc.Ball(2, 1.0)
PTS = jax.random.uniform(jax.random.PRNGKey(1), (256, 2), jnp.float64, -0.7, 0.7)
ORIGINAL_VMAP = jax.vmap


def mean_of_members(p, x):
    """A deep ensemble as JAX users write it: ``jax.vmap`` over the stacked members, the mean."""
    return jax.vmap(mlp, in_axes=(0, None))(p, x).mean(0)


def mean_of_members_imported(p, x):
    """The same ensemble through ``vmap`` imported at the top of the file."""
    return vmap(mlp, in_axes=(0, None))(p, x).mean(0)


class Member(nnx.Module):
    """One member of the nnx ensemble: ``[2, 24, 24, 1]``, tanh."""

    def __init__(self, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(2, 24, rngs=rngs, param_dtype=jnp.float64)
        self.l2 = nnx.Linear(24, 24, rngs=rngs, param_dtype=jnp.float64)
        self.out = nnx.Linear(24, 1, rngs=rngs, param_dtype=jnp.float64)

    def __call__(self, x):
        return self.out(jnp.tanh(self.l2(jnp.tanh(self.l1(x)))))


class NnxEnsemble(nnx.Module):
    """Flax's ensemble recipe: members made under ``nnx.vmap`` with split keys, applied under
    ``nnx.vmap`` with ``in_axes=(0, None)``."""

    def __init__(self, members: int, rngs: nnx.Rngs):
        @nnx.split_rngs(splits=members)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs):
            return Member(rngs)

        self.members = make(rngs)

    def __call__(self, x):
        @nnx.vmap(in_axes=(0, None), out_axes=0)
        def each(member, x):
            return member(x)

        return each(self.members, x).mean(0)


def _eqx_ensemble(members: int):
    """Equinox's ensemble recipe: ``eqx.filter_vmap`` over the constructor, then over the
    members, each an ``eqx.nn.MLP`` applied per example."""
    eqx = pytest.importorskip("equinox", reason="equinox is not installed")

    class EqxEnsemble(eqx.Module):
        members: eqx.nn.MLP

        def __call__(self, x):
            return eqx.filter_vmap(lambda m: jax.vmap(m)(x))(self.members).mean(0)

    def make(key):
        return eqx.nn.MLP(2, 1, 24, 2, activation=jnp.tanh, key=key)

    stack = eqx.filter_vmap(make)(jax.random.split(jax.random.PRNGKey(0), members))
    stack = jax.tree.map(lambda a: a.astype(jnp.float64) if eqx.is_array(a) else a, stack)
    return EqxEnsemble(stack)


def _traced(spelling: str):
    """``(network, teacher's function on PTS, the compressed network's function on PTS)``."""
    if spelling in ("jax.vmap", "from jax import vmap"):
        fn = mean_of_members if spelling == "jax.vmap" else mean_of_members_imported
        p = ensemble(jax.random.PRNGKey(4), 4, [2, 24, 24, 1])
        return jc.trace(fn, p, X), lambda: jax.jit(fn)(p, PTS)
    model = NnxEnsemble(4, nnx.Rngs(0)) if spelling == "nnx.vmap" else _eqx_ensemble(4)
    y = np.asarray(model(PTS))
    return jc.trace_module(model, X), lambda: y


@pytest.mark.parametrize("spelling", ["jax.vmap", "from jax import vmap", "nnx.vmap",
                                      "eqx.filter_vmap"])
def test_a_vmap_over_stacked_members_is_an_ensemble_however_it_is_spelled(spelling):
    traced, teacher = _traced(spelling)
    net = traced.as_network()
    assert len(net.compressible) == 8 and len(net.plan().sets) == 2, str(net)
    assert "a stack under scan or vmap" in str(net)
    small, _ = jc.compress(traced, jc.collocation(4), domain=BALL)
    kernels = [a for a in jax.tree_util.tree_leaves(small.params) if np.ndim(a) == 3]
    assert sorted(k.shape[0] for k in kernels) == [4, 4, 4]
    assert sorted(max(k.shape[1:]) for k in kernels) == [15, 15, 15]
    y, ys = np.asarray(teacher()), np.asarray(small(PTS))
    assert np.linalg.norm(ys - y) / np.linalg.norm(y) <= 5e-2
    if isinstance(traced, jc.ModuleNetwork):     # the module back, of the smaller widths
        np.testing.assert_allclose(np.asarray(small.module(PTS)), ys, rtol=1e-9, atol=1e-12)
    else:   # each member keeps its own neurons: the first layer's kept biases differ
        first = np.asarray(small.params[0]["bias"])
        assert len({tuple(first[i]) for i in range(4)}) == 4


def test_the_ensemble_compresses_as_the_members_do_one_by_one():
    """The stack's accuracy is the members' own: each member compressed alone as a plain
    network, against the same member's slice of the compressed stack."""
    p = ensemble(jax.random.PRNGKey(4), 4, [2, 24, 24, 1])
    small, _ = jc.compress(jc.trace(mean_of_members, p, X), jc.collocation(4), domain=BALL)
    alone = []
    for i in range(4):
        member = jax.tree.map(lambda a, i=i: a[i], p)
        one, _ = jc.compress(jc.trace(mlp, member, X), jc.collocation(4), domain=BALL)
        alone.append(_rel(jax.jit(mlp), member, one.params))
    in_stack = [_rel(jax.jit(mlp), jax.tree.map(lambda a, i=i: a[i], p),
                     jax.tree.map(lambda a, i=i: a[i], small.params)) for i in range(4)]
    np.testing.assert_allclose(in_stack, alone, rtol=1e-6)


def test_no_attribute_of_jax_is_replaced_while_fn_traces():
    seen = []

    def fn(p, x):
        seen.append((jax.vmap is ORIGINAL_VMAP, vmap is ORIGINAL_VMAP))
        return mean_of_members(p, x)

    p = ensemble(jax.random.PRNGKey(4), 2, [2, 8, 1])
    jc.compress(jc.trace(fn, p, X), jc.collocation(2), domain=BALL)
    assert seen and all(a and b for a, b in seen)
    assert jax.vmap is ORIGINAL_VMAP


GRID = jnp.linspace(-1.0, 1.0, 5)


def kan_layer(p, x):
    """A radial-basis spline KAN layer: one learned function per edge, summed per output."""
    basis = jnp.exp(-(((x[..., None] - GRID) / 0.5) ** 2))      # (n, d_in, K)
    edges = jnp.einsum("nik,iko->nio", basis, p["coef"])       # the batched einsum
    return edges.sum(1) + x @ p["w"]


def test_a_kan_is_refused_with_the_operation_the_line_and_a_fix():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    p = [{"coef": jax.random.normal(k1, (2, 5, 8)), "w": jax.random.normal(k2, (2, 8))},
         {"coef": jax.random.normal(k1, (8, 5, 1)), "w": jax.random.normal(k2, (8, 1))}]
    net = jc.trace(lambda p, x: kan_layer(p[1], kan_layer(p[0], x)), p, X)
    text = str(net)
    assert not net.compressible
    assert "`dot_general` with a batch dimension that is no ensemble" in text
    assert "test_trace_ensemble.py" in text and "kan_layer" in text     # the user's line
    assert "fix: stack an ensemble's members along axis 0" in text
    assert "jax.vmap" not in text.replace("jax.vmap, nnx.vmap, eqx.filter_vmap", "")


def test_members_stacked_along_another_axis_are_refused_with_a_fix():
    """``vmap`` over the last axis of the stacked leaves: the members' axis is not axis 0
    of the leaves, the product is kept whole and the fix says how to stack them."""
    p = [jax.tree.map(lambda a: jax.device_put(np.moveaxis(np.asarray(a), 0, -1)), layer)
         for layer in ensemble(jax.random.PRNGKey(4), 3, [2, 8, 1])]
    net = jc.trace(lambda p, x: vmap(mlp, in_axes=(-1, None))(p, x).mean(0), p, X)
    assert not net.compressible
    assert "map that axis (in_axes=0)" in str(net)
    assert "user_nets.py" in str(net) and "(mlp)" in str(net)      # the member's line


def test_no_attribute_of_jax_is_assigned_anywhere_in_the_package():
    """The source of the package assigns no attribute of ``jax`` (``jax.vmap = ...``,
    ``setattr(jax, ...)``): transformations are read from the jaxpr."""
    import ast
    import pathlib

    roots = {"jax", "jnp", "lax"}
    found = []
    for path in pathlib.Path(jc.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                root = t
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(t, ast.Attribute) and isinstance(root, ast.Name) \
                        and root.id in roots:
                    found.append(f"{path.name}:{node.lineno}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "setattr" and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in roots):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found
