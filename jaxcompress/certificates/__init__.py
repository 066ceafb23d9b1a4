"""Certificates: the compression theorem's constants as numbers.

``jc.certify(params, activation=..., domain=..., eps=...)`` returns a
:class:`Certificate` that holds, for every hidden layer and for the network,

* the paper's quantities (Wang, Wang & Ziyin 2026), computed as its equations are written
  (:mod:`~jaxcompress.certificates.paper`; where an equation is a supremum that cannot be
  computed, a rigorous bound in the direction that keeps the theorem valid, labelled so);
* our own sharper bounds, labelled ``"ours"`` (:mod:`~jaxcompress.certificates.chain`,
  :mod:`~jaxcompress.certificates.a_priori`, :mod:`~jaxcompress.certificates.a_posteriori`);
* the paper's Appendix G diagnostics, sampled (:mod:`~jaxcompress.certificates.diagnostics`).

Modules: ``bounds`` (the closed forms of the per-activation bound rules, attached to the
activation records of :mod:`jaxcompress.activations`), ``chain`` (our deviation chain), ``paper``
(the paper's formulas), ``prepared`` (the eps-independent setup), ``a_priori``,
``a_posteriori``, ``diagnostics`` (Appendix G), ``records`` (the typed, frozen records of each
part), ``report`` (the report composing them, each quantity declared once), ``certificate``
(:func:`certify`).

References:
  Wang, Wang & Ziyin (2026), "Width-Independent Compressibility of Deep Neural Networks",
  arXiv 2608.21752: Theorems 5, 6, 16, 22; Lemmas 9, 10, 15, 19; Appendices C, D, G.
"""

from jaxcompress.certificates.bounds import BoundRule, get_bound_rule, register_bound_rule
from jaxcompress.certificates.certificate import certify
from jaxcompress.certificates.records import (
    APosterioriLayer,
    APosterioriNetwork,
    AppendixG,
    OursLayer,
    OursNetwork,
    PaperBudget,
    PaperLayer,
    PaperLayerBudget,
    PaperNetwork,
)
from jaxcompress.certificates.report import (
    LAYER_KEYS,
    TOP_KEYS,
    Certificate,
    LayerCertificate,
)

__all__ = [
    "LAYER_KEYS",
    "TOP_KEYS",
    "APosterioriLayer",
    "APosterioriNetwork",
    "AppendixG",
    "BoundRule",
    "Certificate",
    "LayerCertificate",
    "OursLayer",
    "OursNetwork",
    "PaperBudget",
    "PaperLayer",
    "PaperLayerBudget",
    "PaperNetwork",
    "certify",
    "get_bound_rule",
    "register_bound_rule",
]
