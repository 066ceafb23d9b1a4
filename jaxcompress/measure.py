"""Errors between any two networks: :func:`sup_error` and :func:`error_estimate` for params
lists, traced networks and modules, compressed results, loaded files, or plain callables.

Two params lists go through :mod:`jaxcompress.evaluate` (``activation=`` shared by both). Any
other pair is compared as functions ``f(x)`` of a batch: each network contributes its own
program and parameters (``activation=`` only for a params list among them), so nothing is
lowered or re-traced; the same protocol, samples plus projected gradient ascent
(:func:`jaxcompress.evaluate.search_sup`), one compilation per pair of programs and shapes. A
plain callable ``f(x)`` works too (compiled at every call: pass the network itself to reuse
the compilation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxcompress import evaluate
from jaxcompress._checks import check_key, check_positive_int, describe
from jaxcompress.domains import Domain, check_domain, domain_valid
from jaxcompress.evaluate import ERROR_POINTS, error_points, search_sup
from jaxcompress.graph.plan import Plan
from jaxcompress.mlp import validate_params
from jaxcompress.networks import network_like
from jaxcompress.placement import Placement
from jaxcompress.protocol import NetworkLike

__all__ = ["error_estimate", "network_sup_error", "plan_estimate", "sup_error"]


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
        return evaluate.sup_error(a, b, activation=activation, domain=domain, key=key,
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
    (:func:`jaxcompress.evaluate.error_points`), for any two networks (as :func:`sup_error`).

    A lower bound on the sup error, cheap and deterministic; pure and jit-able. NaN when the
    domain's numbers (traced) describe no domain.
    """
    where = "error_estimate"
    if _both_lists(a, b):
        if activation is None:
            raise TypeError(f"{where}: activation= is required for params lists")
        return evaluate.error_estimate(a, b, activation=activation, domain=domain,
                                       n_points=n_points)
    n_points = check_positive_int(n_points, where, "n_points")
    fa, pa, fb, pb, dtype = _both(a, b, activation, domain, where)
    x = error_points(domain, n_points, dtype)
    est = jnp.max(jnp.abs(fa(pa, x) - fb(pb, x)))
    return jnp.where(domain_valid(domain), est, jnp.nan)


@functools.partial(jax.jit, static_argnames=("plan", "n_samples", "local_search_steps",
                                             "n_starts"))
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
    (:func:`jaxcompress.evaluate.error_points`; NaN for an invalid traced domain): the error
    estimate every compression records (``CompressInfo.error_estimate``). Traceable."""
    if plan.chain is not None:
        return evaluate.error_estimate(plan.chain.lower(teacher), plan.chain.lower(small),
                                       activation=plan.chain.activation, domain=domain,
                                       placement=placement)
    pts = error_points(domain, dtype=plan.x.dtype)
    est = jnp.max(jnp.abs(plan.apply(teacher, pts) - plan.apply(small, pts)))
    return jnp.where(domain.valid(), est, jnp.nan)
