r"""When a search stops: its time budget, the stall rule, and its progress (ours).

Every search of the library (:func:`jaxcompress.compress_to_tolerance` with each strategy,
:func:`jaxcompress.frontier`, and ``jaxcompress compress --eps`` / ``jaxcompress shrink``)
measures candidates one after another; this module is the one place that decides when it
stops early and what it says while it runs. A search holds one :class:`Clock` and

* calls :meth:`Clock.check` before each candidate after the first: once ``max_seconds`` have
  passed it stops with status ``"budget"`` (the budget is checked *between* candidates: one
  that has started is finished, so a search can overrun its budget by one candidate's time,
  and a budget of ``0`` means "stop after the first candidate");
* calls :meth:`Clock.tick` after each candidate, and :meth:`Clock.check_stall` with the errors
  of its orders so far: when they stopped improving (:class:`StallRule`) it stops with status
  ``"stalled"``;
* reports each step through :meth:`Clock.eta`: the time so far, the steps left and, from the
  mean time of a step so far (the first left out once there are others: it compiles what the
  later ones reuse), an estimate of the time they take.

Whatever stopped it, the search returns the best network it found with a :class:`Stop`: its
``status`` (``"met"``: the target was met and the search ran to its end; ``"budget"``,
``"stalled"``, ``"out_of_orders"``; ``"complete"`` for a frontier measured whole), whether the
network returned meets the target (``met``; a search cut short after it met the target returns
the smallest network that met it so far) and a sentence saying why.

**The stall rule.** With errors :math:`e_0, e_1, \ldots, e_j` of the orders tried so far (a
metric where higher is better, such as PSNR, is compared through its loss: the normalised MSE
:math:`10^{-\mathrm{PSNR}/10}`), the search has stalled when the best of the last :math:`N`
is not at least a fraction :math:`X` below the best before them:

.. math::
   \min_{j - N < i \le j} e_i \;>\; (1 - X) \min_{i \le j - N} e_i,

:math:`N` = :attr:`StallRule.orders` (default 3) and :math:`X` = :attr:`StallRule.improvement`
(default 0.1). Geometric convergence :math:`e_k \propto q^k` (the paper's Theorem 5) passes it
for any :math:`q < 0.9^{1/3} \approx 0.965`; an error at the floating-point floor, or one that
grows with the order (Assumption 4 failing), stops after :math:`N` orders.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from jaxcompress._checks import describe, finite_number

__all__ = ["STATUSES", "Clock", "StallRule", "Stop", "Stopped", "check_max_seconds"]

#: Why a search stopped (:attr:`Stop.status`).
STATUSES = ("met", "budget", "stalled", "out_of_orders", "complete")


@dataclasses.dataclass(frozen=True)
class StallRule:
    """When a search over orders has stopped improving (the module docstring's rule).

    Args:
      orders: :math:`N`, the orders without improvement that stop the search (``>= 1``).
      improvement: :math:`X`, the relative improvement over the best error before them that
        counts as progress (in ``[0, 1)``).
    """

    orders: int = 3
    improvement: float = 0.1

    def __post_init__(self):
        if isinstance(self.orders, bool) or not isinstance(self.orders, int) or self.orders < 1:
            raise ValueError(f"StallRule: orders must be an int >= 1, got {self.orders!r}")
        if not finite_number(self.improvement) or not 0 <= float(self.improvement) < 1:
            raise ValueError(f"StallRule: improvement must be a number in [0, 1), got "
                             f"{self.improvement!r}")

    def stalled(self, errors: Sequence[float]) -> bool:
        """Whether the errors of the orders so far (lower is better; NaN counts as ``inf``)
        have stalled."""
        errs = [math.inf if math.isnan(e) else float(e) for e in errors]
        n = self.orders
        if len(errs) <= n:
            return False
        before, recent = min(errs[:-n]), min(errs[-n:])
        if math.isinf(before):
            return math.isinf(recent)     # nothing finite yet: no progress either way
        return not recent <= (1 - self.improvement) * before

    def describe(self) -> str:
        return (f"no relative improvement of at least {self.improvement:g} over the last "
                f"{self.orders} orders")


def check_stall(stall: Any, where: str) -> StallRule | None:
    """``stall=`` of a search: a :class:`StallRule`, ``True`` (the defaults) or ``None`` /
    ``False`` (never stop for a stall)."""
    if stall is None or stall is False:
        return None
    if stall is True:
        return StallRule()
    if not isinstance(stall, StallRule):
        raise TypeError(f"{where}: stall must be a jc.stopping.StallRule(...), True or None, "
                        f"got {describe(stall)}")
    return stall


def check_max_seconds(value: Any, where: str, name: str = "max_seconds") -> float | None:
    """``max_seconds=`` of a search: ``None`` (no limit) or a number ``>= 0`` (``0``: stop
    after the first candidate)."""
    if value is None:
        return None
    if not finite_number(value) or float(value) < 0:
        raise ValueError(f"{where}: {name} must be None (no limit) or a number >= 0 (seconds; "
                         f"0 stops after the first candidate), got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why a search stopped.

    Attributes:
      status: one of :data:`STATUSES`.
      met: whether the network returned meets the target (``None`` for a frontier, which has
        none).
      reason: a sentence saying why it stopped.
      seconds: wall clock of the search.
      candidates: the candidates measured.
    """

    status: str = "met"
    met: bool | None = True
    reason: str = "the target was met"
    seconds: float = 0.0
    candidates: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Stopped(Exception):  # noqa: N818 (a signal between a search's steps, not an error)
    """Raised inside a search by its :class:`Clock` (budget, stall) or by the search itself
    (out of orders) and caught by the same search, which returns what it has."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Clock:
    """One search's clock: its budget, its stall rule, its steps and their times.

    Args:
      max_seconds: the time budget (``None``: no limit; see :func:`check_max_seconds`).
      stall: the :class:`StallRule` (``None``: never stop for a stall).
    """

    def __init__(self, max_seconds: float | None = None, stall: StallRule | None = None):
        self.max_seconds, self.stall = max_seconds, stall
        self.start = time.perf_counter()
        self.candidates = 0
        self.times: list[float] = []
        self._last = self.start
        self.halted: Stopped | None = None

    def halt(self, why: Stopped) -> None:
        """Record why the search stopped (for its caller to read)."""
        self.halted = why

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def tick(self) -> float:
        """One candidate done: its seconds (since the previous tick or the start)."""
        now = time.perf_counter()
        self.times.append(now - self._last)
        self._last = now
        self.candidates += 1
        return self.times[-1]

    def spent(self) -> bool:
        """Whether the budget is spent (never before the first candidate)."""
        return (self.max_seconds is not None and self.candidates >= 1
                and self.elapsed >= self.max_seconds)

    def check(self) -> None:
        """Before a candidate: :class:`Stopped` (``"budget"``) once the budget is spent."""
        if self.spent():
            raise Stopped("budget", f"the time budget of {self.max_seconds:g} s was spent "
                          f"({self.elapsed:.1f} s, {self.candidates} candidates measured)")

    def check_stall(self, errors: Sequence[float], what: str = "error",
                    values: Sequence[float] | None = None) -> None:
        """After an order: :class:`Stopped` (``"stalled"``) when the ``errors`` of the orders
        so far (lower is better) have stalled (:class:`StallRule`); the message shows the best
        one's ``values`` entry (the metric as the user reads it, e.g. dB) when given."""
        if self.stall is not None and self.stall.stalled(errors):
            best = best_index(errors)
            shown = (errors if values is None else values)[best]
            raise Stopped("stalled", f"the {what} stopped improving with the order: "
                          f"{self.stall.describe()} (the best, {shown:.4g}, at the "
                          f"{_ordinal(best + 1)} order tried)")

    def eta(self, left: int | None, unit: str = "steps", *, about: bool = False) -> str:
        """A progress suffix: the time so far, the ``left`` steps (an upper bound, or a guess
        with ``about``) and their time at the mean step time so far (after the first step,
        which compiles), and the budget."""
        parts = [f"{self.elapsed:.1f} s so far"]
        if left is not None and self.times:
            # the first step compiles the programs the later ones reuse: left out once there
            # are others
            step = statistics.fmean(self.times[1:] or self.times)
            bound = "about" if about else "at most"
            one = unit[:-1] if left == 1 and unit.endswith("s") else unit
            parts.append(f"{bound} {left} {one} left, ~{_secs(left * step)} at "
                         f"{_secs(step)} each" if left else f"no {unit} left")
        if self.max_seconds is not None:
            parts.append(f"budget {self.max_seconds:g} s")
        return " [" + "; ".join(parts) + "]"

    def stop(self, status: str, reason: str, met: bool | None) -> Stop:
        """The :class:`Stop` record of this search now."""
        if status not in STATUSES:
            raise ValueError(f"Clock.stop: status must be one of {STATUSES}, got {status!r}")
        return Stop(status=status, met=met, reason=reason, seconds=self.elapsed,
                    candidates=self.candidates)


def _secs(t: float) -> str:
    return f"{t:.0f} s" if t >= 10 else f"{t:.1f} s"


def _finite(v: float) -> float:
    return math.inf if math.isnan(v) else v


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def best_index(losses: Sequence[float]) -> int:
    """The index of the smallest loss (NaN as ``inf``; the first on ties)."""
    return min(range(len(losses)), key=lambda i: _finite(float(losses[i])))

