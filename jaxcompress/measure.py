"""Errors between networks, measured: every measurement of the library is here.

* :func:`sup_error`: the paper's protocol for any two networks: evaluate
  ``e(x) = max_o |F_a(x)_o - F_b(x)_o|`` on a uniform sample of the domain, then run projected
  gradient ascent on ``e`` from the worst samples (normalised steps of decaying length,
  projected back onto the domain after each step) (:func:`search_sup`). The largest ``e`` seen
  is a lower bound on the true sup norm that is tight in practice; :func:`jaxcompress.verify`
  proves an upper bound, and the certificates (Theorems 5-6) give one for analytic chains.
* :func:`psnr` (ours): the peak signal-to-noise ratio of one network against another (the
  teacher as the reference image) on fixed Sobol points of the domain, in dB, what
  ``metric="psnr"`` of the searches measures; :func:`psnr_drop` the dB a network loses
  against the teacher on the user's own data (a task metric for the searches).
* :func:`error_estimate`: the cheap, deterministic, jit-able companion (ours, not the paper's):
  the largest ``e`` over :data:`ERROR_POINTS` fixed Sobol points of the domain
  (:func:`error_points`); :func:`plan_estimate` is the same on one network at two sets of
  leaves, what every compression records (``CompressInfo.error_estimate``), and
  :func:`network_sup_error` the sup error of such a pair (the searches' measurement: one
  compilation for every candidate at the teacher's shapes).

Any two networks can be compared: params lists (``activation=`` shared by the lists among
them), traced networks and modules, compressed results, loaded files, or plain callables
``f(x)`` of a batch. Two params lists take the closed-form chain (sharded when their leaves
are); any other pair is compared as functions ``f(x)`` (the network protocol's
:meth:`~jaxcompress.protocol.NetworkLike.function`: each network contributes its own program
and parameters, so nothing is lowered or re-traced; one compilation per pair of programs and
shapes). A plain callable is compiled at every call: pass the network itself to reuse the
compilation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcompress._checks import check_key, check_positive_int, describe, is_concrete
from jaxcompress.activations import get_activation
from jaxcompress.compiling import FastOnSmallCPU
from jaxcompress.domains import (
    ERROR_POINTS,
    ERROR_SKIP,
    Domain,
    Points,
    check_domain,
    domain_valid,
)
from jaxcompress.graph.plan import Plan
from jaxcompress.mlp import Params, apply, validate_params
from jaxcompress.networks import network_like
from jaxcompress.placement import Placement
from jaxcompress.protocol import NetworkLike

__all__ = ["ERROR_POINTS", "ERROR_SKIP", "PSNR_POINTS", "error_estimate", "error_points",
           "network_sup_error", "plan_estimate", "psnr", "psnr_db", "psnr_drop", "search_sup",
           "sup_error"]


#: Points per chunk of :func:`error_estimate` in a sharded compression.
SHARDED_CHUNK = 16


def error_points(domain, n: int = ERROR_POINTS, dtype=None) -> jax.Array:
    """The fixed points of :func:`error_estimate`: ``n`` Sobol points of ``domain``.

    Points ``ERROR_SKIP, ERROR_SKIP + 1, ...`` of the Sobol sequence of the domain's bounding
    cube that fall in the domain (a :class:`~jaxcompress.Ball`: rejection; a
    :class:`~jaxcompress.Box`: all of them); for a :class:`~jaxcompress.Parameterization`
    ``(iota, U)`` the images ``iota(u)`` of those points of ``U``; for
    :class:`~jaxcompress.Points`, every held-out row (``n`` ignored). Deterministic; the domain's
    numbers may be traced.
    """
    return domain.estimate_points(int(n), dtype=dtype)


def _lists_error_estimate(
    params_a: Params,
    params_b: Params,
    *,
    activation,
    domain,
    n_points: int = ERROR_POINTS,
    placement: Placement | None = None,
) -> jax.Array:
    """``max_p max_o |F_a(x_p)_o - F_b(x_p)_o|`` over the fixed points of :func:`error_points`.

    A lower bound on the sup error over the domain, cheaper and deterministic where
    :func:`sup_error` samples and searches. Pure and jit-able; evaluated in the dtype of
    ``params_a``. Used inside :func:`jaxcompress.compress` for ``CompressInfo.error_estimate``,
    per teacher under ``jax.vmap``.

    The shapes are checked (the two networks' input and output sizes against each other and the
    domain, ``n_points >= 1``): a ``ValueError`` names them. The result is **NaN** when the
    domain's numbers do not describe a domain (a radius that is not finite and positive, a
    non-finite centre or corner, ``lo >= hi``: :func:`jaxcompress.domains.domain_valid`), which
    can only happen when they are traced (built eagerly, such a domain is refused), and when
    either network is NaN somewhere on the points.
    """
    act = get_activation(activation)
    n_points = check_positive_int(n_points, "error_estimate", "n_points")
    _check_pair(params_a, params_b, domain, "error_estimate")
    dtype = jnp.result_type(params_a[0]["kernel"])
    x = error_points(domain, n_points, dtype)

    def worst(xs):
        return jnp.max(jnp.abs(apply(params_a, xs, activation=act, placement=placement)
                               - apply(params_b, xs, activation=act, placement=placement)))

    if placement is not None and n_points % SHARDED_CHUNK == 0:
        # with neurons split over devices each contraction's partial sums are full width per
        # device: evaluate in chunks of points to keep that buffer small
        est = jnp.max(jax.lax.map(worst, x.reshape(-1, SHARDED_CHUNK, x.shape[-1])))
        return jnp.where(domain_valid(domain), est, jnp.nan)
    return _worst_gap(apply(params_a, x, activation=act, placement=placement),
                      apply(params_b, x, activation=act, placement=placement),
                      domain_valid(domain))


def _worst_gap(ya, yb, valid) -> jax.Array:
    """``max |ya - yb|`` where ``valid``, else NaN. On the host when all three are concrete (the
    same number: subtraction, ``abs`` and ``max`` are exact; op by op they compiled a program
    each), traced otherwise."""
    if is_concrete(ya) and is_concrete(yb) and is_concrete(valid):
        gap = np.max(np.abs(np.asarray(ya) - np.asarray(yb)))
        return jax.device_put(np.where(np.asarray(valid), gap, np.nan).astype(gap.dtype))
    return jnp.where(valid, jnp.max(jnp.abs(ya - yb)), jnp.nan)


def _check_pair(params_a, params_b, domain, where: str) -> None:
    """The two networks take the domain's inputs and have the same output size (shapes only:
    traced params pass)."""
    params_a = validate_params(params_a, where=f"{where}: params_a", check_finite=False)
    params_b = validate_params(params_b, where=f"{where}: params_b", check_finite=False)
    d_a, d_b = params_a[0]["kernel"].shape[-2], params_b[0]["kernel"].shape[-2]
    o_a, o_b = params_a[-1]["kernel"].shape[-1], params_b[-1]["kernel"].shape[-1]
    if d_a != d_b:
        raise ValueError(f"{where}: params_a takes inputs of size {d_a}, params_b of size {d_b}; "
                         "expected the same")
    if o_a != o_b:
        raise ValueError(f"{where}: the networks have different output sizes ({o_a} vs {o_b}); "
                         "expected the same")
    check_domain(domain, d_a, where, jnp.result_type(params_a[0]["kernel"]), check_values=False)


def _error_fn(params_a, params_b, act):
    def err(x):
        diff = apply(params_a, x, activation=act) - apply(params_b, x, activation=act)
        return jnp.max(jnp.abs(diff), axis=-1)

    return err


def search_sup(err, domain, key, dtype, *, n_samples, local_search_steps, n_starts,
               return_point):
    """The paper's protocol on ``err(x) -> (n,)``: the largest error over ``n_samples`` uniform
    samples, then projected gradient ascent from the ``n_starts`` worst (traceable). On a
    :class:`~jaxcompress.Points` domain, the exact maximum over its held-out rows (a finite set
    has nothing between its points to search)."""
    if isinstance(domain, Points):
        x = domain.estimate_points(0, dtype)
        e = err(x)
        i = jnp.argmax(e)
        return (e[i], x[i]) if return_point else e[i]
    x = domain.sample(key, n_samples, dtype)
    e = err(x)
    best_i = jnp.argmax(e)
    best_e, best_x = e[best_i], x[best_i]
    if local_search_steps > 0 and n_starts > 0:
        _, start_idx = jax.lax.top_k(e, min(n_starts, n_samples))
        starts = x[start_idx]
        grad = jax.vmap(jax.value_and_grad(lambda p: err(p[None])[0]))
        step0 = 0.1 * jnp.asarray(domain.radius, dtype)

        def body(t, carry):
            pts, be, bx = carry
            val, g = grad(pts)
            i = jnp.argmax(val)
            bx = jnp.where(val[i] > be, pts[i], bx)
            be = jnp.maximum(be, val[i])
            # floor at the dtype's smallest normal number: a literal like 1e-300 underflows to 0
            # in float32 and a zero gradient (e.g. at the rounding floor) would give 0 / 0 = NaN
            gnorm = jnp.linalg.norm(g, axis=1, keepdims=True)
            gn = g / jnp.maximum(gnorm, jnp.finfo(dtype).tiny)
            eta = step0 * (1.0 - t / local_search_steps)
            return domain.project(pts + eta * gn), be, bx

        pts, best_e, best_x = jax.lax.fori_loop(0, local_search_steps, body,
                                                (starts, best_e, best_x))
        final = err(pts)
        i = jnp.argmax(final)
        best_x = jnp.where(final[i] > best_e, pts[i], best_x)
        best_e = jnp.maximum(best_e, final[i])
    if return_point:
        return best_e, best_x
    return best_e


@functools.partial(
    FastOnSmallCPU, limit="FAST_MAX_PARAMS_MEASURE",
    static_argnames=("act", "n_samples", "local_search_steps", "n_starts", "return_point"),
)
def _sup_error(params_a, params_b, domain, key, *, act, n_samples, local_search_steps,
               n_starts, return_point):
    dtype = jnp.result_type(params_a[0]["kernel"])
    return search_sup(_error_fn(params_a, params_b, act), domain, key, dtype,
                      n_samples=n_samples, local_search_steps=local_search_steps,
                      n_starts=n_starts, return_point=return_point)


def _pad_chain(params: Params, widths: Sequence[int]) -> Params:
    """The chain ``params`` with hidden layer ``l`` ``widths[l]`` wide: its neurons first, then
    zero neurons (zero kernel columns and bias, zero rows of the next kernel), which add exactly
    nothing: the same function at other shapes."""
    concrete = all(is_concrete(v) for v in jax.tree_util.tree_leaves(params))
    pad = np.pad if concrete else jnp.pad      # on the host: no program per shape to compile
    out = []
    for i, layer in enumerate(params):
        k = layer["kernel"]
        rows = (widths[i - 1] - k.shape[0]) if i > 0 else 0
        cols = (widths[i] - k.shape[1]) if i < len(params) - 1 else 0
        new = {"kernel": pad(k, ((0, rows), (0, cols)))}
        if "bias" in layer:
            new["bias"] = pad(layer["bias"], (0, cols))
        out.append(new)
    return out


def _same_widths(params_a: Params, params_b: Params) -> tuple[Params, Params]:
    """Two chains of one depth, the narrower padded with zero neurons to the wider's widths
    (:func:`_pad_chain`), so that every compression of one teacher is measured by one compiled
    program (ours: a width is a shape, and a search tries many); else as they are."""
    def sizes(p):
        return [layer["kernel"].shape for layer in p]

    sa, sb = sizes(params_a), sizes(params_b)
    if (len(sa) != len(sb) or any(len(s) != 2 for s in sa + sb)
            or [set(layer) for layer in params_a] != [set(layer) for layer in params_b]):
        return params_a, params_b
    wa, wb = [s[1] for s in sa[:-1]], [s[1] for s in sb[:-1]]
    if all(x <= y for x, y in zip(wb, wa, strict=True)) and wa != wb:
        return params_a, _pad_chain(params_b, wa)
    if all(y <= x for x, y in zip(wb, wa, strict=True)) and wa != wb:
        return _pad_chain(params_a, wb), params_b
    return params_a, params_b


def _lists_sup_error(
    params_a: Params,
    params_b: Params,
    *,
    activation: str,
    domain,
    key: jax.Array,
    n_samples: int = 8192,
    local_search_steps: int = 100,
    n_starts: int = 16,
    return_point: bool = False,
):
    r"""Estimate ``sup_{x in domain} max_o |F_a(x)_o - F_b(x)_o|``.

    .. math::
       \sup_{x \in \Omega}\, \max_o\, |F_a(x)_o - F_b(x)_o|

    by the paper's protocol: the largest error over ``n_samples`` uniform samples of the domain,
    then projected gradient ascent on the error from the ``n_starts`` worst samples (each step
    projected back onto the domain). The result is a lower bound on the true supremum that is
    tight in practice; :func:`jaxcompress.certify` gives upper bounds.


    Args:
      params_a, params_b: two networks with the same input and output sizes (hidden widths may
        differ: typically a teacher and its compression).
      activation: the activation name shared by both.
      domain: e.g. :class:`jaxcompress.Ball` (needs ``sample``, ``project``, ``radius``).
      key: PRNG key for the uniform sample.
      n_samples: number of uniform samples.
      local_search_steps: projected-gradient-ascent steps from the ``n_starts`` worst samples
        (0 disables the local search).
      n_starts: how many of the worst samples to refine.
      return_point: also return the maximising input.

    Returns:
      The largest error seen (a scalar array), and the point when ``return_point``. Jit-compiled;
      one compilation per shape and static setting.
    """
    act = get_activation(activation)
    params_a = validate_params(params_a, where="sup_error")
    params_b = validate_params(params_b, where="sup_error")
    if isinstance(domain, Domain) and domain.parameter_map is not None:
        raise TypeError("sup_error: domain must be a jaxcompress.Ball or jaxcompress.Box (the "
                        "search samples and projects in the input space); a Parameterization "
                        "has no projection: measure on its image with jc.error_estimate, or on "
                        "a Ball / Box around it")
    for name, p in (("params_a", params_a), ("params_b", params_b)):
        if hasattr(domain, "dim") and p[0]["kernel"].shape[-2] != domain.dim:
            raise ValueError(
                f"sup_error: {name} takes inputs of size {p[0]['kernel'].shape[-2]}; the domain "
                f"has dim {domain.dim}"
            )
    _check_pair(params_a, params_b, domain, "sup_error")
    check_key(key, "sup_error")
    n_samples = check_positive_int(n_samples, "sup_error", "n_samples")
    local_search_steps = check_positive_int(local_search_steps, "sup_error",
                                            "local_search_steps", minimum=0)
    n_starts = check_positive_int(n_starts, "sup_error", "n_starts", minimum=0)
    params_a, params_b = _same_widths(params_a, params_b)
    return _sup_error(params_a, params_b, domain, key, act=act, n_samples=int(n_samples),
                      local_search_steps=int(local_search_steps), n_starts=int(n_starts),
                      return_point=bool(return_point))


def _fn_params(obj: Any, activation, where: str, name: str) -> tuple[Callable, Any, int | None]:
    """``(fn, params, d_in)`` with ``fn(params, x)`` the network ``obj`` (``d_in`` ``None`` for
    a plain callable)."""
    if not isinstance(obj, NetworkLike) and callable(obj) and not isinstance(
            obj, (list, tuple, dict)):
        return _called(obj), (), None
    if not isinstance(obj, NetworkLike) and activation is None:
        validate_params(obj, where=f"{where}: {name}", check_finite=False)
        raise TypeError(f"{where}: activation= is required for a params list ({name}); the "
                        "other kinds of network carry their own")
    # activation= is the params lists' among the two: any other kind carries its own
    net = network_like(obj, activation=None if isinstance(obj, NetworkLike) else activation,
                       where=f"{where}: {name}", check_finite=False)
    fn, params = net.function()
    return fn, params, net.input_dim


def _called(f: Callable) -> Callable:
    def fn(params, x):
        del params
        return f(x)
    return fn


def _both(a, b, activation, domain, where: str):
    """The two networks as ``(fn, params)`` pairs, their input widths checked against the
    domain and their outputs against each other (shapes only)."""
    fa, pa, da = _fn_params(a, activation, where, "the first network")
    fb, pb, db = _fn_params(b, activation, where, "the second network")
    d = next((v for v in (da, db) if v is not None), getattr(domain, "dim", None))
    if d is None:
        raise ValueError(f"{where}: two callables and a domain without a dimension: expected "
                         "a jc.Ball or jc.Box")
    for name, v in (("the first network", da), ("the second network", db)):
        if v is not None and v != d:
            raise ValueError(f"{where}: {name} takes inputs of size {v}, the other {d}; "
                             "expected the same")
    dtype = next((jnp.result_type(*jax.tree_util.tree_leaves(p)) for p in (pa, pb)
                  if jax.tree_util.tree_leaves(p)), jnp.result_type(float))
    check_domain(domain, d, where, dtype, check_values=False)
    spec = jax.ShapeDtypeStruct((2, d), dtype)
    out_a = jax.eval_shape(fa, pa, spec)
    out_b = jax.eval_shape(fb, pb, spec)
    if out_a.shape != out_b.shape:
        raise ValueError(f"{where}: the networks give outputs of shapes {out_a.shape[1:]} and "
                         f"{out_b.shape[1:]} per input; expected the same")
    return fa, pa, fb, pb, dtype


def _both_lists(a, b) -> bool:
    return not any(isinstance(v, NetworkLike) or (callable(v) and not isinstance(v, (list, tuple)))
                   for v in (a, b))


@functools.partial(jax.jit, static_argnames=("fa", "fb", "n_samples", "local_search_steps",
                                             "n_starts", "return_point", "dtype"))
def _fn_sup_error(pa, pb, domain, key, *, fa, fb, n_samples, local_search_steps, n_starts,
                  return_point, dtype):
    def err(x):
        return jnp.max(jnp.abs(fa(pa, x) - fb(pb, x)).reshape(x.shape[0], -1), axis=-1)

    return search_sup(err, domain, key, dtype, n_samples=n_samples,
                      local_search_steps=local_search_steps, n_starts=n_starts,
                      return_point=return_point)


def sup_error(a, b, *, activation=None, domain, key: jax.Array, n_samples: int = 8192,
              local_search_steps: int = 100, n_starts: int = 16, return_point: bool = False):
    r"""Estimate the sup error between two networks on ``domain``,

    .. math::
       \sup_{x \in \Omega}\, \max_o\, |F_a(x)_o - F_b(x)_o|,

    by the paper's protocol: the largest error over ``n_samples`` uniform samples of the domain,
    then projected gradient ascent on the error from the ``n_starts`` worst samples (each step
    projected back onto the domain). A lower bound on the true supremum that is tight in
    practice; :func:`jaxcompress.certify` gives upper bounds.

    >>> teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
    >>> small, _ = jc.compress(teacher, activation="sigmoid", order=4)
    >>> err = jc.sup_error(teacher, small, activation="sigmoid", domain=jc.Ball(2, 1.0),
    ...                    key=jax.random.PRNGKey(1))
    >>> bool(err < 1e-4), err.shape
    (True, ())

    Args:
      a, b: two networks with the same input and output sizes: params lists (with
        ``activation=``), traced networks or modules, compressed results, loaded files, or
        callables ``f(x)`` of a batch.
      activation: the activation of the params lists among ``a`` and ``b``.
      domain: a :class:`jaxcompress.Ball` or :class:`jaxcompress.Box` (or
        :class:`jaxcompress.Points`: the exact maximum over its held-out rows).
      key: PRNG key for the uniform sample.
      n_samples, local_search_steps, n_starts: the samples, the projected-ascent steps (0: no
        local search) and how many of the worst samples it refines.
      return_point: also return the maximising input.

    Returns:
      The largest error seen (a scalar array), and the point when ``return_point``.
    """
    where = "sup_error"
    if _both_lists(a, b):
        if activation is None:
            raise TypeError(f"{where}: activation= is required for params lists")
        return _lists_sup_error(a, b, activation=activation, domain=domain, key=key,
                                  n_samples=n_samples, local_search_steps=local_search_steps,
                                  n_starts=n_starts, return_point=return_point)
    if isinstance(domain, Domain) and domain.parameter_map is not None:
        raise TypeError(f"{where}: domain must be a jaxcompress.Ball or jaxcompress.Box (the "
                        "search samples and projects in the input space); a Parameterization "
                        "has no projection: measure on its image with jc.error_estimate")
    fa, pa, fb, pb, dtype = _both(a, b, activation, domain, where)
    check_key(key, where)
    return _fn_sup_error(pa, pb, domain, key, fa=fa, fb=fb,
                         n_samples=check_positive_int(n_samples, where, "n_samples"),
                         local_search_steps=check_positive_int(local_search_steps, where,
                                                               "local_search_steps", minimum=0),
                         n_starts=check_positive_int(n_starts, where, "n_starts", minimum=0),
                         return_point=bool(return_point), dtype=jnp.dtype(dtype))


def error_estimate(a, b, *, activation=None, domain, n_points: int = ERROR_POINTS) -> jax.Array:
    """``max_p max_o |F_a(x_p)_o - F_b(x_p)_o|`` over the fixed Sobol points of the domain
    (:func:`jaxcompress.measure.error_points`), for any two networks (as :func:`sup_error`).

    A lower bound on the sup error, cheap and deterministic; pure and jit-able. NaN when the
    domain's numbers (traced) describe no domain.
    """
    where = "error_estimate"
    if _both_lists(a, b):
        if activation is None:
            raise TypeError(f"{where}: activation= is required for params lists")
        return _lists_error_estimate(a, b, activation=activation, domain=domain,
                                       n_points=n_points)
    n_points = check_positive_int(n_points, where, "n_points")
    fa, pa, fb, pb, dtype = _both(a, b, activation, domain, where)
    x = error_points(domain, n_points, dtype)
    return _worst_gap(fa(pa, x), fb(pb, x), domain_valid(domain))


@functools.partial(FastOnSmallCPU, limit="FAST_MAX_PARAMS_MEASURE",
                   static_argnames=("plan", "n_samples", "local_search_steps", "n_starts"))
def _plan_sup_error(teacher, leaves, domain, key, *, plan: Plan, n_samples, local_search_steps,
                    n_starts):
    def err(x):
        diff = plan.apply(teacher, x) - plan.apply(leaves, x)
        return jnp.max(jnp.abs(diff).reshape(x.shape[0], -1), axis=-1)

    return search_sup(err, domain, key, plan.x.dtype, n_samples=n_samples,
                      local_search_steps=local_search_steps, n_starts=n_starts,
                      return_point=False)


def network_sup_error(plan: Plan, teacher, leaves, domain, key, *, n_samples: int = 8192,
                      local_search_steps: int = 100, n_starts: int = 16) -> jax.Array:
    """:func:`sup_error` of one network at two sets of leaves of the same shapes (a teacher and
    a compressed candidate at the teacher's shapes: :meth:`jaxcompress.graph.plan.Plan.expand`), one
    compilation for every candidate."""
    if not isinstance(plan, Plan):
        raise TypeError(f"network_sup_error: expected a driver Plan, got {describe(plan)}")
    return _plan_sup_error(list(teacher), list(leaves), domain, key, plan=plan,
                           n_samples=n_samples, local_search_steps=local_search_steps,
                           n_starts=n_starts)


def plan_estimate(plan: Plan, teacher, small, domain, placement: Placement | None = None
                  ) -> jax.Array:
    """``max |F - F~|`` of one network at two sets of leaves on the domain's fixed Sobol points
    (:func:`jaxcompress.measure.error_points`; NaN for an invalid traced domain): the error
    estimate every compression records (``CompressInfo.error_estimate``). Traceable."""
    if plan.chain is not None:
        return _lists_error_estimate(plan.chain.lower(teacher), plan.chain.lower(small),
                                       activation=plan.chain.activation, domain=domain,
                                       placement=placement)
    pts = error_points(domain, dtype=plan.x.dtype)
    est = jnp.max(jnp.abs(plan.apply(teacher, pts) - plan.apply(small, pts)))
    return jnp.where(domain.valid(), est, jnp.nan)


#: Fixed Sobol points of :func:`psnr` (those of :func:`error_points`, as the searches' relative
#: L2 distance uses).
PSNR_POINTS = 4096


def psnr_db(reference, estimate, data_range=None) -> jax.Array:
    r"""The peak signal-to-noise ratio of ``estimate`` against ``reference``, in dB:

    .. math::
       \mathrm{PSNR} = 10 \log_{10} \frac{R^2}{\mathrm{MSE}}, \qquad
       \mathrm{MSE} = \frac{1}{n} \sum_{i} (r_i - e_i)^2,

    the mean over every entry (points and outputs), :math:`R` = ``data_range`` or, when
    ``None``, the reference's own range :math:`\max_i r_i - \min_i r_i` (scikit-image's
    ``peak_signal_noise_ratio`` with ``data_range`` given). ``inf`` when the two are equal.
    Traceable.
    """
    ref = jnp.asarray(reference)
    est = jnp.asarray(estimate, ref.dtype)
    mse = jnp.mean((ref - est) ** 2)
    peak = jnp.max(ref) - jnp.min(ref) if data_range is None else jnp.asarray(data_range,
                                                                              ref.dtype)
    return 10 * jnp.log10(peak * peak / mse)


def _check_range(data_range, where: str):
    if data_range is None:
        return None
    if isinstance(data_range, bool) or not isinstance(data_range, (int, float, np.number)) or \
            not np.isfinite(data_range) or data_range <= 0:
        raise ValueError(f"{where}: data_range must be None (the reference's max - min) or one "
                         f"finite number > 0, got {describe(data_range)}")
    return float(data_range)


def psnr(a, b, *, activation=None, domain, n_points: int = PSNR_POINTS,
         data_range: float | None = None) -> jax.Array:
    r"""The PSNR of network ``b`` against network ``a`` (the reference: a teacher, its
    compression ``b``) on ``domain``, in dB (ours):

    .. math::
       \mathrm{PSNR}(F_a, F_b) = 10 \log_{10} \frac{R^2}{\frac{1}{n\,o}
       \sum_{p, j} (F_a(x_p)_j - F_b(x_p)_j)^2}

    over the ``n`` fixed Sobol points :math:`x_p` of :func:`error_points` (deterministic; the
    points of the searches' ``metric="psnr"``) and the ``o`` outputs, with peak
    :math:`R` = ``data_range`` or, when ``None``, the range of the reference's outputs there,
    :math:`\max_{p,j} F_a(x_p)_j - \min_{p,j} F_a(x_p)_j` (an image field's values span its
    range, so the network's PSNR is the image's). ``inf`` for equal networks. Higher is
    better, and 40 dB is a relative RMS error of 1% of the range.

    >>> teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
    >>> small, _ = jc.compress(teacher, jc.derivative_matching(3), activation="tanh")
    >>> db = jc.measure.psnr(teacher, small, activation="tanh", domain=jc.Ball(2, 1.0))
    >>> bool(db > 40)
    True

    Args:
      a, b: two networks with the same input and output sizes (as :func:`sup_error`).
      activation: the activation of the params lists among them.
      domain: a :class:`~jaxcompress.Ball`, :class:`~jaxcompress.Box` (or any domain with fixed
        Sobol points).
      n_points: the number of points.
      data_range: the peak :math:`R` (e.g. ``1.0`` for an image in ``[0, 1]``); ``None``: the
        reference's range on the points.
    """
    where = "psnr"
    n_points = check_positive_int(n_points, where, "n_points")
    data_range = _check_range(data_range, where)
    fa, pa, fb, pb, dtype = _both(a, b, activation, domain, where)
    x = error_points(domain, n_points, dtype)
    return psnr_db(fa(pa, x), fb(pb, x), data_range)


def psnr_drop(teacher: Callable, x, y, *, data_range: float | None = None) -> Callable:
    r"""A task metric for the searches: the dB of PSNR a candidate loses against the teacher
    on your data ``(x, y)`` (ours),

    .. math::
       \mathrm{drop}(f) = \mathrm{PSNR}(y, T(x)) - \mathrm{PSNR}(y, f(x))

    (:func:`psnr_db` with ``y`` the reference), so that ``jc.Measured(metric=jc.measure
    .psnr_drop(teacher, x, y), ...)`` with ``eps=0.5`` finds the smallest network within
    0.5 dB of the teacher's PSNR on the image: its MSE at most :math:`10^{0.05} \approx 1.122`
    times the teacher's. The teacher's own drop is 0; a candidate better than the teacher has a
    negative one.

    Args:
      teacher: the teacher as a batched function ``T(x)`` (a network, a module, any callable).
      x, y: the coordinates and the values they should give (e.g. the pixels of the image the
        teacher was trained on, held-out ones if you have them).
      data_range: the peak (``1.0`` for values in ``[0, 1]``, ``255`` for bytes); ``None``:
        ``max(y) - min(y)``.

    Returns:
      ``metric(f) -> float`` of a candidate ``f(x)``, named ``psnr_drop`` in tables.
    """
    where = "psnr_drop"
    if not callable(teacher):
        raise TypeError(f"{where}: teacher must be a batched function T(x) (a network, a module "
                        f"or any callable), got {describe(teacher)}")
    data_range = _check_range(data_range, where)
    x = jnp.asarray(x)
    y = np.asarray(y)
    pred = np.asarray(teacher(x))
    if pred.shape != y.shape:
        raise ValueError(f"{where}: the teacher gives values of shape {pred.shape} at x; y has "
                         f"shape {y.shape}; expected the same")
    base = float(psnr_db(y, pred, data_range))

    def psnr_drop(f) -> float:   # the name tables show
        return base - float(psnr_db(y, np.asarray(f(x)), data_range))

    return psnr_drop
