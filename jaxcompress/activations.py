"""Registry of analytic activations and their univariate Taylor rules.

Every activation that derivative matching can handle is registered here with

* ``fn``: the function itself (used by :func:`jaxcompress.apply` and by the ``jacfwd`` reference
  backend);
* ``series(u0, k)``: the univariate Taylor coefficients

  .. math:: s_j(u_0) = \\sigma^{(j)}(u_0) / j!, \\qquad j = 0, \\dots, k,

  stacked on a new leading axis (shape ``(k + 1, *u0.shape)``). These drive the multivariate
  Taylor pass of :mod:`jaxcompress.taylor`: ``sigma(u0 + h) = sum_j s_j(u0) h^j``;
* ``jet_fn``: an implementation that :mod:`jax.experimental.jet` can propagate (``jet`` ignores
  ``custom_jvp`` and differentiates the primitives, so e.g. :func:`jax.nn.softplus` needs a
  rewrite);
* ``rho_sigma``: the half-width of the strip ``|Im z| < rho_sigma`` on which the activation is
  holomorphic (Eq. 5 of Wang, Wang & Ziyin 2026): pi for the logistic sigmoid, pi/2 for tanh,
  ``inf`` for entire functions;
* ``bound_rule``: the certificate's :class:`BoundRule` (closed-form bounds on complex strips,
  proven in :mod:`jaxcompress.certificates.bounds`, which attaches them with
  :func:`register_bound_rule`), or None.

The closed-form rules use the ODEs the functions satisfy, which give the coefficients by an
exact O(k^2) recursion (no factorial growth, no nested autodiff):

* logistic: ``y' = y - y^2``; tanh: ``y' = 1 - y^2`` (Riccati equations);
* softplus: ``y' = logistic``; SiLU: ``x * logistic(x)``;
* GELU: ``x Phi(x)`` with ``Phi' = phi`` and ``phi' = -x phi``;
* tanh-GELU: ``x (1 + tanh(c (x + 0.044715 x^3))) / 2``, a tanh series composed with a cubic;
* sin: ``sin^(j)(u0)`` cycles through ``sin, cos, -sin, -cos`` (no recursion needed).

A name like ``"relu"`` (not analytic) is refused with an explanation; register new activations
with :func:`register_activation`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import jet as _jet

__all__ = [
    "Activation",
    "BoundRule",
    "get_activation",
    "get_bound_rule",
    "make_activation",
    "register_activation",
    "register_bound_rule",
    "registered_activations",
]

SeriesFn = Callable[[jax.Array, int], jax.Array]
ArrayFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class BoundRule:
    """Certified bounds for one activation (proofs in :mod:`jaxcompress.certificates.bounds`).

    Attributes:
      name: the activation's registry name.
      sup: ``sup(s, A)``: an upper bound on ``|sigma(u)|`` over ``{|Im u| <= s, |Re u| <= A}``
        (arrays, broadcast), ``inf`` where no bound is proven (e.g. ``s >= rho_sigma``). Must be
        nondecreasing in ``s`` and ``A`` (the certificate's bisections rely on it; tested).
      dsup: the same for ``|sigma'(u)|``.
      lipschitz: ``sup_x |sigma'(x)|`` on the real line (an upper bound; ``inf`` if unbounded).
      singular_distance: ``dist(b)``: distance from real ``b`` to the nearest singularity of
        ``sigma`` in the complex plane (``inf`` for entire functions).
      cfn, cdfn: ``sigma`` and ``sigma'`` on complex NumPy arrays (for the sampled diagnostics).
      strip_only: whether ``sup``/``dsup`` are finite exactly when ``s < rho_sigma`` (then the
        first layer's radius of our deviation chain is ``rho_sigma / max ||w_i||`` in closed
        form).
      how: one line saying where the bounds come from.
      interval_distance: optional closed form of ``U -> inf_{|u| <= U} dist(u)`` (Eq. 5);
        default: the grid lower bound of :func:`jaxcompress.certificates.bounds.interval_distance`.
    """

    name: str
    sup: ArrayFn
    dsup: ArrayFn
    lipschitz: float
    singular_distance: Callable[[np.ndarray], np.ndarray]
    cfn: Callable[[np.ndarray], np.ndarray]
    cdfn: Callable[[np.ndarray], np.ndarray]
    strip_only: bool = True
    how: str = ""
    interval_distance: Callable[[float], float] | None = None


@dataclasses.dataclass(frozen=True)
class Activation:
    """An analytic activation, its Taylor rule and the certificate's bound rule (see the module
    docstring)."""

    name: str
    fn: Callable[[jax.Array], jax.Array]
    series: SeriesFn
    jet_fn: Callable[[jax.Array], jax.Array]
    rho_sigma: float = math.inf
    description: str = ""
    bound_rule: BoundRule | None = None

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fn(x)


_REGISTRY: dict[str, Activation] = {}

# Names users reach for that are not analytic: derivative matching needs a convergent Taylor
# series, and these have a kink (or a piecewise definition) at some point of the real line.
_NON_ANALYTIC = {
    "relu": "it has a kink at 0",
    "relu6": "it has kinks at 0 and 6",
    "leaky_relu": "it has a kink at 0",
    "elu": "its second derivative jumps at 0",
    "selu": "its second derivative jumps at 0",
    "celu": "its second derivative jumps at 0",
    "hard_tanh": "it is piecewise linear",
    "hard_sigmoid": "it is piecewise linear",
    "hard_silu": "it is piecewise",
    "hard_swish": "it is piecewise",
    "abs": "it has a kink at 0",
}


def _stack_series(coeffs: list[jax.Array]) -> jax.Array:
    return jnp.stack(coeffs, axis=0)


def _riccati_series(y0: jax.Array, a0: float, a1: float, a2: float, k: int) -> jax.Array:
    """Taylor coefficients of y with ``y' = a0 + a1 y + a2 y^2`` and ``y(0) = y0``.

    Matching the coefficient of t^j on both sides gives
    ``(j + 1) c_{j+1} = a0 [j == 0] + a1 c_j + a2 sum_{i <= j} c_i c_{j-i}``.
    """
    c = [y0]
    for j in range(k):
        conv = sum(c[i] * c[j - i] for i in range(j + 1))
        rhs = a1 * c[j] + a2 * conv
        if j == 0:
            rhs = rhs + a0
        c.append(rhs / (j + 1))
    return _stack_series(c)


def _sigmoid_series(u0: jax.Array, k: int) -> jax.Array:
    return _riccati_series(jax.nn.sigmoid(u0), 0.0, 1.0, -1.0, k)


def _tanh_series(u0: jax.Array, k: int) -> jax.Array:
    return _riccati_series(jnp.tanh(u0), 1.0, 0.0, -1.0, k)


def _times_x(u0: jax.Array, s: jax.Array) -> jax.Array:
    """Series of ``(u0 + t) * f(u0 + t)`` from the series ``s`` of f (same length)."""
    shifted = jnp.concatenate([jnp.zeros_like(s[:1]), s[:-1]], axis=0)
    return u0[None] * s + shifted


def _integrate(c0: jax.Array, s: jax.Array) -> jax.Array:
    """Series of F with ``F' = f``, ``F(u0) = c0``, from the series s of f (one term longer)."""
    j = jnp.arange(1, s.shape[0] + 1, dtype=s.dtype).reshape((-1,) + (1,) * (s.ndim - 1))
    return jnp.concatenate([c0[None], s / j], axis=0)


