"""Input domains: sampling (uniform and Sobol), collocation nodes, projection, radius, centre.

A domain is a small frozen dataclass, registered as a pytree whose numbers are leaves (so a
radius or a box's corners can be traced) and whose dimension is static. Every domain provides

``dim``, ``radius``, ``center``
    the input dimension; the radius used to scale derivative features (Ball: its radius; Box: its
    half-diagonal, the radius of the smallest ball around the centre containing the box); the
    expansion point of derivative features.
``sample(key, n)``, ``project(x)``
    uniform samples and Euclidean projection (what :func:`jaxcompress.sup_error` needs).
``sobol(n, skip=0)``, ``nodes(n, kind)``
    quasi-random points (host-side unit nodes, cached, mapped onto the domain with JAX ops so the
    domain's numbers may be traced): the collocation points of ``compress(features=
    "collocation")``. Sobol points up to 16 dimensions (the embedded Joe-Kuo table), a
    Kronecker sequence beyond (:func:`jaxcompress._sobol.quasi_random`); a ball of
    more than :data:`BALL_REJECTION_MAX_DIM` dimensions maps the cube's points onto itself
    instead of rejecting them.

:class:`Parameterization` describes a domain given as the image of an analytic map
``iota: U -> Omega`` of a lower-dimensional parameter domain ``U`` (the paper's effective input
dimension); :class:`Points` a finite set of inputs (a network known through its data, in any
input dimension).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._checks import check_finite, is_concrete
from jaxcompress._sobol import SOBOL_MAX_DIM, quasi_random

__all__ = ["DOMAIN_TYPES", "NODE_KINDS", "Ball", "Box", "Domain", "Parameterization", "Points",
           "check_domain", "check_radius", "domain_center", "domain_valid"]

#: Collocation node families: ``"sobol"`` (every domain), ``"chebyshev"`` and
#: ``"chebyshev_grid"`` (boxes only; see :meth:`Box.nodes`).
NODE_KINDS = ("sobol", "chebyshev", "chebyshev_grid")


def check_radius(radius, where: str) -> None:
    """Refuse a radius that is not one finite positive number (tracers pass: checked where built).

    ``radius = 0``, negative, ``inf``, ``nan``, ``None`` or an array all raise ``ValueError``
    naming ``where`` and the value: a ball of such a radius has no meaning, and an infinite or
    NaN one used to give a silently wrong network.
    """
    if isinstance(radius, jax.core.Tracer) or not (
            radius is None or isinstance(radius, (int, float, list, tuple, np.ndarray, np.generic))
            or isinstance(radius, jax.Array)):
        return  # traced, or a pytree placeholder (an in_axes spec, jax.stages.ArgInfo, ...)
    try:
        ok = np.ndim(radius) == 0 and math.isfinite(float(radius)) and float(radius) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: radius must be one finite positive number, got {radius!r}")


#: Number of points of the error estimate (:func:`jaxcompress.measure.error_estimate`, and
#: ``CompressInfo.error_estimate``).
ERROR_POINTS = 256
#: Index of the first quasi-random point of the error estimate: far past any collocation node set
#: (those start at index 0), so the estimate is measured on points no method was fitted on.
ERROR_SKIP = 1 << 24


class Domain(abc.ABC):
    """What the compression, the error measurements and the certificates need of a domain.

    Members every domain has (fields or properties): ``dim`` (the dimension of the coordinates
    the features are taken in), ``radius`` and ``center``. Abstract: :meth:`center_as`,
    :meth:`half_widths`, :meth:`sobol`, :meth:`nodes`; :meth:`sample` and :meth:`project` (for
    :func:`jaxcompress.sup_error`) where the domain has them. The
    defaults below describe a domain of the network's own inputs; :class:`Parameterization`
    overrides them (features in the parameter ``u``), so no caller asks which kind it holds.
    """

    #: ``"input"``: features are taken in the network's inputs; ``"parameterization"``: in the
    #: parameter of an analytic map (:class:`Parameterization`).
    coordinates: ClassVar[str] = "input"
    #: The collocation node kinds :meth:`nodes` accepts.
    node_kinds: ClassVar[tuple[str, ...]] = ("sobol",)

    @property
    def parameter_map(self):
        """``iota`` for a :class:`Parameterization` (features in ``u``), else ``None``."""
        return None

    @property
    def base(self) -> Domain:
        """The domain of the feature coordinates (``U`` for a parameterisation; else itself)."""
        return self

    def input_dim(self, dtype=None) -> int:
        """``d_in``, the size of the network inputs this domain describes."""
        del dtype
        return self.dim

    def expansion(self, dtype) -> tuple[jax.Array, jax.Array]:
        """``(x0, R)``: the expansion point of derivative features and the radius that scales
        their rows (``R^|alpha|``), in the feature coordinates, as ``dtype``."""
        return self.center_as(dtype), jnp.asarray(self.radius, dtype)

    @abc.abstractmethod
    def center_as(self, dtype) -> jax.Array:
        """The centre as a ``(dim,)`` array of ``dtype``."""

    @abc.abstractmethod
    def valid(self) -> jax.Array:
        """A traceable boolean: whether the domain's numbers describe a domain (see
        :func:`domain_valid`)."""

    @abc.abstractmethod
    def half_widths(self, dtype) -> jax.Array:
        """``(dim,)`` half extents along the axes (where :func:`default_centers
        <jaxcompress.features.default_centers>` puts the extra expansion points)."""

    def sample(self, key: jax.Array, n: int, dtype=None) -> jax.Array:
        """``n`` uniform samples, ``(n, d_in)`` (what :func:`jaxcompress.sup_error` needs)."""
        raise TypeError(f"{type(self).__name__} has no uniform sampling (sup_error needs a Ball "
                        "or a Box)")

    @abc.abstractmethod
    def sobol(self, n: int, *, skip: int = 0, dtype=None) -> jax.Array:
        """Quasi-random points ``skip .. skip + n - 1`` of the domain, ``(n, d_in)``."""

    @abc.abstractmethod
    def nodes(self, n: int, kind: str = "sobol", dtype=None) -> jax.Array:
        """``n`` collocation nodes of a kind in :attr:`node_kinds`."""

    def estimate_points(self, n: int, dtype=None) -> jax.Array:
        """The fixed points of the error estimate (:func:`jaxcompress.measure.error_points`):
        the domain's quasi-random points ``ERROR_SKIP .. ERROR_SKIP + n - 1``, far past any
        collocation node set; a :class:`Points` domain returns its held-out rows."""
        return self.sobol(int(n), skip=ERROR_SKIP, dtype=dtype)

    def estimate_description(self) -> str:
        """The points of the error estimate, in words (``CompressInfo.estimated_on``)."""
        kind = "Sobol" if self.dim <= SOBOL_MAX_DIM else "Kronecker"
        return f"{ERROR_POINTS} {kind} points of the domain"

    def project(self, x: jax.Array) -> jax.Array:
        """The Euclidean projection of the rows of ``x`` onto the domain (the local search of
        :func:`jaxcompress.sup_error`)."""
        raise TypeError(f"{type(self).__name__} has no projection (sup_error needs a Ball or a "
                        "Box)")


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["radius", "center"], meta_fields=["dim"]
)
@dataclasses.dataclass(frozen=True)
class Ball(Domain):
    """The closed Euclidean ball ``{x in R^dim : |x - center| <= radius}``.

    Args:
      dim: the input dimension ``d_in``.
      radius: ``R > 0``, finite.
      center: the centre (default: the origin), shape ``(dim,)``, finite.

    A radius that is not one finite positive number, or a centre with NaN or Inf entries, is a
    ``ValueError`` when the ball is built. Traced values (a ball built under ``jax.jit``) cannot
    be checked there: a compression on such a ball returns ``error_estimate = NaN`` (see
    :func:`domain_valid`), never a plausible-looking number.
    """

    dim: int
    radius: float | jax.Array = 1.0
    center: jax.Array | None = None

    def __post_init__(self):
        if not isinstance(self.dim, (int, np.integer)) or self.dim < 1:
            raise ValueError(f"Ball: dim must be a positive int, got {self.dim!r}")
        check_radius(self.radius, "Ball")
        c = self.center
        if isinstance(c, (list, tuple)):
            # user input, converted once (as Box does), so the ball passes through jax.jit
            traced = any(isinstance(e, jax.core.Tracer) for e in jax.tree.leaves(c))
            c = jnp.stack(c) if traced else np.asarray(c, dtype=np.float64)
            object.__setattr__(self, "center", c)
        if _is_concrete_array(c):
            if np.shape(c) != (self.dim,):
                raise ValueError(f"Ball: center has shape {np.shape(c)}; expected ({self.dim},)")
            if not jnp.issubdtype(c.dtype, jnp.floating) and not jnp.issubdtype(c.dtype,
                                                                                 jnp.integer):
                raise TypeError(f"Ball: center must be real numbers, got dtype {c.dtype}")
            check_finite(c, "Ball", "center")

    def _center(self, dtype) -> jax.Array:
        if self.center is None:
            return jnp.zeros((self.dim,), dtype)
        return jnp.asarray(self.center, dtype)

    def center_as(self, dtype) -> jax.Array:
        """The centre (the origin when unset) as ``dtype``."""
        return self._center(dtype)

    def valid(self) -> jax.Array | np.bool_:
        """A finite radius ``> 0`` and a finite centre (a NumPy bool when they are concrete)."""
        if _on_host(self.radius, self.center):
            return np.bool_(np.isfinite(self.radius) and self.radius > 0 and (
                self.center is None or bool(np.all(np.isfinite(np.asarray(self.center))))))
        r = jnp.asarray(self.radius)
        ok = jnp.isfinite(r) & (r > 0)
        if self.center is not None:
            ok = ok & jnp.all(jnp.isfinite(jnp.asarray(self.center)))
        return ok

    def half_widths(self, dtype) -> jax.Array:
        """``R`` along every axis."""
        return jnp.full((self.dim,), 1.0, dtype) * jnp.asarray(self.radius, dtype)

    def sample(self, key: jax.Array, n: int, dtype=None) -> jax.Array:
        """``n`` points uniform in the ball (Gaussian direction, radius ``R u^(1/d)``). Jit-able;
        one compiled program per ``(n, dim, dtype)`` when called outside ``jit``."""
        return _sample(self, key, int(n), dtype)

    def _sample(self, key: jax.Array, n: int, dtype) -> jax.Array:
        kd, kr = jax.random.split(key)
        g = jax.random.normal(kd, (n, self.dim), dtype)
        g = g / jnp.linalg.norm(g, axis=1, keepdims=True)
        u = jax.random.uniform(kr, (n, 1), dtype)
        return self._center(dtype)[None] + self.radius * u ** (1.0 / self.dim) * g

    def sobol(self, n: int, *, skip: int = 0, dtype=None) -> jax.Array:
        """``n`` low-discrepancy points of the ball (host side, deterministic).

        Up to :data:`BALL_REJECTION_MAX_DIM` dimensions: the first ``n`` Sobol points of the
        bounding cube that fall in the ball (rejection keeps the low-discrepancy structure of the
        cube's sequence: the paper's "Sobol points of the unit disk"); ``skip`` offsets into the
        cube sequence. Beyond, the ball is a vanishing fraction of its cube (``1e-14`` at
        ``d = 32``), so the cube's points ``skip .. skip + n - 1`` are mapped onto the ball
        instead (ours, :func:`_cube_to_ball`: a uniform point of the cube goes to a uniform point
        of the ball). The unit-ball points are computed with NumPy; centre and radius are applied
        with JAX operations, so they may be traced.
        """
        pts = _unit_ball_points(self.dim, int(n), int(skip))
        dtype = _float_dtype(dtype)
        if _on_host(self.radius, self.center):   # NumPy: the same arithmetic, no program
            c = np.zeros(self.dim, dtype) if self.center is None else np.asarray(self.center,
                                                                                 dtype)
            return jax.device_put(c[None] + np.asarray(self.radius, dtype) * pts.astype(dtype))
        return self._center(dtype)[None] + self.radius * jnp.asarray(pts, dtype)

    def nodes(self, n: int, kind: str = "sobol", dtype=None) -> jax.Array:
        """``n`` collocation nodes in the ball: ``kind="sobol"`` (the only kind for a ball)."""
        if kind != "sobol":
            raise ValueError(
                f"Ball.nodes: kind must be 'sobol' for a ball, got {kind!r} (Chebyshev-type nodes "
                "are available on a Box)"
            )
        return self.sobol(n, dtype=dtype)

    def project(self, x: jax.Array) -> jax.Array:
        """Euclidean projection onto the ball (rows of ``x``)."""
        c = jnp.expand_dims(self._center(x.dtype), tuple(range(x.ndim - 1)))
        v = x - c
        nrm = jnp.linalg.norm(v, axis=-1, keepdims=True)
        return c + v * jnp.minimum(1.0, self.radius / jnp.maximum(nrm, jnp.finfo(x.dtype).tiny))


#: The largest ball dimension whose points are the cube's Sobol points kept by rejection (the
#: ball fills 0.25% of its cube at ``d = 10``, 0.09% at 11); larger balls map the cube's points.
BALL_REJECTION_MAX_DIM = 10


def _ball_fraction(d: int) -> float:
    from math import gamma, pi

    return pi ** (d / 2) / gamma(d / 2 + 1) / 2**d


@functools.cache
def _unit_ball_points(dim: int, n: int, skip: int) -> np.ndarray:
    """``n`` low-discrepancy points of the unit ball in ``dim`` dimensions (see
    :meth:`Ball.sobol`)."""
    if dim <= BALL_REJECTION_MAX_DIM:
        frac = _ball_fraction(dim)
        pts = np.zeros((0, dim))
        total = int(n / frac * 1.1) + 16
        while pts.shape[0] < n:
            cube = 2.0 * quasi_random(total, dim, skip=skip) - 1.0
            pts = cube[np.sum(cube * cube, axis=1) <= 1.0]
            total *= 2
    else:
        pts = _cube_to_ball(quasi_random(n, dim, skip=skip))
    out = np.ascontiguousarray(pts[:n])
    out.setflags(write=False)
    return out


def _cube_to_ball(u: np.ndarray) -> np.ndarray:
    r"""Map points of ``[0, 1)^d`` onto the unit ball, uniform to uniform (ours).

    ``g = Phi^-1(u)`` (coordinatewise normal quantiles) is standard normal for uniform ``u``; its
    direction ``g / |g|`` is uniform on the sphere and independent of ``|g|``, whose CDF is
    ``F(|g|) = P(d/2, |g|^2 / 2)`` (the chi distribution; ``P`` the regularised lower incomplete
    gamma function), so ``F(|g|)`` is uniform on ``[0, 1]`` and the radius
    ``F(|g|)^(1/d)`` makes the point uniform in the ball:

    .. math:: x = \frac{g}{|g|} \, P\big(\tfrac d2, \tfrac{|g|^2}{2}\big)^{1/d}.

    The map is smooth, so a low-discrepancy design of the cube stays evenly spread.
    """
    d = u.shape[1]
    g = _normal_quantile(np.clip(u, 2.0**-40, 1.0 - 2.0**-40))
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    radius = _gamma_p(0.5 * d, 0.5 * norm[:, 0] ** 2) ** (1.0 / d)
    return g / np.maximum(norm, np.finfo(np.float64).tiny) * radius[:, None]


def _normal_quantile(p: np.ndarray) -> np.ndarray:
    """``Phi^-1(p)`` for ``0 < p < 1``: Acklam's rational approximation (relative error below
    ``1.2e-9``) and one Halley step on ``Phi(x) - p`` (``erfc`` from :mod:`math`)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
         1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
         6.680131188771972e+01, -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
         -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00)
    e = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
         3.754408661907416e+00)

    def tail(q):
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((e[0] * q + e[1]) * q + e[2]) * q + e[3]) * q + 1.0)

    lo, hi = 0.02425, 1.0 - 0.02425
    q = p - 0.5
    r = q * q
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
    x = np.where(p < lo, tail(np.sqrt(-2.0 * np.log(np.minimum(p, lo)))), x)
    x = np.where(p > hi, -tail(np.sqrt(-2.0 * np.log(np.minimum(1.0 - p, lo)))), x)
    cdf = 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2.0))
    err = cdf - p
    step = err * math.sqrt(2.0 * math.pi) * np.exp(0.5 * x * x)
    return x - step / (1.0 + 0.5 * x * step)


