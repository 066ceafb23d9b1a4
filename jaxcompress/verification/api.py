r"""``verify``: a proven bracket on the largest difference of two programs over a domain."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import jax
import numpy as np

from jaxcompress.compiling import compile_clock
from jaxcompress.networks import network_like
from jaxcompress.protocol import NetworkLike
from jaxcompress.verification import program as prog
from jaxcompress.verification import search as bnb
from jaxcompress.verification.regions import Region
from jaxcompress.verification.result import Verification

__all__ = ["DEFAULT_ORDER", "verify"]

#: The default degree ``K`` of the Taylor models by input dimension (higher orders shrink the
#: remainders faster, ``O(h^(K+1))``, and cost ``C(d + K, d)`` coefficients per value and
#: longer compilations; measured with ``benchmarks/verify.py``'s rows, docs/verify.md).
DEFAULT_ORDER = {1: 6, 2: 4, 3: 5, 4: 3}
#: The default degree with remainder symbols: a box then costs mostly the symbols' rows, so the
#: coefficients of a higher degree come cheap and the larger boxes they bound well mean fewer
#: boxes (measured for ``d = 2, 3, 5`` on the depth rows of ``benchmarks/verify.py``; 1 and 4
#: in between; 3 beyond 5).
SYMBOLIC_ORDER = {1: 8, 2: 6, 3: 7, 4: 5, 5: 4}
_MAX_ORDER = 9  # the derivative tables of the smooth functions go to order 10


def _positive(value, name: str, *, allow_inf: bool = False, allow_zero: bool = False) -> float:
    ok = not isinstance(value, (bool, str, bytes))
    try:
        v = float(value) if ok and np.ndim(value) == 0 else math.nan
    except (TypeError, ValueError):
        v = math.nan
    good = (v >= 0 if allow_zero else v > 0) and (math.isfinite(v) or (allow_inf and v > 0))
    if not good:
        what = "a non-negative" if allow_zero else "a positive"
        what += " number" + ("" if allow_inf else " (finite)")
        raise ValueError(f"verify: {name} must be {what}, got {value!r}")
    return v


def _check_domain(domain) -> Region:
    region = Region.of(domain)
    for name, arr in (("lo", region.lo), ("hi", region.hi)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"verify: the domain's {name} must be finite, got {arr.tolist()}")
    if not (region.radius > 0 and math.isfinite(region.radius)):
        raise ValueError(f"verify: the domain must have a positive finite size, got radius "
                         f"{region.radius}")
    return region


def _check_devices(devices):
    """``devices`` as given (a Mesh, or a list of devices), or every device of the default
    backend."""
    if devices is None:
        return jax.devices()
    if isinstance(devices, jax.sharding.Mesh):
        return devices
    try:
        devs = list(devices)
    except TypeError:
        devs = None
    if not devs or not all(isinstance(d, jax.Device) for d in devs):
        raise TypeError("verify: devices must be a non-empty sequence of jax devices or a "
                        f"jax.sharding.Mesh, got {devices!r}")
    return devs


def _as_function(obj, activation, name: str) -> Callable:
    """A network of any kind (the protocol's :meth:`function`; a params list with
    ``activation=``) or a plain callable ``f(x)``, as ``f(x)``."""
    if not isinstance(obj, NetworkLike) and callable(obj):
        return obj
    if not isinstance(obj, (NetworkLike, list, tuple)):
        raise TypeError(f"verify: {name} must be a network (a params list with activation=, a "
                        "jc.trace / jc.trace_module network, a compressed result, a loaded "
                        "file) or a callable f(x) mapping a batch of inputs (n, d) to outputs "
                        f"(n, k), got {type(obj).__name__}")
    if not isinstance(obj, NetworkLike) and activation is None:
        raise TypeError(f"verify: activation= is required for a params list ({name}); the other "
                        "kinds of network carry their own")
    net = network_like(obj, activation=None if isinstance(obj, NetworkLike) else activation,
                       where=f"verify: {name}", check_finite=False)
    fn, params = net.function()
    _check_finite_params(params, name)
    return functools.partial(fn, params)


def _check_finite_params(params, name: str) -> None:
    """Raise naming the first parameter leaf of network ``name`` with a NaN or an infinity."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        if isinstance(leaf, jax.core.Tracer):
            continue
        arr = np.asarray(leaf)
        if np.issubdtype(arr.dtype, np.inexact) and not np.all(np.isfinite(arr)):
            bad = np.argwhere(~np.isfinite(arr))
            where = f" at index {tuple(int(i) for i in bad[0])}" if arr.ndim else ""
            raise ValueError(f"verify: network {name} has a non-finite parameter: leaf "
                             f"{jax.tree_util.keystr(path) or '(the root)'} of shape "
                             f"{arr.shape} holds {arr[tuple(bad[0])]}{where} ({len(bad)} "
                             "non-finite entries)")