def _softplus_series(u0: jax.Array, k: int) -> jax.Array:
    return _integrate(jax.nn.softplus(u0), _sigmoid_series(u0, k - 1)) if k > 0 else (
        jax.nn.softplus(u0)[None]
    )


def _silu_series(u0: jax.Array, k: int) -> jax.Array:
    return _times_x(u0, _sigmoid_series(u0, k))


def _normal_pdf_series(u0: jax.Array, k: int) -> jax.Array:
    """Series of phi(u0 + t): phi' = -x phi gives ``(j+1) e_{j+1} = -u0 e_j - e_{j-1}``."""
    e = [jnp.exp(-0.5 * u0 * u0) / math.sqrt(2.0 * math.pi)]
    for j in range(k):
        nxt = -u0 * e[j]
        if j >= 1:
            nxt = nxt - e[j - 1]
        e.append(nxt / (j + 1))
    return _stack_series(e)


def _gelu_series(u0: jax.Array, k: int) -> jax.Array:
    cdf0 = 0.5 * (1.0 + jax.lax.erf(u0 / math.sqrt(2.0)))
    cdf = _integrate(cdf0, _normal_pdf_series(u0, k - 1)) if k > 0 else cdf0[None]
    return _times_x(u0, cdf)


#: The tanh-GELU constants: ``gelu_tanh(x) = x (1 + tanh(GELU_TANH_C (x + GELU_TANH_B x^3))) / 2``.
GELU_TANH_C = math.sqrt(2.0 / math.pi)
GELU_TANH_B = 0.044715