def _gamma_p(a: float, x: np.ndarray) -> np.ndarray:
    """The regularised lower incomplete gamma function ``P(a, x)`` for ``a > 0``, ``x >= 0``:
    the series ``x^a e^-x / Gamma(a + 1) sum_n x^n / ((a + 1) ... (a + n))`` (all terms
    positive, summed until they stop changing the sum)."""
    x = np.asarray(x, np.float64)
    term = np.ones_like(x)
    total = np.ones_like(x)
    n = 0
    while np.any(term > 1e-17 * total) and n < 100_000:
        n += 1
        term = term * x / (a + n)
        total = total + term
    with np.errstate(divide="ignore"):
        log_pre = np.where(x > 0, a * np.log(np.maximum(x, 1e-300)) - x - math.lgamma(a + 1.0),
                           -np.inf)
    return np.minimum(1.0, np.exp(log_pre) * total)


@functools.cache
def _unit_cube_nodes(dim: int, n: int, kind: str, skip: int = 0) -> np.ndarray:
    """Nodes in ``[-1, 1]^dim`` (host side, cached); see :meth:`Box.nodes`."""
    if kind == "sobol":
        pts = 2.0 * quasi_random(n, dim, skip=skip) - 1.0
    elif kind == "chebyshev":
        # Sobol points pushed through the Chebyshev map t -> -cos(pi t): the arcsine density of
        # Chebyshev nodes, for any n. Offset by half a step so no node sits on the boundary.
        pts = -np.cos(np.pi * (quasi_random(n, dim, skip=skip) + 0.5 / max(n, 1)))
    elif kind == "chebyshev_grid":
        m = 1
        while m**dim < n:
            m += 1
        cheb = -np.cos(np.pi * (2 * np.arange(m) + 1) / (2 * m))  # first-kind points, ascending
        grids = np.meshgrid(*([cheb] * dim), indexing="ij")
        pts = np.stack([g.reshape(-1) for g in grids], axis=1)
    else:
        raise ValueError(f"Box.nodes: kind must be one of {NODE_KINDS}, got {kind!r}")
    pts = np.ascontiguousarray(pts, dtype=np.float64)
    pts.setflags(write=False)
    return pts