def verify(a, b, *, domain, activation=None, eps: float | None = None, tol: float = 0.01,
           max_seconds: float = 60.0, progress: bool = False, order: int | None = None,
           batch_size: int | None = None, atol: float = 0.0, devices=None,
           remainders: str | None = None) -> Verification:
    r"""Bound ``sup_{x in domain} max_j |F_a(x)_j - F_b(x)_j|`` from both sides, with proof.

    .. math::
       \texttt{lower} \;\le\; \sup_{x \in \Omega}\ \max_j\ |F_a(x)_j - F_b(x)_j|
       \;\le\; \texttt{upper}

    ``lower`` is attained at a point of the domain (``argmax``); ``upper`` holds everywhere on
    it. The two programs are interpreted a second time, on **Taylor models** over input boxes
    (:mod:`jaxcompress.verification.taylor`: a degree-``K`` polynomial in the box coordinates plus a
    remainder interval, pushed through the jaxpr by one rule per primitive,
    :mod:`jaxcompress.verification.rules`), and their **difference** is bounded as a difference:
    both programs' polynomials depend on the same input, so their common part cancels
    coefficient by coefficient and only the remainders add up. On a box of half-width ``h`` the
    excess of the bound over the true range of the difference is

    .. math::
       O\big(h^2\, \|\nabla^2 D\|\big) + O\big(h^{K+1} (C_a + C_b)\big),

    where ``D = F_a - F_b`` is small (so its Hessian is) and ``C_a``, ``C_b`` are the programs'
    own order-``K+1`` Taylor constants: a high order makes the second term vanish quickly. The
    bounds are sharpened by a batched **branch and bound** over input boxes
    (:mod:`jaxcompress.verification.search`): best-first bisection of the boxes with the largest
    bounds, pruning of those that can no longer matter, and a lower bound from the boxes'
    centres and projected gradient ascent on ``|D|``. It stops when the bracket is within
    ``tol`` (``upper - lower <= tol * upper``), when ``upper <= eps`` (``"certified"``), when
    ``lower > eps`` (``"refuted"``) or after ``max_seconds`` (``"timeout"``), and always
    returns the bracket reached.

    Non-smooth pieces (``max``, ``abs``: ReLU) get linear relaxations (the chord of the kink, as
    DeepZ / CROWN), so ReLU programs converge too, at first order near their kinks; a smooth
    function hidden behind such pieces (``jnp.logaddexp``, hence ``jax.nn.softplus``) is
    recognised by its jaxpr and bounded as the smooth function it is.

    **Domains.** A :class:`jaxcompress.Box`, or a :class:`jaxcompress.Ball` covered by the
    boxes that meet it, each shrunk to the bounding box of its intersection with the ball
    (:mod:`jaxcompress.verification.regions`); the points of the lower bound lie in the ball.

    **Rigour.** Everything runs in float64 (under ``jax.enable_x64``; your configuration is left
    as it was), and every rounding error of the Taylor-model arithmetic is bounded into the
    remainders (Higham's ``gamma_n``), as is the error of the platform's elementary functions
    (assumed at most 32 ulp, 1,024 for ``log1p`` and 2,048 for ``erfc``: eight times what was
    measured on CPU, :data:`jaxcompress.verification.smooth.FUNCTION_ULPS`). The lower bound is
    the enclosure of ``|D(argmax)|`` with its rounding, so both ends are proven up to that
    assumption. What is bounded is the program in real arithmetic: a cast to float32 inside it
    is taken as exact, and values that do not depend on ``x`` are computed as JAX computes
    them.

    Prior art: differential verification of two networks (ReluDiff, NeuroDiff, VeryDiff:
    ReLU networks of the same structure, propagating the difference layer by layer); bound
    propagation with input branch and bound (alpha-beta-CROWN); Taylor enclosures interpreted
    on jaxprs (Google's autobound) and interval jaxpr interpreters (immrax); Taylor models
    (Berz and Makino). Ours: Taylor models of the difference of two arbitrary jaxprs sharing
    one input model, the rule registry, the batched best-first search with the pruning level
    ``max(lower / (1 - tol), eps)`` and the ball clipping.

    >>> f = lambda x: jnp.tanh(x @ jnp.ones((2, 1)))
    >>> g = lambda x: jnp.tanh(x @ jnp.ones((2, 1))) + 1e-3
    >>> res = jc.verify(f, g, domain=jc.Box(jnp.array([-1.0, -1.0]), jnp.array([1.0, 1.0])),
    ...              order=2)
    >>> res.status, bool(abs(res.lower - 1e-3) < 1e-12 and res.upper <= 1.01e-3)
    ('converged', True)

    Args:
      a, b: the two networks, of any kind the library reads (params lists with
        ``activation=``, :func:`jaxcompress.trace` / :func:`jaxcompress.trace_module` networks,
        compressed results, loaded files holding a chain of dense layers), or callables
        ``f(x)`` mapping a batch ``x`` of shape ``(n, d)`` to ``(n, k)`` (or ``(n,)``),
        traceable by :func:`jax.make_jaxpr` (built of primitives that have bound rules: see
        :mod:`jaxcompress.verification.rules`; :func:`register_rule
        <jaxcompress.verification.register_rule>` adds more).
      activation: the activation of the params lists among ``a`` and ``b``.
      domain: a :class:`jaxcompress.Box` or :class:`jaxcompress.Ball` of dimension ``d``.
      eps: a tolerance to decide (``upper <= eps`` or ``lower > eps``); None for the bracket
        alone.
      tol: the relative width at which the bracket counts as converged, in ``(0, 1)``.
      max_seconds: the wall-clock budget of the whole call, tracing and compilation
        included (``compile_seconds`` of the result says how much of it they took; one batch
        of boxes is bounded whatever the budget).
      progress: print the bracket about once a second.
      order: the degree ``K`` of the Taylor models (default by ``d``: :data:`DEFAULT_ORDER`,
        2 beyond, or with remainder symbols :data:`SYMBOLIC_ORDER`, 3 beyond).
      batch_size: boxes bounded per compiled call (default: about ``2e7`` float operations per
        call, a power of two in ``[32, 256]``).
      atol: also stop when ``upper <= atol`` (for programs that may agree exactly).
      remainders: how the remainders of nonlinear functions travel through later layers:
        ``"radius"`` (a radius per value, widened by ``|W|`` at each layer), ``"symbolic"``
        (one symbol per neuron and layer, mapped exactly by every later linear operation, so
        remainders cancel through depth as the values do, at the cost of a matmul per symbol
        row), or None (the default): symbolic for programs of at least
        :data:`~jaxcompress.verification.program.SYMBOLIC_DEPTH` nonlinear layers (4 in one
        or two inputs, 3 from three) and at most
        :data:`~jaxcompress.verification.program.SYMBOLIC_MAX` nonlinear results.
      devices: the devices each batch of boxes is split over (a sequence of devices or a
        :class:`jax.sharding.Mesh`); default: every device of the default backend
        (``jax.devices()``). The boxes are independent, so the bracket is the same on one
        device or many (the batch is rounded up to a multiple of their number).

    Returns:
      A :class:`~jaxcompress.verification.Verification`.

    Raises:
      TypeError: ``a`` / ``b`` not callable, a domain that is neither a Box nor a Ball,
        ``devices`` that are not devices or a Mesh.
      ValueError: a non-positive ``eps`` / ``tol`` / ``max_seconds``, a function that fails on
        ``(1, d)`` inputs (the domain's dimension) or returns another shape than the other,
        a NaN or infinite parameter (the leaf named) or constant (its line named), a
        difference that is NaN or infinite at a point of the domain (the point named).
      UnsupportedPrimitiveError: a primitive without a bound rule, or one carrying a
        sub-program that is not a call, a loop with a static trip count or a ``cond`` (a
        ``while_loop``), named with its source line.
    """
    start = time.perf_counter()
    a = _as_function(a, activation, "a")
    b = _as_function(b, activation, "b")
    for name, fn in (("a", a), ("b", b)):
        if not callable(fn):
            raise TypeError(f"verify: {name} must be a callable f(x) mapping a batch of inputs "
                            f"(n, d) to outputs (n, k), got {type(fn).__name__}")
    region = _check_domain(domain)
    if eps is not None:
        eps = _positive(eps, "eps")
    tol = _positive(tol, "tol")
    if tol >= 1:
        raise ValueError(f"verify: tol must be in (0, 1) (a relative width), got {tol!r}")
    max_seconds = _positive(max_seconds, "max_seconds", allow_inf=True)
    atol = _positive(atol, "atol", allow_zero=True)
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"verify: progress must be a bool, got {progress!r}")
    if order is not None and (isinstance(order, bool) or not isinstance(order, (int, np.integer))
                              or not 0 <= order <= _MAX_ORDER):
        raise ValueError(f"verify: order must be an int in [0, {_MAX_ORDER}] (the degree of the "
                         f"Taylor models), got {order!r}")
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, (int, np.integer))
                                   or batch_size < 2):
        raise ValueError(f"verify: batch_size must be an int >= 2, got {batch_size!r}")
    if remainders not in (None, "symbolic", "radius"):
        raise ValueError("verify: remainders must be 'radius', 'symbolic' or None (by depth), "
                         f"got {remainders!r}")
    mesh = bnb.box_mesh(_check_devices(devices))
    n_devices = 1 if mesh is None else mesh.devices.size
    with jax.enable_x64(True), compile_clock() as clock:
        # a float64 buffer on the device (jnp.zeros would compile a program for it)
        if jax.device_put(np.zeros((), np.float64)).dtype != np.float64:
            raise RuntimeError("verify: float64 is unavailable on this backend; the bounds need "
                               "it (run on CPU: JAX_PLATFORMS=cpu)")
        program = prog.trace(a, b, region.dim)
        symbolic = (prog.symbolic_by_default(program) if remainders is None
                    else remainders == "symbolic")
        k = (int(order) if order is not None else SYMBOLIC_ORDER.get(region.dim, 3) if symbolic
             else DEFAULT_ORDER.get(region.dim, 2))
        batch = (int(batch_size) if batch_size is not None
                 else bnb.default_batch(program, k, symbolic=symbolic))
        batch = -(-batch // n_devices) * n_devices
        fns = bnb.compiled(program, region, k, batch, symbolic=symbolic)
        out = bnb.search(program, region, fns, eps=eps, tol=tol, atol=atol,
                         max_seconds=max_seconds, progress=bool(progress), start=start,
                         mesh=mesh)
    return Verification(lower=float(out.lower), upper=float(out.upper), status=out.status,
                        argmax=np.asarray(out.argmax, np.float64), eps=eps, tol=tol,
                        domain=domain, boxes=int(out.boxes),
                        seconds=float(time.perf_counter() - start),
                        history=tuple(tuple(float(v) for v in h) for h in out.history),
                        order=k, compile_seconds=float(clock.seconds), proof=out.proof)