def _compose_univariate(outer: jax.Array, inner: jax.Array) -> jax.Array:
    """Truncated composition ``sum_j outer_j h^j`` with h the series ``inner`` (inner_0 = 0)."""
    k = outer.shape[0] - 1

    def mul(a, b):
        return _stack_series(
            [sum(a[i] * b[n - i] for i in range(n + 1)) for n in range(k + 1)]
        )

    res = jnp.zeros_like(outer).at[0].set(outer[k])
    for j in range(k - 1, -1, -1):
        res = mul(res, inner).at[0].add(outer[j])
    return res


def _gelu_tanh_series(u0: jax.Array, k: int) -> jax.Array:
    # v(u0 + t) = c (x + b x^3) is a cubic in t.
    v0 = GELU_TANH_C * (u0 + GELU_TANH_B * u0**3)
    inner = [jnp.zeros_like(u0), GELU_TANH_C * (1.0 + 3.0 * GELU_TANH_B * u0**2),
             GELU_TANH_C * 3.0 * GELU_TANH_B * u0, jnp.full_like(u0, GELU_TANH_C * GELU_TANH_B)]
    inner = inner + [jnp.zeros_like(u0)] * max(0, k + 1 - len(inner))
    inner = _stack_series(inner[: k + 1])
    th = _compose_univariate(_tanh_series(v0, k), inner)
    half_one_plus = (0.5 * th).at[0].add(0.5)
    return _times_x(u0, half_one_plus)


def _identity_series(u0: jax.Array, k: int) -> jax.Array:
    c = [u0]
    if k >= 1:
        c.append(jnp.ones_like(u0))
    c += [jnp.zeros_like(u0)] * (k - 1)
    return _stack_series(c)


def _jet_series(jet_fn: Callable[[jax.Array], jax.Array]) -> SeriesFn:
    """Generic rule: univariate Taylor coefficients by :func:`jax.experimental.jet.jet`."""

    def series(u0: jax.Array, k: int) -> jax.Array:
        y0 = jet_fn(u0)
        if k == 0:
            return y0[None]
        terms = (jnp.ones_like(u0),) + (jnp.zeros_like(u0),) * (k - 1)
        y, ys = _jet.jet(jet_fn, (u0,), (terms,))
        coeffs = [y] + [ys[j] / _factorial(j + 1) for j in range(k)]
        return _stack_series(coeffs)

    return series


#: Poles of tanh(c (z + b z^3)) are kept for ``|m| < GELU_TANH_POLE_RANGE`` (see below).
GELU_TANH_POLE_RANGE = 200


@functools.cache
def gelu_tanh_poles() -> np.ndarray:
    """The poles of the tanh-GELU nearest the real axis, as a complex array.

    ``tanh(v)`` has poles at ``v = i pi (m + 1/2)``, so the tanh-GELU has poles at the three roots
    ``z`` of ``c (z + b z^3) = i pi (m + 1/2)`` for every integer ``m``; we keep
    ``|m| < GELU_TANH_POLE_RANGE``. The omitted poles (``|m| >= 200``) have ``|z| > 25`` and
    ``|Im z| > 12`` (checked in ``tests/test_certify.py``), so a distance computed from this list
    is exact whenever it is below 12. The certificate's bound rule caps distances at 12 (see
    :data:`GELU_TANH_OMITTED_IM`), which keeps it a lower bound everywhere.
    """
    poles = []
    for m in range(-GELU_TANH_POLE_RANGE, GELU_TANH_POLE_RANGE):
        target = 1j * math.pi * (m + 0.5) / GELU_TANH_C
        poles.extend(np.roots([GELU_TANH_B, 0.0, 1.0, -target]))
    return np.asarray(poles)


