"""The certificate's typed records: the paper's quantities, ours, Appendix G, a posteriori.

Per hidden layer :class:`PaperLayer`, :class:`OursLayer`, :class:`AppendixG` and
:class:`APosterioriLayer`; per network :class:`PaperNetwork`, :class:`OursNetwork` and
:class:`APosterioriNetwork`. :class:`~jaxcompress.certificates.report.LayerCertificate` and
:class:`~jaxcompress.certificates.report.Certificate` compose them. Field names are the report's
keys (:data:`~jaxcompress.certificates.report.LAYER_KEYS`,
:data:`~jaxcompress.certificates.report.TOP_KEYS`); the paper's are its symbols (``W_max`` is
``W_max^(l)`` of Eq. 6, ``lam`` is ``lambda`` of Eq. 20, ``C_star`` is ``C*`` of Eq. 53), ours
carry ``_ours`` or are a posteriori quantities the paper does not define.

A certificate is built in stages, each of which may stop (Assumption 4 not proven, no order
``<= k_max``, ...). A field made with :func:`later` belongs to a later stage: ``None`` there
means the stage was not reached, and the report leaves the key out (no row in the table, no
``source`` entry). Every other field is reported whenever its record exists; ``None`` there is a
value (e.g. ``k_cert = None``: no ``k <= k_max`` satisfies Eq. 72). A field whose value is a
record contributes that record's keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

_LATER = "later"


def later() -> Any:
    """A field of a later stage: ``None`` (not reached) leaves its key out of the report."""
    return dataclasses.field(default=None, metadata={_LATER: True})


def entries(record) -> dict[str, Any]:
    """The report's ``key -> value`` of a record (see the module docstring), in field order."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if dataclasses.is_dataclass(value):
            out.update(entries(value))
        elif value is not None or not f.metadata.get(_LATER, False):
            out[f.name] = value
    return out


# ------------------------------------------------------------------------------------------------
# the paper
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PaperLayerBudget:
    """Theorem 6 for one hidden layer at its working radius and the layer budget of Eq. 62.

    Exists when Assumptions 4 and 14 hold in every layer and Lemma 19 gives ``Lambda_bar``.

    Attributes:
      rho0: the working radius ``rho_0 in (R, rho)`` (Theorem 5).
      L_f: ``L_f(rho_0)`` (Eq. 4; an upper bound beyond layer 1).
      L_f_radius: the radius at which ``L_f`` is reported (``rho_0``).
      M_g: ``M_g`` (Eq. 17; an upper bound).
      C0, lam: ``C_0`` and ``lambda`` (Eq. 20).
      k_star: ``k*`` (Eq. 21/23) at ``eps_layer``; None when no ``k <= k_max`` satisfies it.
      D_k_star: ``D_{k*}`` (Eq. 18).
      k_cert: ``k_cert`` (Eq. 72) at ``eps_layer``; None when no ``k <= k_max`` satisfies it.
      D_k: ``D_{k_cert}`` (Eq. 18).
      coef_bound: Lemma 10's ``max_i ||C_{:,i}||_1 <= min(D_k, d_l)`` at ``k_cert``.
      bound_layer: Eq. 71's ``(1 + D_k) C_0 e^{-(k_cert + 1) lambda}``.
      eps_layer: the layer budget ``eps_t`` (Eq. 62).
      eq74: Eq. 74, ``D_{k_cert} < d_l``.
      eq75: Eq. 75 (a sufficient condition for Eq. 74).
      Lambda_step: Lemma 15 with Eq. 65 at the certified orders (later: every layer needs a
        ``k_cert``).
    """

    rho0: float
    L_f: float
    L_f_radius: float
    M_g: float
    C0: float
    lam: float
    k_star: int | None
    D_k_star: int | None
    k_cert: int | None
    D_k: int | None
    coef_bound: int | None
    bound_layer: float | None
    eps_layer: float
    eq74: bool
    eq75: bool
    Lambda_step: float | None = later()


