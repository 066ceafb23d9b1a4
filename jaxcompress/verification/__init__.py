"""Verification: a proven bracket on ``sup |F_a - F_b|`` over a domain, for any two programs.

The second interpreter of the library's programs (the first is the trace's): the jaxprs of two
callables are interpreted on Taylor models over input boxes, rule by primitive, their
difference bounded as a difference, and a batched branch and bound over boxes narrows the
bracket until it converges, decides a tolerance, or runs out of time.

Modules, one concept each:

* :mod:`~jaxcompress.verification.api`: :func:`verify`, the verb;
* :mod:`~jaxcompress.verification.result`: :class:`Verification`, what it returns;
* :mod:`~jaxcompress.verification.taylor`: Taylor-model arithmetic with rounding bounds;
* :mod:`~jaxcompress.verification.smooth`: smooth univariate functions (series, derivative
  enclosures, composition);
* :mod:`~jaxcompress.verification.rules`: the per-primitive rule registry (:func:`register_rule`);
* :mod:`~jaxcompress.verification.interpret`: the jaxpr interpreter;
* :mod:`~jaxcompress.verification.program`: the traced pair of programs and the per-box bounds;
* :mod:`~jaxcompress.verification.regions`: boxes and balls;
* :mod:`~jaxcompress.verification.search`: the branch and bound.
"""

from jaxcompress.verification.api import DEFAULT_ORDER, verify
from jaxcompress.verification.interpret import UnsupportedPrimitiveError
from jaxcompress.verification.result import Verification
from jaxcompress.verification.rules import NoBoundRule, RuleContext, bound_rules, register_rule
from jaxcompress.verification.smooth import Smooth
from jaxcompress.verification.taylor import Pred, TaylorModel

__all__ = ["DEFAULT_ORDER", "NoBoundRule", "Pred", "RuleContext", "Smooth", "TaylorModel",
           "UnsupportedPrimitiveError", "Verification", "bound_rules", "register_rule",
           "verify"]
