"""``certify``: the paper's certificate, ours, the Appendix G diagnostics and the a posteriori
bounds of a given compression, in one :class:`~jaxcompress.certificates.report.Certificate`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from jaxcompress._checks import check_positive_int
from jaxcompress.activations import Activation
from jaxcompress.certificates.a_posteriori import a_posteriori
from jaxcompress.certificates.a_priori import ours_a_priori, paper_a_priori
from jaxcompress.certificates.chain import domain_geometry
from jaxcompress.certificates.prepared import Prepared
from jaxcompress.certificates.report import Certificate, LayerCertificate
from jaxcompress.domains import Ball, Domain
from jaxcompress.layer import CompressInfo
from jaxcompress.mlp import num_params
from jaxcompress.networks import as_network
from jaxcompress.protocol import NetworkLike
from jaxcompress.verification import verify


def certify(
    params: Any,
    *,
    activation: str | Activation | None = None,
    domain,
    eps: float,
    rho0: float | Sequence[float] | None = None,
    delta: float = 1e-2,
    compressed: Any = None,
    info: CompressInfo | None = None,
    verified: bool | None = None,
    n_samples: int = 512,
    seed: int = 0,
    k_max: int = 200,
    extra_orders: int = 10,
) -> Certificate:
    r"""The compression certificate of ``params`` on ``domain`` for the error budget ``eps``.

    Three parts, each number labelled with its source (see
    :data:`jaxcompress.certificates.report.LAYER_QUANTITIES`):

    * **the paper's** (:mod:`jaxcompress.certificates.paper`): per hidden layer ``W_max``
      (Eq. 6), ``V_max`` (Eq. 7), ``rho_sigma`` (Eq. 5), ``rho_f`` and ``L_f`` (Assumption 1,
      Eq. 4; bounds), ``rho`` (Eq. 8; a lower bound beyond layer 1), Assumption 4, ``rho0``,
      ``M_g`` (Eq. 17; an upper bound), ``C0`` and ``lam`` (Eq. 20), ``k_star`` (Eq. 21/23),
      ``k_cert`` (Eq. 72), ``D_k``, the Lemma 10 coefficient bound, Lemma 15's ``Lambda``, the
      uniform budget (Eq. 62), Eqs. 71, 74, 75; for the network ``C*``, ``lambda*`` (Eq. 53),
      ``Lambda_bar`` (Lemma 19), ``Dbar`` (Eq. 54), the width and parameter bounds
      (Eqs. 68-69), non-vacuity, the certified orders ``k_cert`` and Theorem 16's bound;
    * **ours** (sharper; :mod:`jaxcompress.certificates.a_priori`): the deviation-chain radius,
      Schwarz-form orders ``k_ours`` with ``delta``-aware selection factors, their budget split
      and bound;
    * **Appendix G** (:mod:`jaxcompress.certificates.diagnostics`): ``rho_pole`` (Eq. 100),
      sampled ``L_f``, ``q_hat`` (Eq. 101), the first violating radius of layer 2;

    and, given a compression, the a posteriori bounds (the paper's Theorem 5 on the actual
    weights, ours) and both a priori bounds at its orders.

    The paper's a priori statement for one layer compressed at order :math:`k` (Eq. 71, the
    bound in the proof of Theorem 6 before its relaxation to Eq. 21) is an error of at most

    .. math::
       (1 + D_k)\, C_0\, e^{-(k+1)\lambda}, \qquad
       C_0 = V_{\max} M_g \frac{\rho_0}{\rho_0 - R}, \qquad
       \lambda = \log\frac{\rho_0}{R} \quad \text{(Eq. 20)},

    and ``k_cert`` is the least :math:`k` for which it is at most the layer's share
    :math:`\varepsilon / ((L - 1) \bar\Lambda)` of the budget (Eqs. 72 and 62).

    Args:
      params: the network: a list of ``{"kernel", "bias"}`` (with ``activation=``), or any
        network (:func:`~jaxcompress.trace`, :func:`~jaxcompress.trace_module`, a compressed
        result, a loaded file) that is a chain of dense layers with one activation; anything
        else is refused, naming which group breaks the chain and why.
      activation: for a params list: a registered activation with a :class:`BoundRule`
        (sigmoid, tanh, softplus, silu, gelu, gelu_tanh, sin, identity).
      domain: a :class:`jaxcompress.Ball` (any centre: it is the expansion point, as in
        :func:`jaxcompress.compress`), a :class:`jaxcompress.Box` (certified on its
        circumscribed ball) or a radius (ball at the origin).
      eps: the target sup error.
      rho0: the paper's working radius (one value or one per hidden layer) in ``(R, rho)``;
        default: per layer, the grid radius that minimises ``k*``.
      delta: the maxvol tolerance (``|C_ij| <= 1 + delta``) our a priori bound assumes.
      compressed, info: a backward-order compression of ``params`` (the untrimmed output of
        :func:`jaxcompress.compress` on the same domain, any selector and feature kind): a
        params list or a :class:`~jaxcompress.Compressed` (then ``info`` defaults to its own).
        For a network that is not such a chain, its compression (any method): the report then
        holds :func:`jaxcompress.verify`'s proven bound of the pair instead of the paper's.
      verified: also prove the sup error of ``params`` against ``compressed`` with
        :func:`jaxcompress.verify` (``Certificate.verified``, at most :data:`VERIFY_SECONDS`):
        ``None`` (default) where the paper's certificate does not apply, ``True`` for a chain
        too, ``False`` never.
      n_samples, seed: sample size and NumPy seed of the Appendix G diagnostics.
      k_max: largest order considered.
      extra_orders: the a posteriori bound of ours computes the error's Taylor coefficients
        exactly up to ``max(order) + extra_orders`` (fewer if that Taylor pass would need more
        than 1 GiB).

    Returns:
      A :class:`Certificate`; ``str()`` is a table with a source column, ``to_dict()``
      JSON-ready.
    """
    check_positive_int(n_samples, "certify", "n_samples")
    if verified not in (None, True, False):
        raise TypeError(f"certify: verified must be None, True or False, got {verified!r}")
    if isinstance(params, NetworkLike):
        net = as_network(params, activation=activation, where="certify")
        if not net.chain:
            why = ("certify: the certificate is the paper's, for a chain of dense layers with "
                   "one analytic activation; this network is not one:\n  "
                   + "\n  ".join(net.why_not))
            if compressed is None or verified is False:
                raise ValueError(why + "\npass compressed= (its compression) for the proven "
                                 "bound of the pair (jc.verify)")
            return _verified_only(net, compressed, domain, eps, delta, why)
        params, activation = net.lower(), net.activation
    elif activation is None:
        raise TypeError("certify: activation= is required for a params list (a registered "
                        "name such as 'tanh'); a network from jc.trace carries its own")
    if isinstance(compressed, NetworkLike):   # a compressed result (its record), a file
        info = compressed.info if info is None else info
        compressed = compressed.as_network().lower()
    prep = Prepared(params, activation, domain, rho0=rho0, n_samples=n_samples, seed=seed)
    cert = certify_prepared(prep, eps=eps, delta=delta, compressed=compressed, info=info,
                            k_max=k_max, extra_orders=extra_orders)
    if verified and compressed is not None:
        proof = verify(prep.params, compressed, activation=prep.act, domain=_domain_of(
            domain, prep.sizes[0]), eps=eps, max_seconds=VERIFY_SECONDS)
        cert = dataclasses.replace(cert, verified=proof)
    return cert


#: The time budget of :func:`certify`'s proven bound (``verified``), seconds.
VERIFY_SECONDS = 60.0


def _domain_of(domain, d: int):
    """The domain :func:`jaxcompress.verify` covers: the Ball or Box given, or the ball of the
    radius given."""
    radius, _ = domain_geometry(domain, d)
    return domain if isinstance(domain, Domain) else Ball(d, radius)


def _verified_only(net, compressed, domain, eps, delta, why: str) -> Certificate:
    """The report of a network the paper's certificate does not cover: the proven bracket of its
    compression's sup error (:func:`jaxcompress.verify`), and why there is nothing else."""
    eps = float(eps)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"certify: eps must be positive and finite, got {eps}")
    d = int(net.x.shape[-1])
    radius, center = domain_geometry(domain, d)
    proof = verify(net, compressed, domain=_domain_of(domain, d), eps=eps,
                   max_seconds=VERIFY_SECONDS)
    act = net.activation
    return Certificate(
        activation="traced" if act is None else act.name, sizes=tuple(net.layer_sizes()),
        radius=radius, center=None if center is None else tuple(float(x) for x in center),
        eps=eps, delta=float(delta), layers=(), num_params=net.num_params(),
        notes=(why.removeprefix("certify: ").replace(":\n  ", ": ").replace("\n  ", "; ")
               + "; the bound above is jc.verify's",), verified=proof)


