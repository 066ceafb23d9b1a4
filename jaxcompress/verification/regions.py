r"""The domains :func:`~jaxcompress.verification.verify` covers with boxes: a box, or a ball.

A :class:`Region` is the verifier's view of a :class:`jaxcompress.Box` or
:class:`jaxcompress.Ball`: the bounding box the branch and bound starts from, the clipping of a
box to the domain, the projection of a point onto it and uniform samples.

**Balls** are covered by boxes that meet them. Before a box is bounded it is shrunk to the
bounding box of its intersection with the ball (ours; exact up to rounding): with
``m_i = sum_(j != i) dist(c_j, [l_j, u_j])^2`` the squared distance from the ball's centre
``c`` to the box along the other axes, coordinate ``i`` of a point of the intersection satisfies
``(x_i - c_i)^2 <= R^2 - m_i``, so

.. math::
   [l_i, u_i] \;\to\; [\max(l_i, c_i - \sqrt{R^2 - m_i}),\ \min(u_i, c_i + \sqrt{R^2 - m_i})],

and a box with ``sum_j dist(c_j, [l_j, u_j])^2 > R^2`` misses the ball and is dropped. The
square roots are rounded outwards and a box is dropped only when it misses the ball by more
than the rounding, so the clipped boxes cover the ball. Points where the difference is
evaluated (for the lower bound) are projected into the ball, shrunk by a relative ``1e-12`` so
that they lie inside it in exact arithmetic.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from jaxcompress.domains import Ball, Box
from jaxcompress.verification.taylor import TINY, UNIT_ROUNDOFF

__all__ = ["Region"]

#: Relative slack of the half-widths of split and clipped boxes (covers the rounding of the new
#: centres: a child box contains its share of the parent in exact arithmetic).
_SLACK = 8 * UNIT_ROUNDOFF
_INSIDE = 1.0 - 1e-12


@dataclasses.dataclass(frozen=True)
class Region:
    """A box or a ball as NumPy float64 arrays.

    Attributes:
      kind: ``"box"`` or ``"ball"``.
      dim: the input dimension.
      lo, hi: the bounding box.
      center, radius: the ball (for a box: its centre and half-diagonal).
    """

    kind: str
    dim: int
    lo: np.ndarray
    hi: np.ndarray
    center: np.ndarray
    radius: float

    @staticmethod
    def of(domain, where: str = "verify") -> Region:
        """The region of a :class:`jaxcompress.Box` or :class:`jaxcompress.Ball`."""
        if isinstance(domain, Box):
            lo = np.asarray(domain.lo, np.float64).reshape(-1)
            hi = np.asarray(domain.hi, np.float64).reshape(-1)
            c = 0.5 * (lo + hi)
            return Region("box", int(lo.size), lo, hi, c,
                          float(np.linalg.norm(hi - lo) / 2))
        if isinstance(domain, Ball):
            d = int(domain.dim)
            c = (np.zeros(d) if domain.center is None
                 else np.asarray(domain.center, np.float64).reshape(d))
            r = float(np.asarray(domain.radius, np.float64))
            return Region("ball", d, c - r, c + r, c, r)
        raise TypeError(f"{where}: domain must be a jaxcompress.Box or a jaxcompress.Ball (the "
                        "domains a branch and bound over boxes covers), got "
                        f"{type(domain).__name__}")

    def params(self) -> tuple[np.ndarray, np.ndarray]:
        """The numbers the compiled programs take: ``(lo, hi)`` or ``(center, [radius])``."""
        if self.kind == "box":
            return self.lo, self.hi
        return self.center, np.array([self.radius])

    def root(self) -> tuple[np.ndarray, np.ndarray]:
        """The first box: centre and half-widths of the bounding box."""
        c = 0.5 * (self.lo + self.hi)
        h = 0.5 * (self.hi - self.lo)
        return c, h * (1.0 + _SLACK) + _SLACK * np.abs(c) + TINY

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """``n`` uniform points of the domain (NumPy, seeded)."""
        rng = np.random.default_rng(seed)
        if self.kind == "box":
            return self.lo + (self.hi - self.lo) * rng.random((n, self.dim))
        g = rng.standard_normal((n, self.dim))
        g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
        r = self.radius * rng.random((n, 1)) ** (1.0 / self.dim)
        return self.center + _INSIDE * r * g

    # ---- traceable (one box / one point; vmapped by the caller) ----------------------------

    def clip(self, params, c, h):
        """``(c', h', empty)``: a box covering the intersection of ``[c - h, c + h]`` with the
        domain, and whether that intersection is empty."""
        lo, hi = c - h, c + h
        if self.kind == "box":
            dlo, dhi = params
            nlo, nhi = jnp.maximum(lo, dlo), jnp.minimum(hi, dhi)
            empty = jnp.any(nlo > nhi)
        else:
            center, radius = params[0], params[1][0]
            dist = jnp.maximum(center - hi, 0.0) + jnp.maximum(lo - center, 0.0)
            d2 = dist * dist
            total = jnp.sum(d2)
            r2 = radius * radius
            empty = total * (1.0 - 16 * UNIT_ROUNDOFF) > r2 * (1.0 + 16 * UNIT_ROUNDOFF)
            others = jnp.maximum((total - d2) * (1.0 - 16 * UNIT_ROUNDOFF)
                                 - 16 * UNIT_ROUNDOFF * d2, 0.0)
            ext = jnp.sqrt(jnp.maximum(r2 * (1.0 + 8 * UNIT_ROUNDOFF) - others, 0.0))
            ext = ext * (1.0 + 8 * UNIT_ROUNDOFF) + TINY
            nlo = jnp.maximum(lo, center - ext - _SLACK * jnp.abs(center))
            nhi = jnp.minimum(hi, center + ext + _SLACK * jnp.abs(center))
            empty = empty | jnp.any(nlo > nhi)
        nc = 0.5 * nlo + 0.5 * nhi
        nh = jnp.maximum(nhi - nc, nc - nlo)
        nh = nh * (1.0 + _SLACK) + _SLACK * jnp.abs(nc) + TINY
        return nc, nh, empty

    def project(self, params, x):
        """A point of the domain near ``x`` (the Euclidean projection, pulled inside a ball by
        a relative ``1e-12``)."""
        if self.kind == "box":
            dlo, dhi = params
            return jnp.clip(x, dlo, dhi)
        center, radius = params[0], params[1][0]
        v = x - center
        nrm = jnp.sqrt(jnp.sum(v * v))
        factor = jnp.minimum(1.0, _INSIDE * radius / jnp.maximum(nrm, 1e-300))
        return center + v * factor