def domain_center(domain: Domain, dtype) -> jax.Array:
    """The centre of a domain as ``dtype`` (:meth:`Domain.center_as`)."""
    return domain.center_as(dtype)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _sample(domain, key: jax.Array, n: int, dtype) -> jax.Array:
    # one program instead of a split, two draws and five arithmetic ops each compiled for the
    # shape when run op by op (inside an outer jit this is inlined as usual); dtype None is
    # resolved here, where jax_enable_x64 is part of the cache key
    return domain._sample(key, n, jnp.zeros(()).dtype if dtype is None else jnp.dtype(dtype))


def _on_host(*values) -> bool:
    """Whether every value is readable on the host (a number, a NumPy or concrete JAX array, or
    ``None``; not a tracer): then a domain's arithmetic runs in NumPy, not as a compiled
    program per shape (JAX compiles one even for ``jnp.asarray`` of a NumPy array)."""
    return all(is_concrete(v) for v in values)


def _float_dtype(dtype) -> np.dtype:
    """``dtype``, or JAX's default float (float64 with ``jax_enable_x64``), as JAX stores it."""
    return np.dtype(jax.dtypes.canonicalize_dtype(np.float64 if dtype is None else dtype))


def _is_concrete_array(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic, jax.Array)) and not isinstance(
        x, jax.core.Tracer)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["lo", "hi"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class Box(Domain):
    """The axis-aligned box ``{x : lo <= x <= hi}`` (componentwise).

    Args:
      lo, hi: the lower and upper corners, shape ``(dim,)`` with ``lo < hi`` in every coordinate.
        Lists and tuples are converted to arrays.

    ``center = (lo + hi) / 2`` is the expansion point of derivative features and
    ``radius = |hi - lo| / 2`` (the half-diagonal: the smallest ball around the centre that
    contains the box) scales them: row ``alpha`` of the features is multiplied by
    ``radius^|alpha|`` before selection.

    Non-finite corners or ``lo >= hi`` are a ``ValueError`` when the box is built; traced corners
    (under ``jax.jit``) cannot be checked there, and a compression on an invalid box returns
    ``error_estimate = NaN`` (see :func:`domain_valid`).
    """

    lo: jax.Array
    hi: jax.Array
    node_kinds: ClassVar[tuple[str, ...]] = NODE_KINDS

    def __post_init__(self):
        for name in ("lo", "hi"):
            v = getattr(self, name)
            # lists and float scalars are user input; other leaves (tracers, pytree placeholders
            # such as None or an in_axes int) pass through unvalidated
            if isinstance(v, (list, tuple, float)):
                object.__setattr__(self, name, np.asarray(v, dtype=np.float64))
        lo, hi = self.lo, self.hi
        if not (_is_concrete_array(lo) and _is_concrete_array(hi)):
            return  # traced, or a pytree placeholder: validated where it was built
        if np.ndim(lo) != 1 or np.shape(lo) != np.shape(hi) or np.shape(lo)[0] < 1:
            raise ValueError(
                f"Box: lo and hi must be 1-D arrays of the same length >= 1, got shapes "
                f"{np.shape(lo)} and {np.shape(hi)}"
            )
        lo_np, hi_np = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        if not (np.all(np.isfinite(lo_np)) and np.all(np.isfinite(hi_np))):
            raise ValueError("Box: lo and hi must be finite")
        if not np.all(lo_np < hi_np):
            bad = int(np.argmin(hi_np - lo_np))
            raise ValueError(
                f"Box: need lo < hi in every coordinate; coordinate {bad} has lo = {lo_np[bad]} "
                f">= hi = {hi_np[bad]}"
            )

    @property
    def dim(self) -> int:
        return int(np.shape(self.lo)[0])

    def _bounds(self, dtype) -> tuple[jax.Array, jax.Array]:
        return jnp.asarray(self.lo, dtype), jnp.asarray(self.hi, dtype)

    @property
    def center(self) -> jax.Array:
        """The midpoint ``(lo + hi) / 2``."""
        lo, hi = self._bounds(None)
        return 0.5 * (lo + hi)

    @property
    def half_width(self) -> jax.Array:
        """``(hi - lo) / 2`` per coordinate."""
        lo, hi = self._bounds(None)
        return 0.5 * (hi - lo)

    @property
    def radius(self) -> jax.Array:
        """The half-diagonal ``|hi - lo| / 2``."""
        return jnp.linalg.norm(self.half_width)

    def center_as(self, dtype) -> jax.Array:
        """The midpoint as ``dtype``."""
        return jnp.asarray(self.center, dtype)

    def valid(self) -> jax.Array | np.bool_:
        """Finite corners with ``lo < hi`` (a NumPy bool when they are concrete)."""
        if _on_host(self.lo, self.hi):
            lo, hi = (np.asarray(v) for v in (self.lo, self.hi))
            return np.bool_(bool(np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
                                 and np.all(lo < hi)))
        lo, hi = (jnp.asarray(v) for v in (self.lo, self.hi))
        return jnp.all(jnp.isfinite(lo)) & jnp.all(jnp.isfinite(hi)) & jnp.all(lo < hi)

    def half_widths(self, dtype) -> jax.Array:
        """``(hi - lo) / 2`` as ``dtype``."""
        return jnp.asarray(self.half_width, dtype)

    def _from_unit(self, u: np.ndarray | jax.Array, dtype) -> jax.Array:
        if isinstance(u, np.ndarray) and _on_host(self.lo, self.hi):   # no program
            lo, hi = (np.asarray(v, _float_dtype(dtype)) for v in (self.lo, self.hi))
            c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
            return jax.device_put(c[None] + h[None] * u.astype(c.dtype))
        lo, hi = self._bounds(dtype)
        c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
        return c[None] + h[None] * jnp.asarray(u, dtype)

    def sample(self, key: jax.Array, n: int, dtype=None) -> jax.Array:
        """``n`` points uniform in the box. Jit-able; one compiled program per
        ``(n, dim, dtype)`` when called outside ``jit``."""
        return _sample(self, key, int(n), dtype)

    def _sample(self, key: jax.Array, n: int, dtype) -> jax.Array:
        u = jax.random.uniform(key, (n, self.dim), dtype, -1.0, 1.0)
        return self._from_unit(u, dtype)

    def sobol(self, n: int, *, skip: int = 0, dtype=None) -> jax.Array:
        """Points ``skip .. skip + n - 1`` of the Sobol sequence mapped onto the box."""
        return self.nodes(n, "sobol", dtype=dtype, skip=skip)

    def nodes(self, n: int, kind: str = "sobol", dtype=None, *, skip: int = 0) -> jax.Array:
        """Collocation nodes in the box.

        Kinds:
          ``"sobol"``: the first ``n`` Sobol points (uniform, low discrepancy).
          ``"chebyshev"``: ``n`` Sobol points through the Chebyshev map ``t -> -cos(pi t)`` per
          coordinate (the arcsine density of Chebyshev nodes, clustered at the faces, for any
          ``n``).
          ``"chebyshev_grid"``: the tensor grid of ``m`` first-kind Chebyshev points per
          coordinate, ``m`` the smallest with ``m^dim >= n`` (so ``m^dim`` rows, not ``n``).

        The unit nodes are computed on the host and cached; the box's corners may be traced.
        """
        return self._from_unit(_unit_cube_nodes(self.dim, int(n), kind, int(skip)),
                               _float_dtype(dtype))

    def project(self, x: jax.Array) -> jax.Array:
        """Euclidean projection onto the box: clip each coordinate."""
        lo, hi = self._bounds(x.dtype)
        shape = (1,) * (x.ndim - 1) + (self.dim,)
        return jnp.clip(x, lo.reshape(shape), hi.reshape(shape))


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["domain"], meta_fields=["fn"]
)
@dataclasses.dataclass(frozen=True)
class Parameterization(Domain):
    """An input domain given as the image ``Omega = iota(U)`` of an analytic map.

    The paper's effective-input-dimension corollary ("exact analytic parameterization"): when
    every input of interest is ``x = iota(u)`` with ``u`` in an ``m``-dimensional domain ``U``
    (``m < d_in``) and ``iota`` analytic, the network restricted to ``Omega`` is an analytic
    function of ``u``, and matching its Taylor coefficients in ``u`` needs only
    ``D_k = C(m + k, m)`` features per neuron.

    Args:
      fn: ``iota``, a JAX-traceable function mapping ``(m,)`` to ``(d_in,)`` (used under
        ``jax.vmap`` and :func:`jax.experimental.jet.jet`, so built from ``jax.numpy`` operations
        with Taylor rules: polynomials, ``sin``, ``cos``, ``exp``, ``tanh``, ...). It is a static
        part of the configuration: pass the same function object to reuse a compilation.
      domain: the parameter domain ``U`` (a :class:`Ball` or :class:`Box` of dimension ``m``);
        its centre is the expansion point and its radius scales the features.

    Use it as the domain of a compression: ``jc.compress(params, method, activation=...,
    domain=Parameterization(iota, U))``. Its :attr:`center`, :attr:`radius` and :attr:`dim` are
    those of ``U`` (the coordinates the features are taken in); :meth:`nodes` and :meth:`sobol`
    return ``iota`` of ``U``'s points, i.e. points of ``Omega``.
    """

    fn: object
    domain: object
    coordinates: ClassVar[str] = "parameterization"

    def __post_init__(self):
        if not callable(self.fn):
            raise TypeError(f"Parameterization: fn must be callable, got {type(self.fn).__name__}")
        if not isinstance(self.domain, (Ball, Box)):
            raise TypeError(
                "Parameterization: domain must be a jaxcompress.Ball or jaxcompress.Box, got "
                f"{type(self.domain).__name__}"
            )

    @property
    def dim(self) -> int:
        """``m``, the dimension of the parameter domain."""
        return self.domain.dim

    @property
    def center(self):
        """The expansion point in ``u``: the centre of ``U``."""
        return self.domain.center

    @property
    def radius(self):
        """The radius of ``U`` (it scales the features, which are taken in ``u``)."""
        return self.domain.radius

    @property
    def node_kinds(self) -> tuple[str, ...]:
        """``U``'s node kinds."""
        return self.domain.node_kinds

    @property
    def parameter_map(self):
        """``iota``."""
        return self.fn

    @property
    def base(self) -> Domain:
        """``U``."""
        return self.domain

    def center_as(self, dtype) -> jax.Array:
        """``U``'s centre as ``dtype``."""
        return self.domain.center_as(dtype)

    def valid(self) -> jax.Array:
        """``U``'s validity."""
        return self.domain.valid()

    def half_widths(self, dtype) -> jax.Array:
        """``U``'s half widths."""
        return self.domain.half_widths(dtype)

    def input_dim(self, dtype=None) -> int:
        """``d_in``: the size of ``iota``'s output (by :func:`jax.eval_shape`)."""
        dtype = jnp.zeros(()).dtype if dtype is None else dtype
        try:
            shape = jax.eval_shape(self.fn, jax.ShapeDtypeStruct((self.dim,), dtype)).shape
        except Exception as exc:  # noqa: BLE001 - report the user's function failing
            raise ValueError(f"Parameterization: fn failed on an input of shape ({self.dim},): "
                             f"{exc}") from exc
        if len(shape) != 1:
            raise ValueError(f"Parameterization: fn maps ({self.dim},) to {shape}; expected a "
                             "vector (d_in,)")
        return int(shape[0])

    def nodes(self, n: int, kind: str = "sobol", dtype=None) -> jax.Array:
        """``iota`` of ``U``'s collocation nodes: ``n`` points of ``Omega``, shape ``(n, d_in)``."""
        return jax.vmap(self.fn)(self.domain.nodes(n, kind, dtype))

    def sobol(self, n: int, *, skip: int = 0, dtype=None) -> jax.Array:
        """``iota`` of ``U``'s Sobol points ``skip .. skip + n - 1``."""
        return jax.vmap(self.fn)(self.domain.sobol(n, skip=skip, dtype=dtype))