def certify_prepared(prep: Prepared, *, eps, delta, compressed=None, info=None, k_max=200,
                     extra_orders=10) -> Certificate:
    """:func:`certify` on an already prepared (network, activation, domain)."""
    eps = float(eps)
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"certify: eps must be positive and finite, got {eps}")
    delta = float(delta)
    if not (delta >= 0 and math.isfinite(delta)):
        raise ValueError(f"certify: delta must be >= 0 and finite, got {delta}")
    k_max = int(k_max)
    if k_max < 0:
        raise ValueError(f"certify: k_max must be >= 0, got {k_max}")
    p_layers, p_net, notes = paper_a_priori(prep, eps, k_max)
    o_layers, o_net, o_notes = ours_a_priori(prep, eps, delta, k_max)
    post_layers, post_net = [None] * prep.n_hidden, None
    if compressed is not None or info is not None:
        if compressed is None or info is None:
            raise ValueError("certify: pass both compressed= and info= for the a posteriori bound")
        post_layers, post_net = a_posteriori(prep, compressed, info, int(extra_orders), delta)
    layers = tuple(
        LayerCertificate(layer=l + 1, width=prep.sizes[l + 1], paper=paper_l, ours=ours_l,
                         appendix_g=diag_l, a_posteriori=post_l)
        for l, (paper_l, ours_l, diag_l, post_l) in enumerate(zip(
            p_layers, o_layers, prep.diagnostics(), post_layers, strict=True)))
    center = prep.center
    return Certificate(
        activation=prep.act.name, sizes=prep.sizes, radius=prep.radius,
        center=None if center is None else tuple(float(x) for x in center), eps=eps,
        delta=delta, layers=layers, num_params=num_params(prep.params), paper=p_net, ours=o_net,
        a_posteriori=post_net, notes=tuple(notes + o_notes))
