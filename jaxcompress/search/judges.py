r"""Judges: whether a candidate keeps the task, and at what figure (ours).

A judge maps a candidate to one number, its *figure*, and says whether it meets the target
``eps`` (``figure <= eps``; ``>= eps`` for a score, :attr:`Judge.higher_is_better`). Built in:
:class:`Metric` (the sup, relative L2 or PSNR distance to the teacher, or your callable),
:class:`Polished` (another judge after :func:`jaxcompress.polish`), :class:`Certificate` (the
a posteriori certificate) and :class:`Proof` (:func:`jaxcompress.verify`). Your own subclasses
:class:`Judge` (``docs/shrink.md`` has an example).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from jaxcompress._checks import describe
from jaxcompress.certificates.bounds import has_bound_rule
from jaxcompress.certificates.certificate import certify, certify_prepared
from jaxcompress.certificates.prepared import Prepared
from jaxcompress.certificates.report import Certificate as _Report
from jaxcompress.measure import network_sup_error
from jaxcompress.mlp import param_count
from jaxcompress.search.candidates import Candidate, Candidates
from jaxcompress.verification import verify

__all__ = ["METRICS", "REL_L2_POINTS", "Certificate", "Judge", "Metric", "Polished", "Proof",
           "Verdict", "as_judge", "certificate", "proof"]

#: Fixed Sobol points of the domain for ``"rel_l2"`` and ``"psnr"``.
REL_L2_POINTS = 4096
#: The metrics named by a string.
METRICS = ("sup", "rel_l2", "psnr")


class Verdict(NamedTuple):
    """A judge's answer: the ``figure``, the candidate judged (polished, for
    :class:`Polished`), the figure ``before`` polishing and the judge's ``evidence`` (a
    certificate, a proof)."""

    figure: float
    candidate: Candidate
    before: float | None = None
    evidence: Any = None


class Judge:
    """Whether a candidate keeps the task, and at what figure.

    A subclass defines ``__call__(f) -> float`` (``f`` the candidate as a batched function
    ``f(x)``); a built-in judge overrides :meth:`judge`, which sees the candidate and the
    teacher's :class:`~jaxcompress.search.candidates.Candidates`. NaN counts as the worst figure.
    """

    #: how tables and messages name the figure
    name: str = "error"
    #: a score (``True``: larger figures are better, ``eps`` the least one kept) or an error
    higher_is_better: bool = False

    def __call__(self, f) -> float:
        raise NotImplementedError(f"{type(self).__name__}: a judge defines __call__(f) -> "
                                  "float (f the candidate as a batched function f(x))")

    def judge(self, cand: Candidate, cands: Candidates) -> Verdict:
        """The figure of ``cand``."""
        return Verdict(self._number(self(cands.function(cand.figure_leaves))), cand)

    def teacher_figure(self, cands: Candidates) -> float:
        """The teacher's own figure (what no compression can beat, by measurement)."""
        return self._number(self(cands.function(cands.teacher)))

    def _number(self, value) -> float:
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"metric {self.name} must return one number, got "
                            f"{describe(value)}") from None
        if math.isnan(value):
            return -math.inf if self.higher_is_better else math.inf
        return value

    def within(self, figure: float, eps: float) -> bool:
        """Whether ``figure`` meets ``eps``."""
        return figure >= eps if self.higher_is_better else figure <= eps

    def loss(self, figure: float) -> float:
        r"""``figure`` as a positive loss, lower is better and relative changes meaningful (what
        the stall rule compares and the best candidate minimises): an error itself, a score
        in dB (PSNR) as the normalised MSE :math:`10^{-\mathrm{figure}/10}`; a judge of
        another score overrides it (e.g. ``1 - share`` for a share of points kept)."""
        return 10.0 ** (-figure / 10.0) if self.higher_is_better else figure


