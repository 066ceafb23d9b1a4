"""Where a network's hidden neurons live: one mesh axis of a :class:`jax.sharding.Mesh`.

A :class:`Placement` is passed explicitly, as an argument, to every function that evaluates a
network or its features during a sharded compression (:func:`jaxcompress.compress` reads it from
the arrays' own shardings, :func:`jaxcompress.shard` puts it there); ``None`` means one device.
It is hashable, so it is static configuration under :func:`jax.jit` (a trace made for one
placement is never reused for another). This module depends on JAX alone: the evaluation code
(:mod:`jaxcompress.mlp`, :mod:`jaxcompress.taylor`) imports it without importing the compression.
"""

from __future__ import annotations

import dataclasses

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = ["Placement", "constrain_neurons"]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Hidden neurons split over the mesh axis ``axis`` of ``mesh`` (ours, not the paper's).

    Attributes:
      mesh: the device mesh (its axes of type ``Auto``: the compression lets XLA propagate
        shardings and constrains them with :func:`jax.lax.with_sharding_constraint`).
      axis: the name of the mesh axis the neurons are split over.
    """

    mesh: Mesh
    axis: str

    @property
    def devices(self) -> int:
        """How many devices share the neurons (the size of ``axis``)."""
        return int(self.mesh.shape[self.axis])

    def split_last(self, ndim: int) -> NamedSharding:
        """The sharding of an ``ndim``-dimensional array split by its last axis (neurons)."""
        return NamedSharding(self.mesh, P(*(None,) * (ndim - 1), self.axis))

    def replicated(self) -> NamedSharding:
        """The sharding of an array every device holds whole."""
        return NamedSharding(self.mesh, P())


def constrain_neurons(x: jax.Array, placement: Placement | None) -> jax.Array:
    """Ask XLA to keep ``x`` split by its last axis (neurons) over ``placement``.

    The identity for ``placement=None`` (one device) and for a last axis that does not divide
    over the devices (the compressed network's ``D_k``-wide layers).
    """
    if placement is None or x.shape[-1] % placement.devices:
        return x
    return jax.lax.with_sharding_constraint(x, placement.split_last(x.ndim))
