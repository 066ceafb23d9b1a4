"""How small can it get: one search loop, in values that plug into it (ours).

Every question of the form "the smallest network that still does its job" —
:func:`compress_to_tolerance` with each strategy, :func:`frontier`, and the command line's
``compress --eps`` and ``shrink`` — runs one loop (:meth:`loop.Search.run`) over three values:

* a **proposer** (:mod:`~jaxcompress.search.proposers`) says which candidates come next, given
  what was judged so far: uniform orders, per-set orders, narrower sets, a grid of methods
  times orders or widths;
* a **judge** (:mod:`~jaxcompress.search.judges`) says whether a candidate keeps the task and at
  what figure: the paper's certificate, a measured metric (sup, relative L2, PSNR, your callable)
  with optional polishing, or :func:`jaxcompress.verify`'s proof; your own is a
  :class:`Judge` subclass;
* one **candidates** object (:mod:`~jaxcompress.search.candidates`) builds the candidates and
  owns the padding to buckets, the masks and the compiled programs.

The result is one :class:`ToleranceResult` (the chosen network, its figure, how it was judged,
why the search stopped and the :class:`Frontier` of every candidate judged); :func:`frontier`
returns the :class:`Frontier` itself. A strategy (:class:`Certified`, :class:`MeasuredOrders`,
:class:`Measured`, :class:`Verified`) is a judge and the proposers it runs.
"""

from jaxcompress.search.candidates import Candidate, Candidates
from jaxcompress.search.frontier import Frontier, FrontierRow
from jaxcompress.search.judges import Judge, Verdict
from jaxcompress.search.loop import Outcome, Search, Trial
from jaxcompress.search.strategies import (
    Certified,
    Measured,
    MeasuredOrders,
    PolishSettings,
    ToleranceNotMet,
    ToleranceResult,
    ToleranceStrategy,
    Verified,
    compress_to_tolerance,
    frontier,
    order_advice,
)

__all__ = ["Candidate", "Candidates", "Certified", "Frontier", "FrontierRow", "Judge",
           "Measured", "MeasuredOrders", "Outcome", "PolishSettings", "Search",
           "ToleranceNotMet", "ToleranceResult", "ToleranceStrategy", "Trial", "Verdict",
           "Verified", "compress_to_tolerance", "frontier", "order_advice"]