#: A lower bound on ``|Im z|`` of every tanh-GELU pole *not* in :func:`gelu_tanh_poles`.
GELU_TANH_OMITTED_IM = 12.0


def _gelu_tanh_rho() -> float:
    """Distance to the real axis of the nearest pole of tanh(c (z + b z^3))."""
    return float(np.min(np.abs(gelu_tanh_poles().imag)))


def _sin_series(u0: jax.Array, k: int) -> jax.Array:
    """``sin^(j)(u0) / j!``: the derivatives cycle through sin, cos, -sin, -cos."""
    s, c = jnp.sin(u0), jnp.cos(u0)
    cycle = (s, c, -s, -c)
    return _stack_series([cycle[j % 4] / _factorial(j) for j in range(k + 1)])


def _factorial(j: int) -> int | float:
    """``j!`` as a divisor of an array: an int while it fits int32 (``j <= 12``, as before), a
    float above (an int would overflow the array's conversion: int32 without ``jax_enable_x64``,
    int64 from ``j = 21``; ``j!`` is exact in float64 up to ``j = 22``), ``inf`` past float64
    (``j > 170``: ``1 / j!`` underflows to 0 anyway)."""
    if j <= 12:
        return math.factorial(j)
    return float(math.factorial(j)) if j <= 170 else math.inf