class Metric(Judge):
    r"""A metric by name or a callable ``metric(f) -> float`` of the candidate as a batched
    function ``f(x)`` (lower is better):

    * ``"sup"``: :func:`jaxcompress.sup_error` against the teacher (uniform samples plus
      projected gradient ascent; ``key``, ``n_samples``, ``local_search_steps``);
    * ``"rel_l2"``: :math:`\|F - \tilde F\|_2 / \|F\|_2` over :data:`REL_L2_POINTS` fixed
      Sobol points of the domain (the error estimate's stretch of the sequence, none of them a
      polishing point);
    * ``"psnr"``: :func:`jaxcompress.measure.psnr` against the teacher on the same points, in
      dB (higher is better).

    ``teacher``: the leaves measured against (default the candidates' strongly typed teacher).
    """

    def __init__(self, metric="sup", *, key=None, n_samples: int = 4096,
                 local_search_steps: int = 100, teacher=None):
        self.metric = metric
        self.name = metric if isinstance(metric, str) else getattr(
            metric, "__name__", type(metric).__name__)
        self.higher_is_better = metric == "psnr"
        self.key, self.n_samples, self.local_search_steps = key, n_samples, local_search_steps
        self.teacher = teacher

    def __call__(self, f) -> float:
        return self.metric(f)

    def judge(self, cand: Candidate, cands: Candidates) -> Verdict:
        leaves = list(cand.figure_leaves)
        teacher = cands.teacher if self.teacher is None else self.teacher
        if self.metric == "sup":
            value = network_sup_error(cands.plan, teacher, leaves, cands.domain, self.key,
                                      n_samples=self.n_samples,
                                      local_search_steps=self.local_search_steps)
        elif self.metric in ("rel_l2", "psnr"):
            value = cands.on_points(teacher, leaves, self.metric, REL_L2_POINTS)
        else:
            return super().judge(cand, cands)
        return Verdict(self._number(value), cand)

    def teacher_figure(self, cands: Candidates) -> float:
        if self.metric in ("sup", "rel_l2"):
            return 0.0
        if self.metric == "psnr":
            return math.inf
        return super().teacher_figure(cands)


class Polished(Judge):
    """``judge`` of the candidate polished towards the teacher (:func:`jaxcompress.polish`
    with ``settings``: ``settings.steps`` for a compression of the teacher,
    ``settings.shrink_steps`` for a step of the width search), padded and masked in the
    candidate's space; the verdict's ``before`` is the figure before polishing."""

    def __init__(self, judge: Judge, settings):
        self.inner, self.settings = judge, settings
        self.name, self.higher_is_better = judge.name, judge.higher_is_better

    def judge(self, cand: Candidate, cands: Candidates) -> Verdict:
        before = self.inner.judge(cand, cands).figure
        steps = self.settings.shrink_steps if cand.stage == "shrink" else self.settings.steps
        polished = cands.polish(cand, self.settings, steps)
        after = self.inner.judge(polished, cands)
        return after._replace(before=before)

    def teacher_figure(self, cands: Candidates) -> float:
        return self.inner.teacher_figure(cands)

    def within(self, figure: float, eps: float) -> bool:
        return self.inner.within(figure, eps)

    def loss(self, figure: float) -> float:
        return self.inner.loss(figure)


class Certificate(Judge):
    """The a posteriori certificate of a candidate of per-set orders (exact, at its own widths):
    the smaller of ours and the paper's Theorem 16 with Eq. 16 (both rigorous, :func:`proof`);
    the report is the verdict's evidence. For a chain of dense layers with one analytic
    activation (``ValueError`` for another network)."""

    name = "a posteriori bound"

    def __init__(self, cands: Candidates, eps: float, delta: float):
        net = cands.net
        if not net.chain:
            raise ValueError("compress_to_tolerance: the certificate is the paper's, for a chain "
                             "of dense layers with one analytic activation; this network is not "
                             "one:\n  " + "\n  ".join(net.why_not)
                             + "\nuse jc.MeasuredOrders() or jc.Measured()")
        self.prepared = Prepared(net.lower(), net.activation, cands.domain)
        self.sizes, self.eps, self.delta = cands.plan.sizes, eps, delta

    def judge(self, cand: Candidate, cands: Candidates) -> Verdict:
        rep = certify_prepared(self.prepared, eps=self.eps, delta=self.delta,
                               compressed=cands.plan.chain.lower(cand.leaves), info=cand.info)
        return Verdict(proof(rep)[0], cand, evidence=rep)

    def teacher_figure(self, cands: Candidates) -> float:
        return 0.0

    def a_priori(self, orders_from: str, radius: float) -> tuple[list[int], str, str]:
        """The a priori orders of the paper's certificate (``k_cert``, Eq. 72, at the uniform
        budget of Eq. 62 and Lemma 19) or ours (``k_ours``) as ``orders_from`` says
        (``"best"``: the smaller network by parameter count, the paper's on ties), whose they
        are and the line that says so; a ``ValueError`` naming the layer and ``rho`` against
        the domain's radius ``R`` where no certificate exists (Assumption 4)."""
        rep = certify_prepared(self.prepared, eps=self.eps, delta=self.delta)
        paper_ok = rep.orders is not None and all(k is not None for k in rep.orders)
        ours_ok = rep.orders_ours is not None
        source = orders_from
        if orders_from == "best":
            source = "paper" if paper_ok else "ours"
            if paper_ok and ours_ok:
                paper_n, ours_n = (param_count([self.sizes[0], *w, self.sizes[-1]])
                                   for w in (rep.widths, rep.widths_ours))
                source = "paper" if paper_n <= ours_n else "ours"
        if not (paper_ok if source == "paper" else ours_ok):
            which = "the paper's" if source == "paper" else "our"
            for li in rep.layers:
                rho = li.rho if source == "paper" else li.rho_ours
                if not radius < rho:
                    raise ValueError(
                        f"compress_to_tolerance: {which} certificate fails in hidden layer "
                        f"{li.layer}: its holomorphy radius rho = {rho:.4g} is not larger than "
                        f"the domain radius R = {radius:g} (Assumption 4; q_hat = "
                        f"{li.q_hat:.3g}); no certificate exists. Use jc.MeasuredOrders(), a "
                        "smaller domain, or smaller weights.")
            raise ValueError(f"compress_to_tolerance: {which} certificate gives no orders: "
                             + "; ".join(rep.notes) + "; use jc.MeasuredOrders() or a larger eps")
        if source == "paper":
            return [int(k) for k in rep.orders], source, (
                f"a priori orders: the paper's k_cert (Eq. 72) = {[int(k) for k in rep.orders]} "
                f"(budget eps_l = {rep.eps_uniform:.3g} (Eq. 62), Lambda_bar = "
                f"{rep.Lambda_bar:.3g} (Lemma 19))")
        return [int(k) for k in rep.orders_ours], source, (
            f"a priori orders: ours k_ours = {[int(k) for k in rep.orders_ours]} (budget eps_l = "
            f"{rep.eps_uniform_ours:.3g}, Lambda_bar_ours = {rep.Lambda_bar_ours:.3g})")

    @staticmethod
    def shares(rep: _Report) -> list[float]:
        """Each layer's share of the bound :func:`proof` takes."""
        if proof(rep)[1] == "ours":
            return [li.contribution for li in rep.layers]
        return [(li.Lambda_post_paper or 0.0) * (li.bound_thm5 or 0.0) for li in rep.layers]


