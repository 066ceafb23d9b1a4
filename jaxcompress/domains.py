"""Input domains: sampling (uniform and Sobol), projection, radius.

A domain is a small frozen dataclass, registered as a pytree whose numbers are leaves (so a
radius can be traced) and whose dimension is static.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._sobol import SOBOL_MAX_DIM, sobol

__all__ = ["Ball"]


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["radius", "center"], meta_fields=["dim"]
)
@dataclasses.dataclass(frozen=True)
class Ball:
    """The closed Euclidean ball ``{x in R^dim : |x - center| <= radius}``.

    Args:
      dim: the input dimension ``d_in``.
      radius: ``R > 0``.
      center: the centre (default: the origin), shape ``(dim,)``.
    """

    dim: int
    radius: float | jax.Array = 1.0
    center: jax.Array | None = None

    def __post_init__(self):
        if not isinstance(self.dim, (int, np.integer)) or self.dim < 1:
            raise ValueError(f"Ball: dim must be a positive int, got {self.dim!r}")
        r = self.radius
        if not isinstance(r, jax.core.Tracer) and not (np.ndim(r) == 0 and float(r) > 0):
            raise ValueError(f"Ball: radius must be a positive scalar, got {r!r}")
        c = self.center
        if c is not None and np.shape(c) != (self.dim,):
            raise ValueError(f"Ball: center has shape {np.shape(c)}; expected ({self.dim},)")

    def _center(self, dtype) -> jax.Array:
        if self.center is None:
            return jnp.zeros((self.dim,), dtype)
        return jnp.asarray(self.center, dtype)

    def sample(self, key: jax.Array, n: int, dtype=None) -> jax.Array:
        """``n`` points uniform in the ball (Gaussian direction, radius ``R u^(1/d)``). Jit-able."""
        dtype = jnp.zeros(()).dtype if dtype is None else dtype
        kd, kr = jax.random.split(key)
        g = jax.random.normal(kd, (n, self.dim), dtype)
        g = g / jnp.linalg.norm(g, axis=1, keepdims=True)
        u = jax.random.uniform(kr, (n, 1), dtype)
        return self._center(dtype)[None] + self.radius * u ** (1.0 / self.dim) * g

    def sobol(self, n: int, *, skip: int = 0, dtype=None) -> jax.Array:
        """The first ``n`` Sobol points of the bounding cube that fall in the ball (host side).

        Rejection keeps the low-discrepancy structure of the cube's sequence (the paper's
        "Sobol points of the unit disk"). Deterministic; ``skip`` offsets into the cube sequence.
        """
        if self.dim > SOBOL_MAX_DIM:
            raise ValueError(f"Ball.sobol: dim {self.dim} exceeds the supported {SOBOL_MAX_DIM}")
        frac = _ball_fraction(self.dim)
        pts = np.zeros((0, self.dim))
        total = int(n / frac * 1.1) + 16
        while pts.shape[0] < n:
            cube = 2.0 * sobol(total, self.dim, skip=skip) - 1.0
            pts = cube[np.sum(cube * cube, axis=1) <= 1.0]
            total *= 2
        dtype = jnp.zeros(()).dtype if dtype is None else dtype
        return self._center(dtype)[None] + self.radius * jnp.asarray(pts[:n], dtype)

    def project(self, x: jax.Array) -> jax.Array:
        """Euclidean projection onto the ball (rows of ``x``)."""
        c = jnp.expand_dims(self._center(x.dtype), tuple(range(x.ndim - 1)))
        v = x - c
        nrm = jnp.linalg.norm(v, axis=-1, keepdims=True)
        return c + v * jnp.minimum(1.0, self.radius / jnp.maximum(nrm, 1e-300))


def _ball_fraction(d: int) -> float:
    from math import gamma, pi

    return pi ** (d / 2) / gamma(d / 2 + 1) / 2**d