@functools.partial(jax.tree_util.register_dataclass, data_fields=["x", "held_out"],
                   meta_fields=[])
@dataclasses.dataclass(frozen=True)
class Points(Domain):
    """A finite set of inputs: the domain of a network known only through its data (ours).

    Args:
      x: ``(N, d_in)`` inputs, real and finite (the rows a data method fits on; polishing and
        collocation nodes are drawn from them).
      held_out: ``(M, d_in)`` inputs the error estimate and the measurements use (default:
        ``x``): :func:`jaxcompress.measure.error_points` returns all of them, and
        :func:`jaxcompress.sup_error` on this domain is the exact maximum over them.

    :func:`jaxcompress.data_matching` without a domain compresses on ``Points(fitted rows,
    held_out=held-out rows)``; pass one yourself (``domain=jc.Points(x_train,
    held_out=x_test)``) to measure any method, or the tolerance and smallest-network searches, on
    your own data, in any input dimension. Its centre is the mean of ``x`` and its radius the
    largest distance of a row of ``x`` from it (the expansion point and feature scale of
    derivative features, which remain meaningful only where the data are near-ball-shaped).
    """

    x: jax.Array
    held_out: jax.Array | None = None

    def __post_init__(self):
        for name in ("x", "held_out"):
            v = getattr(self, name)
            if isinstance(v, (list, tuple)) or _is_concrete_array(v):
                v = np.asarray(v) if isinstance(v, (list, tuple)) else v
                if np.ndim(v) != 2 or np.shape(v)[0] < 1 or np.shape(v)[1] < 1:
                    raise ValueError(f"Points: {name} must be an (N, d_in) array with N >= 1, "
                                     f"got shape {np.shape(v)}")
                if not (jnp.issubdtype(v.dtype, jnp.floating)
                        or jnp.issubdtype(v.dtype, jnp.integer)):
                    raise TypeError(f"Points: {name} must be real numbers, got dtype {v.dtype}")
                check_finite(v, "Points", name)
                object.__setattr__(self, name, v)
        if self.held_out is not None and np.shape(self.held_out)[-1] != np.shape(self.x)[-1]:
            raise ValueError(f"Points: held_out has {np.shape(self.held_out)[-1]} columns, x has "
                             f"{np.shape(self.x)[-1]}")

    @property
    def dim(self) -> int:
        return int(np.shape(self.x)[-1])

    @property
    def size(self) -> int:
        """``N``, the number of rows of ``x``."""
        return int(np.shape(self.x)[0])

    @property
    def center(self) -> jax.Array:
        """The mean of the rows of ``x``."""
        return jnp.mean(jnp.asarray(self.x), axis=0)

    @property
    def radius(self) -> jax.Array:
        """The largest distance of a row of ``x`` from :attr:`center`."""
        x = jnp.asarray(self.x)
        return jnp.max(jnp.linalg.norm(x - self.center[None], axis=1))

    def center_as(self, dtype) -> jax.Array:
        """The mean of ``x`` as ``dtype``."""
        return jnp.asarray(self.center, dtype)

    def valid(self) -> jax.Array:
        """Finite rows (traced data can only be checked here)."""
        ok = jnp.all(jnp.isfinite(jnp.asarray(self.x)))
        if self.held_out is not None:
            ok = ok & jnp.all(jnp.isfinite(jnp.asarray(self.held_out)))
        return ok

    def half_widths(self, dtype) -> jax.Array:
        """The largest ``|x_i - center_i|`` per axis."""
        x = jnp.asarray(self.x, dtype)
        return jnp.max(jnp.abs(x - self.center_as(dtype)[None]), axis=0)

    def estimate_points(self, n: int, dtype=None) -> jax.Array:
        """Every held-out row (``n`` is ignored: the data set is the domain)."""
        del n
        v = self.x if self.held_out is None else self.held_out
        return jnp.asarray(v, jnp.zeros(()).dtype if dtype is None else dtype)

    def estimate_description(self) -> str:
        v = self.x if self.held_out is None else self.held_out
        which = "data" if self.held_out is None else "held-out data"
        return f"the {int(np.shape(v)[0])} {which} points"

    def sample(self, key: jax.Array, n: int, dtype=None) -> jax.Array:
        """``n`` rows of ``x`` drawn uniformly with replacement."""
        idx = jax.random.randint(key, (int(n),), 0, self.size)
        return jnp.asarray(self.x, jnp.zeros(()).dtype if dtype is None else dtype)[idx]

    def sobol(self, n: int, *, skip: int = 0, dtype=None) -> jax.Array:
        """Rows ``skip .. skip + n - 1`` of ``x``, cyclically (a data set has no finer design)."""
        idx = (np.arange(int(n)) + int(skip)) % self.size
        return jnp.asarray(self.x, jnp.zeros(()).dtype if dtype is None else dtype)[idx]

    def nodes(self, n: int, kind: str = "sobol", dtype=None) -> jax.Array:
        """The first ``n`` rows of ``x`` (``n <= N``: collocation on data is data matching)."""
        if kind != "sobol":
            raise ValueError(f"Points.nodes: kind must be 'sobol' for a set of points, got "
                             f"{kind!r}")
        if int(n) > self.size:
            raise ValueError(f"Points: {int(n)} collocation nodes asked of a set of {self.size} "
                             "points; use jc.data_matching(x, widths=...) on data, or fewer "
                             "nodes (collocation's oversample=)")
        return self.sobol(n, dtype=dtype)

    def project(self, x: jax.Array) -> jax.Array:
        """The nearest row of ``x`` to each row of the argument."""
        pts = jnp.asarray(self.x, x.dtype)
        d2 = jnp.sum((x[..., None, :] - pts.reshape((1,) * (x.ndim - 1) + pts.shape)) ** 2,
                     axis=-1)
        return pts[jnp.argmin(d2, axis=-1)]


