"""The certificate's report: every quantity declared once, in :data:`LAYER_QUANTITIES` and
:data:`TOP_QUANTITIES`, with its source (the paper's equation, ours, or sampled), its status
(``"rigorous"``: a proven value or bound, computed in closed form or by exact linear algebra,
floating-point rounding aside; ``"estimate"``: sampled) and how it is computed.

Sources read ``"paper Eq. N"`` when the number is the paper's Eq. N computed as written,
``"paper Eq. N (upper bound)"`` / ``"(lower bound)"`` when Eq. N is a supremum we can only bound
(in the direction that keeps the theorem valid), ``"ours"`` for the library's own sharper bounds
(proofs in :mod:`jaxcompress.certificates.chain`, :mod:`~jaxcompress.certificates.a_priori` and
:mod:`~jaxcompress.certificates.a_posteriori`), and ``"sampled (...)"`` for estimates.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxcompress.certificates.records import (
    APosterioriLayer,
    APosterioriNetwork,
    AppendixG,
    OursLayer,
    OursNetwork,
    PaperLayer,
    PaperNetwork,
    entries,
)

RIGOROUS = "rigorous"
ESTIMATE = "estimate"

PAPER, OURS, APP_G, POST = "paper", "ours", "appendix G", "a posteriori"


@dataclasses.dataclass(frozen=True)
class Quantity:
    """One entry of the report.

    ``first`` / ``second`` / ``deep`` override ``source``, ``status`` or ``how`` for hidden
    layer 1, layer 2 and layers ``>= 3`` (e.g. ``rho`` is exact in layer 1, a lower bound
    deeper).
    """

    key: str
    source: str
    how: str
    section: str
    status: str = RIGOROUS
    first: tuple[tuple[str, str], ...] = ()
    second: tuple[tuple[str, str], ...] = ()
    deep: tuple[tuple[str, str], ...] = ()

    def at(self, layer: int | None) -> dict[str, str]:
        """``{"source", "status", "how"}`` for hidden layer ``layer`` (None: network level)."""
        out = {"source": self.source, "status": self.status, "how": self.how}
        extra = {1: self.first, 2: self.second}.get(layer, self.deep if layer else ())
        out.update(dict(extra))
        return out


def _q(key, source, how, section, status=RIGOROUS, *, first=None, second=None, deep=None):
    return Quantity(key, source, how, section, status, tuple((first or {}).items()),
                    tuple((second or {}).items()), tuple((deep or {}).items()))


_EXACT_L1 = {"source": "paper Eq. 8", "how": "rho_sigma / W_max: f = id, so L_f = 1 (exact)"}

#: Per-hidden-layer quantities, in report order.
LAYER_QUANTITIES: tuple[Quantity, ...] = (
    # --- the paper, as written -----------------------------------------------------------------
    _q("W_max", "paper Eq. 6", "max_i ||(w_i, b_i)||_2: the bias absorbed into W (Section 2)",
       PAPER),
    _q("V_max", "paper Eq. 7", "max_j ||W^(l+1)_{j,:}||_1 (the next layer's bias excluded)",
       PAPER),
    _q("rho_sigma", "paper Eq. 5", "inf over real |u| <= W_max ||(f(0), 1)|| of the distance "
       "from u to the nearest singularity of sigma", PAPER),
    _q("rho_f", "paper Asm. 1 (lower bound)", "largest r for which the Jacobian chain proves "
       "f = h^(l-1) holomorphic on B_C(0, r) (Lemma 9's argument neuron by neuron)", PAPER,
       first={"source": "paper Asm. 1", "how": "inf: f is the identity"}),
    _q("L_f", "paper Eq. 4 (upper bound)", "at r = rho0: prod over upstream layers of "
       "||W^(m)||_2 max_i sup|sigma'| on the disc of radius ||w_i|| r Lbar_{m-1}(r) about "
       "u_i(0)", PAPER, first={"source": "paper Eq. 4", "how": "1: f is the identity"}),
    _q("L_f_radius", "paper Eq. 4", "the radius r at which L_f is reported (rho0)", PAPER),
    _q("rho", "paper Eq. 8 (lower bound)", "sup{r < rho_f : r W_max Lbar_f(r) < rho_sigma} with "
       "the upper bound Lbar_f >= L_f (bisection)", PAPER, first=_EXACT_L1),
    _q("assumption4", "paper Asm. 4", "R < rho (with rho's lower bound: proves Assumption 4)",
       PAPER),
    _q("rho0", "paper Thm 5", "working radius in (R, rho): given, or the grid point minimising "
       "k* (any choice is valid)", PAPER),
    _q("M_g", "paper Eq. 17 (upper bound)", "sigma's bound rule on |Im u| <= s0, |Re u| <= "
       "W_max ||(f(0), 1)|| + s0, s0 = W_max rho0 L_f(rho0): covers every ||w|| <= W_max, "
       "||z|| <= rho0", PAPER),
    _q("C0", "paper Eq. 20", "V_max M_g rho0 / (rho0 - R)", PAPER),
    _q("lam", "paper Eq. 20", "log(rho0 / R)", PAPER),
    _q("k_star", "paper Eq. 21/23", "least k >= 0 with (k+1) lam >= log(2 C0 / eps_layer) + "
       "d_in log(k + d_in) - log(d_in!)", PAPER),
    _q("D_k_star", "paper Eq. 18", "C(d_in + k_star, d_in)", PAPER),
    _q("k_cert", "paper Eq. 72", "least k >= 0 with (1 + D_k) C0 exp(-(k+1) lam) <= eps_layer",
       PAPER),
    _q("D_k", "paper Eq. 18", "C(d_in + k_cert, d_in) (the retained width is <= min(D_k, d_l))",
       PAPER),
    _q("coef_bound", "paper Lemma 10", "max_i ||C_{:,i}||_1 <= n <= min(D_k, d_l) at k_cert "
       "(exact maximum volume: |C_ij| <= 1)", PAPER),
    _q("bound_layer", "paper Eq. 71", "(1 + D_k) C0 exp(-(k_cert + 1) lam) <= eps_layer", PAPER),
    _q("Lambda", "paper Lemma 15", "L_sigma^{L-l-1} prod_{j=l+2}^{L} ||W^(j)||_{op,inf} of the "
       "original network (needs Assumption 14)", PAPER),
    _q("Lambda_step", "paper Lemma 15 + Eq. 65", "Lemma 15 after the downstream layers are "
       "compressed at the certified orders: ||W^(j)|| <= D_{k_{j-1}} ||W^(j,0)||", PAPER),
    _q("eps_layer", "paper Eq. 62", "eps / ((L - 1) Lambda_bar)", PAPER),
    _q("eq74", "paper Eq. 74", "D_{k_cert} < d_l: a strictly narrower layer is certified", PAPER),
    _q("eq75", "paper Eq. 75", "lam [(m! d_l)^{1/m} - m] >= log((1 + d_l) C0 / eps_layer), m = "
       "d_in (closed-form sufficient condition for Eq. 74)", PAPER),
    # --- ours ------------------------------------------------------------------------------------
    _q("rho_ours", "ours", "largest r for which the deviation chain proves every neuron of the "
       "layer holomorphic on B_C(0, r) (bisection)", OURS,
       first={"how": "rho_sigma / max_i ||w_i||_2 (the bias does not enter: the chain bounds "
                     "|Im u|)"}),
    _q("k_ours", "ours", "least k with min_r (1 + n_k(1+delta)) V_max M'(r) (R/r)^{k+1} <= "
       "eps_layer_ours (Schwarz form, r optimised per k, M' from the deviation chain, "
       "n_k = min(D_k, d_l))", OURS),
    _q("rho0_ours", "ours", "the radius r attaining k_ours's bound", OURS),
    _q("width_ours", "ours", "min(D_{k_ours}, d_l)", OURS),
    _q("Lambda_ours", "ours", "Lip^{L-l-1} prod_{m>l} n_m (1+delta) V_max^(m) at the orders "
       "k_ours", OURS),
    _q("eps_layer_ours", "ours", "eps / ((L - 1) Lambda_bar_ours)", OURS),
    _q("bound_ours", "ours", "Lambda_ours times the layer's Schwarz bound at k_ours", OURS),
    # --- Appendix G --------------------------------------------------------------------------
    _q("rho_pole", "paper Eq. 100", "min_j dist(b_j, singularities) / ||w_j||_2 over layer-1 "
       "neurons: the exact holomorphy radius of h^(1), i.e. rho_f of layer 2", APP_G,
       first={"source": "ours (Eq. 100's formula)", "how": "min_j dist(b_j, singularities) / "
              "||w_j||_2: the exact holomorphy radius of layer 1's own neurons"},
       deep={"source": "ours (Eq. 100's formula)", "status": ESTIMATE, "how": "Eq. 100's "
             "layer-1 radius: an upper bound on rho_f unless singularities cancel"}),
    _q("L_f_sampled", "sampled (paper Eq. 101)", "max over sampled z on the sphere |z| = R in "
       "C^d_in of ||J f(z)||_2 (complex chain rule)", APP_G, ESTIMATE,
       first={"source": "paper Eq. 4", "status": RIGOROUS, "how": "1: f is the identity"}),
    _q("q_hat", "sampled (paper Eq. 101)", "R W_max L_f_sampled / rho_sigma (>= 1: Assumption "
       "4 fails)", APP_G, ESTIMATE,
       first={"source": "paper Eq. 101", "status": RIGOROUS, "how": "R W_max / rho_sigma = "
              "R / rho (exact)"}),
    _q("r_violate", "sampled (paper App. G)", "smallest r on the grid jR/1000 with r W_max "
       "Lhat_f(r) / rho_sigma >= 1 (layer 2 only; None: not reached by R)", APP_G, ESTIMATE),
    _q("strip_ratio", "sampled (ours)", "max over sampled z on |z| = R of |Im u_i(z)| / "
       "rho_sigma", APP_G, ESTIMATE),
    # --- a posteriori (given a compressed network) -------------------------------------------
    _q("order", "given", "the compressed layer's Taylor order k", POST),
    _q("residual", "paper Eq. 41", "max |Z_K Kt - Z K| recorded in the CompressInfo", POST),
    _q("max_coef", "paper Lemma 10", "realised max |C_ij| (Lemma 10: <= 1 for exact maximum "
       "volume; <= 1 + delta for maxvol)", POST),
    _q("inflation", "paper Eq. 42", "realised ||Wt^(l+1)||_{op,inf} / ||W^(l+1)||_{op,inf} "
       "(Corollary 12: <= n)", POST),
    _q("bound_thm5", "paper Eq. 16", "max_j min_rho0 (||v_j||_1 + ||vt_j||_1) M_g rho0/(rho0 - R) "
       "(R/rho0)^{k+1} + sum_{|a|<=k} |e_a| R^|a| (the float matching residual)", POST),
    _q("Lambda_post_paper", "paper Lemma 15", "Lemma 15 with the compressed downstream kernels",
       POST),
    _q("K_tail", "ours", "order K after which the Cauchy/Schwarz tail takes over (worst "
       "component)", POST),
    _q("bound_post", "ours", "max_j min_{K, rho0} [sum_{|a|<=K} P_j R^j + tail_K(rho0)]: the "
       "error this layer adds to the next pre-activation, from its exact Taylor coefficients",
       POST),
    _q("Lambda_post", "ours", "Lip^{L-l-1} max_o (1^T |Kt_{l+2}| ... |Kt_L|)_o with the "
       "compressed kernels", POST),
    _q("contribution", "ours", "max_o of this layer's error propagated to the outputs", POST),
)

#: Network-level quantities, in report order.
TOP_QUANTITIES: tuple[Quantity, ...] = (
    _q("C_star", "paper Eq. 53", "max_l C0^(l)", PAPER),
    _q("lam_star", "paper Eq. 53", "min_l lam^(l)", PAPER),
    _q("Lambda_bar", "paper Lemma 19", "least Lambda >= 1 with psi(Lambda) <= Lambda, psi of "
       "Eq. 56 (fixed-point iteration from 1)", PAPER),
    _q("eps_uniform", "paper Eq. 62", "eps / ((L - 1) Lambda_bar)", PAPER),
    _q("k_bar", "paper Eq. 54", "k*(eps_uniform) with C_star, lam_star", PAPER),
    _q("width_bound", "paper Eq. 68", "Dbar(eps_uniform) = C(d_in + k_bar, d_in)", PAPER),
    _q("param_bound", "paper Eq. 69", "sum_{l=1}^{L} d'_l d'_{l-1} with d'_l = width_bound "
       "(weights; the paper absorbs biases)", PAPER),
    _q("non_vacuous", "paper Eq. 75", "Eq. 75 holds in every hidden layer", PAPER),
    _q("narrower", "paper Eq. 74", "Eq. 74 holds in every hidden layer", PAPER),
    _q("orders", "paper Eq. 72", "k_cert per hidden layer", PAPER),
    _q("widths", "paper Eq. 72", "min(D_{k_cert}, d_l) per hidden layer", PAPER),
    _q("bound_a_priori", "paper Thm 16", "sum_l Lambda_step (1 + D_k) C0 exp(-(k+1) lam) at the "
       "certified orders (<= eps)", PAPER),
    _q("Lambda_bar_ours", "ours", "max_l Lambda_ours at the fixed point orders -> Lambda -> "
       "budget", OURS),
    _q("eps_uniform_ours", "ours", "eps / ((L - 1) Lambda_bar_ours)", OURS),
    _q("orders_ours", "ours", "k_ours per hidden layer", OURS),
    _q("widths_ours", "ours", "min(D_{k_ours}, d_l) per hidden layer", OURS),
    _q("width_bound_ours", "ours", "max_l widths_ours", OURS),
    _q("param_bound_ours", "ours", "kernels and biases of [d_in, widths_ours, d_out]", OURS),
    _q("non_vacuous_ours", "ours", "param_bound_ours < the original parameter count", OURS),
    _q("bound_a_priori_ours", "ours", "sum_l bound_ours (<= eps)", OURS),
    _q("a_priori_at_orders", "paper Thm 16", "the paper's a priori bound at the given "
       "network's orders: sum_l Lambda_step (1 + D_k) min_rho0 C0 exp(-(k+1) lam)", POST),
    _q("a_priori_at_orders_ours", "ours", "our a priori bound at the given network's orders",
       POST),
    _q("a_posteriori_paper", "paper Thm 16 + Eq. 16", "sum_l Lambda_post_paper bound_thm5 for "
       "the given compressed network", POST),
    _q("a_posteriori_bound", "ours", "max over outputs of sum_l Lip^{L-l-1} E_l |Kt_{l+2}| ... "
       "|Kt_L|, E_l from the error's exact Taylor coefficients up to K plus a Cauchy/Schwarz "
       "tail", POST),
)

_LAYER_INDEX = {q.key: q for q in LAYER_QUANTITIES}
_TOP_INDEX = {q.key: q for q in TOP_QUANTITIES}

#: Per-layer keys of ``to_dict()["layers"][i]`` (scripts may rely on them).
LAYER_KEYS: tuple[str, ...] = tuple(_LAYER_INDEX)
#: Network-level keys of ``to_dict()``.
TOP_KEYS: tuple[str, ...] = tuple(_TOP_INDEX)


@dataclasses.dataclass(frozen=True)
class LayerCertificate:
    """The certificate's numbers for one hidden layer: the typed records of
    :mod:`~jaxcompress.certificates.records`, composed.

    Every key of :data:`LAYER_KEYS` is also a read-only property (``None`` when not computed:
    Assumption 4 fails, or no compressed network was given for the a posteriori keys);
    :attr:`values` maps the computed keys to their values. ``source[key]``, ``status[key]`` and
    ``how[key]`` say where each number comes from.
    """

    layer: int
    width: int
    paper: PaperLayer
    ours: OursLayer
    appendix_g: AppendixG
    a_posteriori: APosterioriLayer | None = None

    @property
    def values(self) -> Mapping[str, Any]:
        """The computed quantities by key (read-only), from the records."""
        out: dict[str, Any] = {}
        for record in (self.paper, self.ours, self.appendix_g, self.a_posteriori):
            if record is not None:
                out.update(entries(record))
        return types.MappingProxyType(out)

    def _meta(self, field: str) -> dict[str, str]:
        values = self.values
        return {k: _LAYER_INDEX[k].at(self.layer)[field] for k in LAYER_KEYS if k in values}

    @property
    def source(self) -> dict[str, str]:
        return self._meta("source")

    @property
    def status(self) -> dict[str, str]:
        return self._meta("status")

    @property
    def how(self) -> dict[str, str]:
        return self._meta("how")

    def to_dict(self) -> dict[str, Any]:
        values = self.values
        out: dict[str, Any] = {"layer": self.layer, "width": self.width}
        out.update({k: _plain(values.get(k)) for k in LAYER_KEYS})
        out.update({"source": self.source, "status": self.status, "how": self.how})
        return out


@dataclasses.dataclass(frozen=True)
class Certificate:
    """What the theory guarantees for a network on a domain, as numbers.

    The paper's quantities (its equations as written, or rigorous bounds of them in the right
    direction), ours (sharper, labelled ``"ours"``), the Appendix G diagnostics (per layer) and,
    when a compressed network is given, the a posteriori bounds and, where asked or where no
    other bound exists, ``verified``: :func:`jaxcompress.verify`'s proven bracket of the pair's
    sup error (a :class:`~jaxcompress.Verification`). The parts are typed records of
    :mod:`~jaxcompress.certificates.records` (``paper`` / ``ours`` / ``a_posteriori`` are None
    when that certificate does not exist). ``str(cert)`` is a readable table with a source
    column; :meth:`to_dict` gives JSON-ready values (keys :data:`LAYER_KEYS` per layer under
    ``"layers"``, :data:`TOP_KEYS` at the top level). Every key of :data:`TOP_KEYS` is also a
    read-only property, and :attr:`values` maps the computed ones to their values. Infinite
    radii are ``float('inf')`` (``json.dumps`` writes ``Infinity``).
    """

    activation: str
    sizes: tuple[int, ...]
    radius: float
    center: tuple[float, ...] | None
    eps: float
    delta: float
    layers: tuple[LayerCertificate, ...]
    num_params: int
    paper: PaperNetwork | None = None
    ours: OursNetwork | None = None
    a_posteriori: APosterioriNetwork | None = None
    notes: tuple[str, ...] = ()
    verified: Any = None

    @property
    def values(self) -> Mapping[str, Any]:
        """The computed network-level quantities by key (read-only), from the records."""
        out: dict[str, Any] = {}
        for record in (self.paper, self.ours, self.a_posteriori):
            if record is not None:
                out.update(entries(record))
        return types.MappingProxyType(out)

    def _meta(self, field: str) -> dict[str, str]:
        values = self.values
        return {k: getattr(_TOP_INDEX[k], field) for k in TOP_KEYS if k in values}

    @property
    def source(self) -> dict[str, str]:
        return self._meta("source")

    @property
    def status(self) -> dict[str, str]:
        return self._meta("status")

    @property
    def how(self) -> dict[str, str]:
        return self._meta("how")

    def to_dict(self) -> dict[str, Any]:
        values = self.values
        out: dict[str, Any] = {
            "activation": self.activation, "sizes": list(self.sizes), "radius": self.radius,
            "center": None if self.center is None else list(self.center), "eps": self.eps,
            "delta": self.delta, "num_params": self.num_params,
            "layers": [li.to_dict() for li in self.layers]}
        out.update({k: _plain(values.get(k)) for k in TOP_KEYS})
        out.update({"notes": list(self.notes), "source": self.source, "status": self.status,
                    "how": self.how,
                    "verified": None if self.verified is None else self.verified.to_dict()})
        return out

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        return format_certificate(self)


def _key_property(q: Quantity) -> property:
    return property(lambda self: self.values.get(q.key),
                    doc=f"{q.source} ({q.status}; None when not computed): ``{q.how}``")


# Every report key is a read-only property of its record: LayerCertificate.W_max,
# Certificate.orders, ... (the keys are the records' field names; tests/test_certify.py checks
# that they coincide with LAYER_KEYS / TOP_KEYS).
for _q_ in LAYER_QUANTITIES:
    setattr(LayerCertificate, _q_.key, _key_property(_q_))
for _q_ in TOP_QUANTITIES:
    setattr(Certificate, _q_.key, _key_property(_q_))
del _q_


def _plain(v):
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "NO"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join("-" if x is None else str(x) for x in v) + "]"
    v = float(v)
    if math.isinf(v):
        return "inf"
    if math.isnan(v):
        return "nan"
    return f"{v:.3e}"


_SECTION_TITLES = {PAPER: "the paper's quantities (Wang, Wang & Ziyin 2026)",
                   OURS: "ours (sharper; proofs in jaxcompress.certificates)",
                   APP_G: "Appendix G diagnostics",
                   POST: "a posteriori (the given compressed network)"}


def format_certificate(c: Certificate) -> str:
    center = "0" if c.center is None else str([round(x, 4) for x in c.center])
    lines = [f"Certificate: {c.activation} MLP {list(c.sizes)} on the ball |x - c| <= "
             f"{c.radius:g} (c = {center}), eps = {c.eps:g}, maxvol delta = {c.delta:g}"]
    width = 18 + 30 + 10 + 12 * len(c.layers)
    for section in (PAPER, OURS, APP_G, POST):
        qs = [q for q in LAYER_QUANTITIES if q.section == section
              and any(q.key in li.values for li in c.layers)]
        tops = [q for q in TOP_QUANTITIES if q.section == section and q.key in c.values]
        if not qs and not tops:
            continue
        lines.append("")
        lines.append(f"== {_SECTION_TITLES[section]}")
        if qs:
            lines.append(f"{'quantity':<18}{'source':<30}{'status':<10}" + "".join(
                f"{'layer ' + str(li.layer):>12}" for li in c.layers))
            lines.append("-" * width)
        for q in qs:
            metas = [(q.at(li.layer)["source"], q.at(li.layer)["status"]) for li in c.layers]
            source, status = metas[-1]
            if len(set(metas)) > 1:  # e.g. exact in layer 1, a bound deeper: see "how" below
                source, status = source + " *", "mixed" if len(
                    {m[1] for m in metas}) > 1 else status
            lines.append(f"{q.key:<18}{source:<30}{status:<10}" + "".join(
                f"{_fmt(li.values.get(q.key)):>12}" for li in c.layers))
        for q in tops:
            lines.append(f"{q.key:<24}{q.source:<24}{_fmt(c.values.get(q.key)):>16}")
    if c.layers:
        lines.append("(* the source differs between layers: see below)")
    if c.verified is not None:
        v = c.verified
        verdict = {"certified": f"<= eps = {c.eps:g}: certified",
                   "refuted": f"> eps = {c.eps:g} at x = {list(np.round(v.argmax, 6))}"}.get(
            v.status, v.status)
        lines += ["", "== proven by jc.verify (ours: Taylor models of the two networks' "
                  "difference, branch and bound over the domain)",
                  f"sup |F - F~| in [{v.lower:.3e}, {v.upper:.3e}] ({verdict}; {v.boxes:,} "
                  f"boxes, {v.seconds:.1f} s; rigorous up to floating point)"]
    for note in c.notes:
        lines.append(f"note: {note}")
    lines.append("")
    lines.append("how each entry is obtained:")
    for q in LAYER_QUANTITIES:
        variants: dict[tuple[str, str, str], list[int]] = {}
        for li in c.layers:
            if q.key in li.values:
                m = q.at(li.layer)
                variants.setdefault((m["source"], m["status"], m["how"]), []).append(li.layer)
        for (source, status, text), which in variants.items():
            scope = "" if len(variants) == 1 else f" (layer {', '.join(map(str, which))})"
            lines.append(f"  {q.key}{scope} [{source}; {status}]: {text}")
    for q in TOP_QUANTITIES:
        if q.key in c.values:
            lines.append(f"  {q.key} [{q.source}; {q.status}]: {q.how}")
    return "\n".join(lines)