def certificate(cands: Candidates, cand: Candidate, eps: float) -> _Report | None:
    """The :func:`jaxcompress.certify` report of a candidate at its own widths, where the
    teacher is a chain whose activation has a bound rule (else ``None``)."""
    net = cands.net
    if not (net.chain and has_bound_rule(net.activation)):
        return None
    return certify(net.lower(), activation=net.activation, domain=cands.domain, eps=eps,
                   compressed=cands.plan.chain.lower(cand.leaves), info=cand.info)


def proof(rep: _Report) -> tuple[float, str]:
    """The smaller of the two a posteriori certificates (both rigorous) and whose it is."""
    cands = [(rep.a_posteriori_bound, "ours"), (rep.a_posteriori_paper, "paper Thm 16 + Eq. 16")]
    cands = [(b, w) for b, w in cands if b is not None]
    return min(cands) if cands else (float("inf"), "none")


class Proof(Judge):
    """The upper end of :func:`jaxcompress.verify`'s bracket of ``sup |F - F~|`` over the
    domain (``max_seconds`` for each proof; a proof that times out counts its upper bound);
    the :class:`~jaxcompress.Verification` is the verdict's evidence."""

    name = "proven sup"

    def __init__(self, teacher, eps: float, max_seconds: float):
        self.teacher, self.eps, self.max_seconds = teacher, eps, max_seconds

    def judge(self, cand: Candidate, cands: Candidates) -> Verdict:
        res = verify(self.teacher, cands.function(cand.figure_leaves), domain=cands.domain,
                     eps=self.eps, max_seconds=self.max_seconds)
        return Verdict(self._number(res.upper), cand, evidence=res)

    def teacher_figure(self, cands: Candidates) -> float:
        return 0.0   # the teacher is 0 from itself: no proof of it to compile


def as_judge(metric, where: str, **sup) -> Judge:
    """``metric=`` of a search as a judge: a :class:`Judge`, a name of :data:`METRICS` or a
    callable ``metric(f) -> float`` (``sup``: the sup measurement's settings)."""
    if isinstance(metric, Judge):
        return metric
    named = isinstance(metric, str)
    if metric not in METRICS if named else not callable(metric):
        raise (ValueError if named else TypeError)(
            f"{where}: metric must be 'sup', 'rel_l2', 'psnr', a callable metric(f) -> float "
            f"(f the candidate as a batched function f(x)) or a jc.search.Judge, got "
            f"{repr(metric) if named else describe(metric)}")
    return Metric(metric, **sup)