DOMAIN_TYPES = (Ball, Box, Parameterization, Points)


def domain_valid(domain: Domain) -> jax.Array:
    """A (traceable) boolean: whether the domain's numbers describe a domain at all
    (:meth:`Domain.valid`).

    Built eagerly an invalid domain is refused by its constructor; under ``jax.jit`` the numbers
    are traced, so :func:`jaxcompress.error_estimate` (and with it
    ``CompressInfo.error_estimate``) returns NaN on an invalid domain instead of a
    plausible-looking number.
    """
    return domain.valid()


@functools.partial(jax.jit, static_argnums=0)
def _iota(fn, u):
    return jax.vmap(fn)(u)


#: Points of ``U`` (its centre and Sobol points) at which a parameterisation's map is checked.
PARAMETERIZATION_CHECK_POINTS = 64


def _check_parameterization(domain: Parameterization, where: str, dtype) -> None:
    """Refuse a map ``iota`` that is not finite at the centre and Sobol points of ``U``."""
    inner = domain.domain
    leaves = jax.tree.leaves(inner)
    if not all(_is_concrete_array(v) or isinstance(v, (int, float)) for v in leaves):
        return  # traced: a NaN output then shows as a NaN error estimate
    dtype = jnp.zeros(()).dtype if dtype is None else dtype
    u = jnp.concatenate([domain_center(inner, dtype)[None],
                         inner.sobol(PARAMETERIZATION_CHECK_POINTS, dtype=dtype)])
    x = np.asarray(_iota(domain.fn, u))
    bad = ~np.all(np.isfinite(x), axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{where}: the Parameterization's fn is not finite at u = "
                         f"{np.asarray(u[i]).tolist()} (it returns {x[i].tolist()}; "
                         f"{int(bad.sum())} of {len(u)} points of U checked): expected a "
                         "finite analytic map")


def check_domain(domain, d_in: int, where: str, dtype=None, *, check_values: bool = True
                 ) -> None:
    """Refuse anything but a :class:`Ball`, :class:`Box`, :class:`Parameterization` or
    :class:`Points` of inputs of
    size ``d_in`` (the one place that decides what a domain is); with ``check_values``, also a
    parameterisation whose map is not finite on ``U`` (when ``U``'s numbers are concrete)."""
    if not isinstance(domain, Domain):
        raise TypeError(f"{where}: domain must be a jaxcompress.Ball, jaxcompress.Box, "
                        "jaxcompress.Parameterization or jaxcompress.Points, got "
                        f"{type(domain).__name__}")
    size = domain.input_dim(dtype)
    if size != d_in:
        what = "has dim" if domain.parameter_map is None else "maps to inputs of size"
        raise ValueError(f"{where}: the domain {what} {size}; the network takes inputs of size "
                         f"{d_in}")
    if domain.parameter_map is not None and check_values:
        _check_parameterization(domain, where, dtype)
