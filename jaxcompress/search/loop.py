"""The one loop of every search: a proposer's candidates, built, judged and recorded (ours).

A *proposer* is a generator function ``proposer(search)``: it yields *proposals* (callables
that build the next :class:`~jaxcompress.search.candidates.Candidate`, usually from
``search.candidates``), receives each one's :class:`Trial` (the judge's figure and whether it
meets ``eps``) and returns an :class:`Outcome` (the trial it chose, and why it stopped).
:meth:`Search.run` is the loop: before each proposal the clock's budget is checked
(:mod:`jaxcompress.stopping`); a spent budget is thrown into the proposer at its ``yield``, so
that it returns what it has. A proposer that raises :class:`~jaxcompress.stopping.Stopped`
(its errors stalled, no order left) ends with the trial of the best figure.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Generator
from typing import Any

from jaxcompress._checks import describe
from jaxcompress.mlp import leaf_count
from jaxcompress.search.candidates import Candidate, Candidates
from jaxcompress.search.judges import Judge
from jaxcompress.stopping import Clock, Stop, Stopped, best_index

__all__ = ["Outcome", "Proposer", "Search", "Trial", "reporter"]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One judged candidate: its ``figure`` (after polishing, when polished; ``before`` the
    figure before), whether it meets ``eps`` (``ok``), the judge's ``evidence`` and the
    seconds it took to build and judge."""

    candidate: Candidate
    figure: float
    ok: bool
    before: float | None = None
    evidence: Any = None
    seconds: float = 0.0

    @property
    def num_params(self) -> int:
        return leaf_count(self.candidate.leaves)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a search ended with: the ``chosen`` trial (``None``: none, e.g. a frontier) and
    the :class:`~jaxcompress.stopping.Stop` saying why it stopped."""

    chosen: Trial | None
    stop: Stop


#: A proposer: ``proposer(search)`` yields proposals, receives trials, returns an Outcome.
Proposer = Callable[["Search"], Generator[Callable[[], Candidate], Trial, Outcome]]


class Search:
    """One search: the teacher's ``candidates``, the ``judge``, the target ``eps`` and the
    ``clock``; ``emit(line)`` records a step in ``history`` and reports it as ``progress``
    asks (:func:`reporter`). ``trials``: every candidate judged, in order."""

    def __init__(self, candidates: Candidates, judge: Judge, eps: float, clock: Clock, *,
                 progress=None, where: str = "search"):
        self.candidates, self.judge, self.eps, self.clock = candidates, judge, eps, clock
        self.history: list[str] = []
        self.emit = reporter(progress, self.history, where)
        self.trials: list[Trial] = []

    def run(self, proposer: Proposer) -> Outcome:
        """Run ``proposer`` to its end."""
        gen = proposer(self)
        trial = None
        while True:
            try:
                proposal = gen.send(trial)
                try:
                    self.clock.check()
                except Stopped as why:   # the budget: the proposer returns what it has
                    gen.throw(why)
                    raise RuntimeError("a proposer proposed again after the budget was "
                                       "spent") from why
            except StopIteration as done:
                if not isinstance(done.value, Outcome):
                    raise TypeError(f"a proposer must return an Outcome, got "
                                    f"{describe(done.value)}") from None
                return done.value
            except Stopped as why:
                return self.stopped(why)
            trial = self.judged(proposal)

    @functools.cached_property
    def teacher_figure(self) -> float:
        """The teacher's own figure (judged once)."""
        return self.judge.teacher_figure(self.candidates)

    def judged(self, proposal: Callable[[], Candidate]) -> Trial:
        """Build the proposal's candidate, judge it, record it."""
        t0 = time.perf_counter()
        verdict = self.judge.judge(proposal(), self.candidates)
        self.clock.tick()
        trial = Trial(verdict.candidate, verdict.figure,
                      self.judge.within(verdict.figure, self.eps), verdict.before,
                      verdict.evidence, time.perf_counter() - t0)
        self.trials.append(trial)
        return trial

    def best(self, trials: list[Trial] | None = None) -> Trial:
        """The trial of the best figure (the first on ties)."""
        trials = self.trials if trials is None else trials
        return trials[best_index([self.judge.loss(t.figure) for t in trials])]

    def stopped(self, why: Stopped, note: Callable[[Trial], str] | None = None,
                trials: list[Trial] | None = None, *, quiet: bool = False) -> Outcome:
        """The outcome of a search stopped before its target: the trial of the best figure (of
        ``trials``, default all), reported with ``note(best)`` after the reason (``quiet``:
        not reported)."""
        best = self.best(trials)
        if not quiet:
            self.emit(f"stopped ({why.status}): {why.reason}" + (note(best) if note else ""))
        return Outcome(best, self.clock.stop(why.status, why.reason, met=False))

    def met(self, trial: Trial, note: str = "") -> Outcome:
        """The outcome of a search that met its target with ``trial``."""
        return Outcome(trial, self.clock.stop("met", "the target was met" + note, met=True))

    def cut_short(self, why: Stopped, trial: Trial, what: str, detail: str) -> Outcome:
        """The outcome of a search stopped after ``trial`` met the target: ``trial``."""
        self.emit(f"stopped ({why.status}): {why.reason}; the {what} was cut short{detail}")
        return Outcome(trial, self.clock.stop(why.status, f"{why.reason}; the {what} was cut "
                                              "short (the target was met)", met=True))

    def stall(self, trials: list[Trial]) -> None:
        """:class:`~jaxcompress.stopping.Stopped` when the figures of ``trials`` (one per
        order) stopped improving (the clock's stall rule)."""
        self.clock.check_stall([self.judge.loss(t.figure) for t in trials], self.judge.name,
                               [t.figure for t in trials])


def reporter(progress, history: list[str], where: str) -> Callable[[str], None]:
    """``emit(line)``: record a step and report it as ``progress`` asks (``None``: quiet,
    ``True``: stderr, a callable: called with each line)."""
    if progress is True:
        def report(line):
            print(f"[{where}] {line}", file=sys.stderr, flush=True)
    elif callable(progress):
        report = progress
    elif progress in (None, False):
        report = None
    else:
        raise TypeError(f"{where}: progress must be None, True or a callable, got "
                        f"{describe(progress)}")

    def emit(line: str) -> None:
        history.append(line)
        if report is not None:
            report(line)

    return emit