@dataclasses.dataclass(frozen=True)
class PaperLayer:
    """The paper's quantities of one hidden layer ``l``, computed as its equations are written
    (or as rigorous bounds of them in the direction that keeps the theorem valid).

    Attributes:
      W_max: ``W_max^(l)`` (Eq. 6), the bias absorbed into the weight vector.
      V_max: ``V_max`` (Eq. 7).
      rho_sigma: ``rho_sigma`` (Eq. 5).
      rho_f: ``rho_f`` (Assumption 1; a lower bound beyond layer 1).
      rho: ``rho`` (Eq. 8; a lower bound beyond layer 1).
      assumption4: Assumption 4, ``R < rho``.
      Lambda: Lemma 15's downstream factor of the original network; None when Assumption 14
        fails.
      budget: Theorem 6 at ``rho_0`` and ``eps_layer`` (later).
    """

    W_max: float
    V_max: float
    rho_sigma: float
    rho_f: float
    rho: float
    assumption4: bool
    Lambda: float | None
    budget: PaperLayerBudget | None = later()


@dataclasses.dataclass(frozen=True)
class PaperBudget:
    """Lemma 19's budget split and what it certifies (exists when Lemma 19 gives
    ``Lambda_bar``).

    Attributes:
      Lambda_bar: ``Lambda-bar`` (Lemma 19).
      eps_uniform: ``eps_t = eps / ((L - 1) Lambda-bar)`` (Eq. 62).
      k_bar: ``k*(eps_t)`` with ``C*``, ``lambda*`` (Eq. 54).
      width_bound: ``Dbar(eps_t)`` (Eq. 68).
      param_bound: Eq. 69's ``sum_l d'_l d'_{l-1}`` with ``d'_l = width_bound``.
      non_vacuous: Eq. 75 in every hidden layer.
      narrower: Eq. 74 in every hidden layer.
      orders: ``k_cert`` per hidden layer (Eq. 72; None where no ``k <= k_max``).
      widths: ``min(D_{k_cert}, d_l)`` per hidden layer (later: every layer needs a ``k_cert``).
      bound_a_priori: Theorem 16's sum at the certified orders, ``<= eps`` (later, as
        ``widths``).
    """

    Lambda_bar: float
    eps_uniform: float
    k_bar: int
    width_bound: int
    param_bound: int
    non_vacuous: bool
    narrower: bool
    orders: tuple[int | None, ...]
    widths: tuple[int, ...] | None = later()
    bound_a_priori: float | None = later()


@dataclasses.dataclass(frozen=True)
class PaperNetwork:
    """The paper's network-level quantities (exists when Assumptions 4 and 14 hold).

    Attributes:
      C_star, lam_star: ``C*`` and ``lambda*`` (Eq. 53) at the chosen working radii.
      budget: Lemma 19's budget and the certified orders (later).
    """

    C_star: float
    lam_star: float
    budget: PaperBudget | None = later()


# ------------------------------------------------------------------------------------------------
# ours
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OursLayer:
    """Our a priori quantities of one hidden layer (:mod:`~jaxcompress.certificates.a_priori`).

    Attributes:
      rho_ours: the radius up to which our deviation chain proves the layer holomorphic.
      k_ours: the least order whose Schwarz-form bound is ``<= eps_layer_ours`` (later, as the
        rest: our certificate needs every layer holomorphic beyond ``R``, a globally Lipschitz
        activation and an order ``<= k_max`` in every layer).
      rho0_ours: the radius attaining ``k_ours``'s bound.
      width_ours: ``min(D_{k_ours}, d_l)``.
      Lambda_ours: our downstream factor at the orders ``k_ours``.
      eps_layer_ours: ``eps / ((L - 1) Lambda_bar_ours)``.
      bound_ours: ``Lambda_ours`` times the layer's Schwarz bound at ``k_ours``.
    """

    rho_ours: float
    k_ours: int | None = later()
    rho0_ours: float | None = later()
    width_ours: int | None = later()
    Lambda_ours: float | None = later()
    eps_layer_ours: float | None = later()
    bound_ours: float | None = later()


