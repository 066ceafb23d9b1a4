"""Networks written the way users write them, shared by the traced-network tests."""

import jax
from flax import nnx


class GeluNet(nnx.Module):
    """A custom __call__: Linears in an nnx.List, the tanh-approximate GELU between them."""

    def __init__(self, sizes, rngs):
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs)
                                for a, b in zip(sizes[:-1], sizes[1:], strict=True)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jax.nn.gelu(layer(x), approximate=True)
        return self.layers[-1](x)