def register_activation(
    name: str,
    fn: Callable[[jax.Array], jax.Array],
    *,
    series: SeriesFn | None = None,
    jet_fn: Callable[[jax.Array], jax.Array] | None = None,
    rho_sigma: float = math.inf,
    description: str = "",
    overwrite: bool = False,
) -> Activation:
    """Register an analytic activation so every part of the library can use it by name.

    Args:
      name: the name to pass as ``activation=``.
      fn: the elementwise function.
      series: ``series(u0, k) -> (k + 1, *u0.shape)`` array of ``sigma^(j)(u0) / j!``. When
        omitted it is computed with :func:`jax.experimental.jet.jet` on ``jet_fn``.
      jet_fn: an implementation ``jet`` can differentiate (defaults to ``fn``; ``jet`` ignores
        ``custom_jvp`` rules).
      rho_sigma: half-width of the strip around the real axis on which ``fn`` is holomorphic
        (Eq. 5); ``math.inf`` for entire functions. Used by the certificate.
      description: one line shown in error messages and reports.
      overwrite: allow replacing an existing registration.

    Returns:
      The registered :class:`Activation`.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_activation: name must be a non-empty string, got {name!r}")
    if name in _NON_ANALYTIC:
        raise ValueError(
            f"register_activation: {name!r} is reserved for a non-analytic activation "
            f"({_NON_ANALYTIC[name]}); choose another name."
        )
    if name in _REGISTRY and not overwrite:
        raise ValueError(
            f"register_activation: {name!r} is already registered; "
            "pass overwrite=True to replace it."
        )
    act = make_activation(name, fn, series=series, jet_fn=jet_fn, rho_sigma=rho_sigma,
                          description=description)
    _REGISTRY[name] = act
    return act


def make_activation(
    name: str,
    fn: Callable[[jax.Array], jax.Array],
    *,
    series: SeriesFn | None = None,
    jet_fn: Callable[[jax.Array], jax.Array] | None = None,
    rho_sigma: float = math.inf,
    description: str = "",
    jet_checked: bool = False,
) -> Activation:
    """An :class:`Activation` checked as :func:`register_activation` checks one, without
    registering it (a traced network's own activation: compressing never writes the registry).
    ``jet_checked``: the caller already knows that ``jet`` expands the function (the check
    runs a compiled program).
    """
    _check_registration(name, fn, series, jet_fn, rho_sigma)
    jet_fn = fn if jet_fn is None else jet_fn
    if series is None and not jet_checked:
        _try_jet_series(name, jet_fn)
    return Activation(name=name, fn=fn, series=_jet_series(jet_fn) if series is None else series,
                      jet_fn=jet_fn, rho_sigma=float(rho_sigma), description=description)


def _check_registration(name, fn, series, jet_fn, rho_sigma) -> None:
    """register_activation's argument checks: callables, a known non-analytic function, the
    strip half-width."""
    for arg, value in (("fn", fn), ("series", series), ("jet_fn", jet_fn)):
        if (value is not None or arg == "fn") and not callable(value):
            raise TypeError(f"register_activation: {arg} must be a function, got "
                            f"{type(value).__name__} {value!r:.40}")
    fname = getattr(fn, "__name__", "")
    if fname in _NON_ANALYTIC:
        raise ValueError(f"register_activation: {name!r}: fn {fname!r} is not analytic "
                         f"({_NON_ANALYTIC[fname]}); derivative matching needs an activation "
                         "with a convergent Taylor series at every real point (e.g. "
                         "jax.nn.softplus or jax.nn.gelu as smooth substitutes)")
    try:
        ok = float(rho_sigma) > 0  # NaN fails too
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"register_activation: rho_sigma must be a number > 0 (math.inf for an "
                         f"entire function), got {rho_sigma!r}")


def _try_jet_series(name: str, jet_fn) -> None:
    """Refuse, at registration, a function whose Taylor series ``jet`` cannot compute."""
    u0 = np.asarray([-1.5, -0.25, 0.5, 2.0], jax.dtypes.canonicalize_dtype(np.float64))
    try:   # one compiled program (op by op, jet compiled a program per operation: ~16)
        coeffs = np.asarray(jax.jit(lambda u: _jet_series(jet_fn)(u, 2))(u0))
    except Exception as e:  # noqa: BLE001 - report the user's function failing
        raise ValueError(f"register_activation: {name!r}: jax.experimental.jet cannot expand "
                         f"the function ({type(e).__name__}: {str(e).splitlines()[0]:.200}); "
                         "expected an analytic elementwise function built from jax.numpy "
                         "operations, or pass series=") from None
    if coeffs.shape != (3, 4) or not np.all(np.isfinite(coeffs)):
        raise ValueError(f"register_activation: {name!r}: the Taylor coefficients of the "
                         f"function at {u0.tolist()} are {coeffs.tolist()}; expected finite "
                         "values of shape (3, 4) (an elementwise analytic function)")


def registered_activations() -> tuple[str, ...]:
    """Names of the registered activations."""
    return tuple(_REGISTRY)


def get_activation(activation: str | Activation | Callable) -> Activation:
    """Resolve a name (or a registered function, or an :class:`Activation`) to its registry entry.

    Raises:
      ValueError: for non-analytic activations such as ReLU, and for unknown names, with the list
        of registered names and how to register a new one.
    """
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        if activation in _REGISTRY:
            return _REGISTRY[activation]
        key = activation.lower()
        key = _NAME_ALIASES.get(key, key)
        if key in _REGISTRY:
            return _REGISTRY[key]
        if key in _NON_ANALYTIC:
            raise ValueError(
                f"activation {activation!r} is not analytic ({_NON_ANALYTIC[key]}): derivative "
                "matching needs an activation with a convergent Taylor series around every real "
                f"point. Use one of {', '.join(_REGISTRY)} (e.g. 'softplus' or 'gelu' as smooth "
                "ReLU substitutes), or register an analytic one with "
                "jaxcompress.register_activation(name, fn, series=...)."
            )
        raise ValueError(
            f"unknown activation {activation!r}; registered: {', '.join(_REGISTRY)}. "
            "Register a new analytic activation with "
            "jaxcompress.register_activation(name, fn, series=..., rho_sigma=...)."
        )
    if callable(activation):
        for fn, name in _FN_ALIASES:
            if activation is fn:
                return _REGISTRY[name]
        for act in _REGISTRY.values():
            if act.fn is activation or act.jet_fn is activation:
                return act
        fname = getattr(activation, "__name__", repr(activation))
        if fname in _NON_ANALYTIC:
            return get_activation(fname)  # raises the non-analytic error
        raise ValueError(
            f"activation function {fname!r} is not registered. Pass a registered name "
            f"({', '.join(_REGISTRY)}) or register it with "
            "jaxcompress.register_activation(name, fn, series=...)."
        )
    raise TypeError(f"activation must be a name or a function, got {type(activation).__name__}")


def register_bound_rule(rule: BoundRule, *, overwrite: bool = False) -> BoundRule:
    """Attach the certificate's bound rule to the registered activation ``rule.name``."""
    if not isinstance(rule, BoundRule):
        raise TypeError(f"register_bound_rule: rule must be a BoundRule, got "
                        f"{type(rule).__name__}")
    act = get_activation(rule.name)
    if act.bound_rule is not None and not overwrite:
        raise ValueError(f"register_bound_rule: {act.name!r} already has a rule; pass "
                         "overwrite=True to replace it")
    _REGISTRY[act.name] = dataclasses.replace(act, bound_rule=rule)
    return rule


def get_bound_rule(activation: str | Activation | Callable) -> BoundRule:
    """The :class:`BoundRule` of a registered activation, or a clear error."""
    act = get_activation(activation)
    if act.bound_rule is None:
        ruled = [name for name, a in _REGISTRY.items() if a.bound_rule is not None]
        raise ValueError(
            f"certify: no certified bound rule for activation {act.name!r} (rules exist for "
            f"{', '.join(ruled)}). Derive sup|sigma| and sup|sigma'| on strips and "
            "register them with jaxcompress.certificates.register_bound_rule("
            "jaxcompress.certificates.BoundRule(...))."
        )
    return act.bound_rule


def has_bound_rule(activation: str | Activation | Callable) -> bool:
    """Whether the registered activation has a certificate bound rule."""
    return get_activation(activation).bound_rule is not None


def _gelu_exact(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


def _softplus_jet(x: jax.Array) -> jax.Array:
    # jax.nn.softplus uses logaddexp with a custom_jvp that jet cannot trace; -log(logistic(-x))
    # is the same analytic function built from primitives jet has rules for.
    return -jnp.log(jax.nn.sigmoid(-x))


def _silu_jet(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(x)


def _identity(x: jax.Array) -> jax.Array:
    return x


# Other spellings of registered activations. jax.nn.gelu defaults to approximate=True, i.e. the
# tanh form.
_NAME_ALIASES = {"logistic": "sigmoid", "swish": "silu", "gelu_exact": "gelu",
                 "gelu_approximate": "gelu_tanh", "linear": "identity"}
_FN_ALIASES = ((jax.nn.gelu, "gelu_tanh"), (jax.nn.swish, "silu"), (jnp.tanh, "tanh"))

register_activation("sigmoid", jax.nn.sigmoid, series=_sigmoid_series, rho_sigma=math.pi,
                    description="logistic 1/(1+exp(-x)); poles at i*pi*(2m+1)")
register_activation("tanh", jnp.tanh, series=_tanh_series, rho_sigma=math.pi / 2,
                    description="tanh; poles at i*pi*(m+1/2)")
register_activation("gelu", _gelu_exact, series=_gelu_series, rho_sigma=math.inf,
                    description="exact GELU x*Phi(x) (erf); entire")
register_activation("gelu_tanh", _gelu_tanh, series=_gelu_tanh_series, rho_sigma=_gelu_tanh_rho(),
                    description="tanh-approximated GELU; poles of tanh(c(x+0.044715x^3))")
register_activation("softplus", jax.nn.softplus, series=_softplus_series, jet_fn=_softplus_jet,
                    rho_sigma=math.pi, description="log(1+exp(x)); branch points at i*pi*(2m+1)")
register_activation("silu", jax.nn.silu, series=_silu_series, jet_fn=_silu_jet,
                    rho_sigma=math.pi, description="x*sigmoid(x) (swish); poles at i*pi*(2m+1)")
register_activation("sin", jnp.sin, series=_sin_series, rho_sigma=math.inf,
                    description="sin (SIREN-style coordinate networks); entire")
register_activation("identity", _identity, series=_identity_series, rho_sigma=math.inf,
                    description="identity (tests: the network is a polynomial)")