@dataclasses.dataclass(frozen=True)
class OursNetwork:
    """Our network-level a priori quantities (exists when every layer is holomorphic beyond
    ``R`` by our chain and the activation is globally Lipschitz).

    Attributes:
      Lambda_bar_ours: ``max_l Lambda_ours`` at the fixed-point orders.
      eps_uniform_ours: ``eps / ((L - 1) Lambda_bar_ours)``.
      orders_ours, widths_ours: ``k_ours`` and ``min(D_{k_ours}, d_l)`` per hidden layer
        (later, as the rest: every layer needs an order ``<= k_max``).
      width_bound_ours: ``max_l widths_ours``.
      param_bound_ours: kernels and biases of ``[d_in, widths_ours, d_out]``.
      non_vacuous_ours: ``param_bound_ours`` below the original parameter count.
      bound_a_priori_ours: ``sum_l bound_ours`` (``<= eps``).
    """

    Lambda_bar_ours: float
    eps_uniform_ours: float
    orders_ours: tuple[int, ...] | None = later()
    widths_ours: tuple[int, ...] | None = later()
    width_bound_ours: int | None = later()
    param_bound_ours: int | None = later()
    non_vacuous_ours: bool | None = later()
    bound_a_priori_ours: float | None = later()


# ------------------------------------------------------------------------------------------------
# Appendix G
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AppendixG:
    """The paper's Appendix G diagnostics of one hidden layer, sampled where the paper samples
    (:mod:`~jaxcompress.certificates.diagnostics`).

    Attributes:
      rho_pole: Eq. 100's ``min_j dist(b_j, singularities) / ||w_j||_2`` over the layer-1
        neurons (``rho_f`` of layer 2).
      L_f_sampled: Eq. 101's ``Lhat_f(R)``, the sampled ``max ||J f(z)||_2`` on ``|z| = R``.
      q_hat: Eq. 101's ``qhat = R W_max Lhat_f(R) / rho_sigma`` (``>= 1``: Assumption 4
        fails).
      r_violate: the first sampled violating radius of layer 2 (None: not reached by ``R``,
        or another layer).
      strip_ratio: ours, the sampled ``max |Im u_i(z)| / rho_sigma`` on ``|z| = R``.
    """

    rho_pole: float
    L_f_sampled: float
    q_hat: float
    r_violate: float | None
    strip_ratio: float


# ------------------------------------------------------------------------------------------------
# a posteriori
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class APosterioriLayer:
    """The a posteriori quantities of one hidden layer of a given compression
    (:mod:`~jaxcompress.certificates.a_posteriori`).

    Attributes:
      order: the layer's Taylor order ``k``.
      residual: the matching residual recorded in the ``CompressInfo`` (Eq. 41).
      max_coef: the realised ``max |C_ij|`` (Lemma 10).
      inflation: ``||Wt^(l+1)||_{op,inf} / ||W^(l+1)||_{op,inf}`` (Eq. 42).
      K_tail: ours, the order after which the Cauchy/Schwarz tail takes over.
      bound_post: ours, the error this layer adds to the next pre-activation.
      Lambda_post: ours, the downstream factor with the compressed kernels.
      contribution: ours, this layer's error propagated to the outputs.
      bound_thm5: the paper's Theorem 5 (Eq. 16) on the actual weights plus the float matching
        residual (later: needs Assumptions 4 and 14).
      Lambda_post_paper: Lemma 15 with the compressed downstream kernels (later, as
        ``bound_thm5``).
    """

    order: int
    residual: float
    max_coef: float
    inflation: float
    K_tail: int
    bound_post: float
    Lambda_post: float
    contribution: float
    bound_thm5: float | None = later()
    Lambda_post_paper: float | None = later()


@dataclasses.dataclass(frozen=True)
class APosterioriNetwork:
    """The network-level a posteriori bounds of a given compression, and both a priori bounds
    at its orders (None where the certificate does not apply).

    Attributes:
      a_posteriori_bound: ours, the bound on the sup error of the compressed network.
      a_posteriori_paper: the paper's Theorem 16 with Theorem 5 per layer.
      a_priori_at_orders: the paper's a priori bound (Theorem 16) at the network's orders.
      a_priori_at_orders_ours: ours at the network's orders.
    """

    a_posteriori_bound: float | None
    a_posteriori_paper: float | None
    a_priori_at_orders: float | None
    a_priori_at_orders_ours: float | None
