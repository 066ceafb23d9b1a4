"""Networks written the way users write them, shared by the traced-network tests."""

import draws
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def ensemble(key, members, sizes):
    """The stacked dense layers of ``members`` networks of layer ``sizes``: kernels
    ``(members, a, b)``, biases ``(members, b)`` (for ``jax.vmap`` over the members)."""
    keys = jax.random.split(key, len(sizes))
    # scaled on the host, bit for bit what the device gave (XLA divides by a constant as a
    # product with its reciprocal): on the device each shape compiled two programs
    return [{"kernel": jax.device_put(np.asarray(draws.normal(k, (members, a, b)))
                                      * (1.0 / np.sqrt(a))),
             "bias": jax.device_put(0.1 * np.asarray(draws.normal(jax.random.fold_in(k, 1),
                                                                  (members, b))))}
            for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=False)]


def mlp(p, x, act=jnp.tanh):
    """A params-list MLP written by hand: ``act`` on the hidden layers, the last linear."""
    h = x
    for layer in p[:-1]:
        h = act(h @ layer["kernel"] + layer["bias"])
    return h @ p[-1]["kernel"] + p[-1]["bias"]


def flat(tree):
    """Every array of a pytree (an output, a parameter tree) as one NumPy vector."""
    return np.concatenate([np.ravel(np.asarray(a)) for a in jax.tree_util.tree_leaves(tree)])


def rel_l2(fn, teacher, small_params):
    """Relative L2 distance of ``fn`` on ``small_params`` from ``fn`` on ``teacher`` at 512
    uniform points of ``[-0.7, 0.7]^2`` (float64; ``fn`` in one compiled program per parameter
    shapes, the distance on the host: op by op, every operation and shape compiled a program)."""
    pts = draws.uniform(jax.random.PRNGKey(1), (512, 2), jnp.float64, -0.7, 0.7)
    run = jax.jit(fn)
    y, ys = flat(run(teacher, pts)), flat(run(small_params, pts))
    return float(np.linalg.norm(y - ys) / np.linalg.norm(y))


class GeluNet(nnx.Module):
    """A custom __call__: Linears in an nnx.List, the tanh-approximate GELU between them."""

    def __init__(self, sizes, rngs):
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs)
                                for a, b in zip(sizes[:-1], sizes[1:], strict=True)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.gelu(layer(x), approximate=True)
        return self.layers[-1](x)
