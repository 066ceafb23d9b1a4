"""The size-accuracy frontier of a network's compressions: records, table and plot (ours).

A :class:`Frontier` holds one :class:`FrontierRow` per candidate that :func:`jaxcompress.frontier`
or a search judged; :meth:`Frontier.pareto` keeps the candidates no other beats on both size and
error, :meth:`Frontier.smallest` returns the smallest network within a budget.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxcompress.stopping import Stop

__all__ = ["Frontier", "FrontierRow"]


@dataclasses.dataclass(frozen=True)
class FrontierRow:
    """One candidate of a :class:`Frontier`: its ``method`` (:meth:`jaxcompress.Method.describe`)
    and ``order`` (``None``: none to report), ``widths`` (every compressible set's, after
    trimming), ``num_params`` (every parameter leaf), ``error`` by the frontier's metric (after
    polishing; ``error_before`` before it, ``None``: not polished), where measured its ``sup``
    (:func:`jaxcompress.sup_error`) and ``rel_l2`` (``||F - F~|| / ||F||`` on fixed Sobol
    points) distances to the teacher and jitted throughput ``points_per_s``, the wall-clock
    ``seconds`` it took, the ``stage`` it came from (``"candidate"``: :func:`jaxcompress.frontier`;
    ``"order"``, ``"shrink"``: a search's orders and widths) and, built on first access, its
    :attr:`network` as the kind of network the teacher is.
    """

    method: str
    order: int | None
    widths: tuple[int, ...]
    num_params: int
    error: float
    error_before: float | None = None
    sup: float | None = None
    rel_l2: float | None = None
    points_per_s: float | None = None
    seconds: float = 0.0
    stage: str = "candidate"
    build: Callable[[], Any] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def polished(self) -> bool:
        return self.error_before is not None

    @property
    def polish_gain(self) -> float | None:
        """``error_before / error`` (how much polishing helped; ``None`` when not polished)."""
        if self.error_before is None:
            return None
        return self.error_before / self.error if self.error > 0 else math.inf

    @property
    def network(self) -> Any:
        if self.build is None:
            raise ValueError("FrontierRow.network: this row has only the numbers (read back "
                             "from a file, or a candidate measured at the teacher's shapes)")
        return self.build()

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "build"}
        out["widths"] = list(self.widths)
        out["polish_gain"] = self.polish_gain
        return out


@dataclasses.dataclass(frozen=True)
class Frontier:
    """Candidate networks of one teacher by size and error: the ``rows`` in the order they were
    measured, the ``metric``'s name and direction (``higher_is_better``: PSNR, where a row beats
    another with a larger value and :meth:`smallest` wants ``error >= eps``), the teacher's
    parameter count, own figure (``0`` for ``"sup"`` and ``"rel_l2"``, ``inf`` for ``"psnr"``)
    and throughput, the ``domain``, the ``history`` of the search and why it stopped (``stop``,
    a :class:`~jaxcompress.stopping.Stop`; ``None`` when not recorded)."""

    rows: tuple[FrontierRow, ...]
    metric: str
    teacher_params: int
    teacher_error: float
    teacher_points_per_s: float | None = None
    domain: str = ""
    history: tuple[str, ...] = ()
    higher_is_better: bool = False
    stop: Stop | None = None

    def _loss(self, error: float) -> float:
        """``error`` with lower better (the metric's value, negated for PSNR)."""
        return -error if self.higher_is_better else error

    def _within(self, error: float, eps: float) -> bool:
        return error >= eps if self.higher_is_better else error <= eps

    def pareto(self) -> tuple[FrontierRow, ...]:
        """The rows no other row beats on both counts (no row has at most as many parameters
        and at most the error, one of them strictly less; for PSNR at least the dB), by
        parameter count."""
        rows = sorted((r for r in self.rows if not math.isnan(r.error)
                       and self._loss(r.error) < math.inf),
                      key=lambda r: (r.num_params, self._loss(r.error)))
        front, best = [], math.inf
        for r in rows:
            if self._loss(r.error) < best:
                front.append(r)
                best = self._loss(r.error)
        return tuple(front)

    def smallest(self, eps: float) -> Any:
        """The network of the smallest row with ``error <= eps`` (``>= eps`` dB for PSNR; fewest
        parameters, the better error on ties), as the kind of network the teacher is."""
        return self.smallest_row(eps).network

    def smallest_row(self, eps: float) -> FrontierRow:
        """The row :meth:`smallest` returns the network of."""
        ok = [r for r in self.rows if self._within(r.error, eps)]
        if not ok:
            best = min(self.rows, key=lambda r: self._loss(r.error), default=None)
            seen = "" if best is None else (f"; the best is {best.error:.3e} with "
                                            f"{best.num_params:,} parameters (widths "
                                            f"{list(best.widths)})")
            sign = ">=" if self.higher_is_better else "<="
            raise ValueError(f"Frontier.smallest: no candidate has {self.metric} {sign} {eps:g}"
                             f"{seen}; add larger orders or widths, or polish")
        return min(ok, key=lambda r: (r.num_params, self._loss(r.error)))

    def table(self) -> str:
        """A text table of the rows (``*``: on the Pareto front)."""
        front = {id(r) for r in self.pareto()}
        polished = any(r.polished for r in self.rows)
        head = ["", "method", "k", "widths", "params", self.metric]
        if polished:
            head += ["before polish"]
        # the distances and the speed where some row has them (the search measures only its
        # metric)
        extra = [(name, field) for name, field in (("sup", "sup"), ("rel L2", "rel_l2"))
                 if field != self.metric and any(getattr(r, field) is not None
                                                 for r in self.rows)]
        speed = any(r.points_per_s is not None for r in self.rows)
        head += [name for name, _ in extra] + (["points/s"] if speed else []) + ["seconds"]
        lines = [head]
        for r in sorted(self.rows, key=lambda r: (r.num_params, self._loss(r.error))):
            row = ["*" if id(r) in front else "", _short(r.method),
                   "-" if r.order is None else str(r.order),
                   str(list(r.widths)), f"{r.num_params:,}", _num(r.error)]
            if polished:
                row += [_num(r.error_before)]
            row += [_num(getattr(r, field)) for _, field in extra]
            if speed:
                row += ["-" if r.points_per_s is None else f"{r.points_per_s:.3g}"]
            row += [f"{r.seconds:.1f}"]
            lines.append(row)
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        text = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                for line in lines]
        speed = ("" if self.teacher_points_per_s is None
                 else f", {self.teacher_points_per_s:.3g} points/s")
        stopped = ([] if self.stop is None or self.stop.status in ("met", "complete")
                   else [f"stopped ({self.stop.status}): {self.stop.reason}"])
        return "\n".join([f"teacher: {self.teacher_params:,} parameters, {self.metric} "
                          f"{_num(self.teacher_error)}{speed}; domain {self.domain}", *text,
                          "* on the Pareto front (no candidate both smaller and better)",
                          *stopped])

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the networks are left out)."""
        # strict JSON has no infinity: the teacher's PSNR against itself is written as null
        return {"metric": self.metric, "teacher_params": self.teacher_params,
                "teacher_error": (self.teacher_error if math.isfinite(self.teacher_error)
                                  else None),
                "teacher_points_per_s": self.teacher_points_per_s, "domain": self.domain,
                "rows": [r.to_dict() for r in self.rows],
                "pareto": [self.rows.index(r) for r in self.pareto()],
                "history": list(self.history), "higher_is_better": self.higher_is_better,
                "stop": None if self.stop is None else self.stop.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Frontier:
        """A frontier read back from :meth:`to_dict` (its rows have no networks)."""
        names = {f.name for f in dataclasses.fields(FrontierRow)} - {"build"}
        rows = tuple(FrontierRow(**{**{k: v for k, v in r.items() if k in names},
                                    "widths": tuple(r["widths"])}) for r in d["rows"])
        return cls(rows=rows, metric=d["metric"], teacher_params=d["teacher_params"],
                   teacher_error=(math.inf if d["teacher_error"] is None
                                  else d["teacher_error"]),
                   teacher_points_per_s=d.get("teacher_points_per_s"),
                   domain=d.get("domain", ""), history=tuple(d.get("history", ())),
                   higher_is_better=bool(d.get("higher_is_better", False)),
                   stop=None if d.get("stop") is None else Stop(**d["stop"]))

    def plot(self, path: str | Path, *, eps: float | None = None,
             scratch: Sequence[tuple[int, float]] | None = None,
             title: str | None = None) -> Path:
        """Parameters against error, log-log (:meth:`draw`), written to a PNG; returns its
        path."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        path = Path(path)
        fig, ax = plt.subplots(figsize=(7.0, 4.6), dpi=130)
        self.draw(ax, eps=eps, scratch=scratch, title=title)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        return path

    def draw(self, ax, *, eps: float | None = None,
             scratch: Sequence[tuple[int, float]] | None = None,
             title: str | None = None, legend: bool = True) -> None:
        """Draw the frontier on a matplotlib axis: every row (a polished one with its start
        before polishing, joined by a thin line), the Pareto front as a staircase, the
        teacher's size (and its own error, for a task metric) as lines, ``eps`` dashed with the
        smallest row within it starred, and optional ``scratch`` points ``(num_params,
        error)`` of networks trained from scratch. Log-log; zeros are drawn a decade below the
        smallest positive value. PSNR (higher is better) on a linear axis in dB, an infinite
        value (a candidate equal to the teacher) drawn 5 dB above the largest finite one."""
        clip = _clip(self, scratch)
        methods = list(dict.fromkeys(_short(r.method) for r in self.rows))
        colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
        for m in methods:
            rows = [r for r in self.rows if _short(r.method) == m]
            ax.scatter([r.num_params for r in rows], [clip(r.error) for r in rows],
                       s=22, color=colors[m], label=m, zorder=3)
            for r in rows:
                if r.polished and math.isfinite(r.error_before):
                    ax.plot([r.num_params] * 2, [clip(r.error_before), clip(r.error)],
                            color=colors[m], lw=0.6, alpha=0.5, zorder=2)
                    ax.scatter([r.num_params], [clip(r.error_before)], s=16,
                               facecolors="none", edgecolors=colors[m], lw=0.8, zorder=2)
        if any(r.polished for r in self.rows):
            ax.scatter([], [], s=16, facecolors="none", edgecolors="0.4",
                       label="before polishing")
        front = self.pareto()
        if front:
            ax.step([r.num_params for r in front], [clip(r.error) for r in front],
                    where="post", color="k", lw=1.2, label="Pareto front", zorder=4)
        if scratch:
            ax.scatter([p for p, _ in scratch], [clip(e) for _, e in scratch], marker="x",
                       s=36, color="0.25", label="trained from scratch", zorder=5)
        ax.axvline(self.teacher_params, color="0.5", lw=1, ls=":",
                   label=f"teacher ({self.teacher_params:,} params)")
        if 0 < self.teacher_error < math.inf:
            ax.axhline(self.teacher_error, color="0.5", lw=1, ls="-.",
                       label=f"teacher's {self.metric}")
        if eps is not None:
            ax.axhline(eps, color="C3", lw=1, ls="--", label=f"eps = {eps:.3g}")
            if any(self._within(r.error, eps) for r in self.rows):
                best = self.smallest_row(eps)
                ax.scatter([best.num_params], [clip(best.error)], marker="*", s=160,
                           color="C3", edgecolors="k", lw=0.6, zorder=6,
                           label=f"smallest within eps: {best.num_params:,} params, widths "
                                 f"{list(best.widths)}")
        ax.set_xscale("log")
        ax.set_yscale("linear" if self.higher_is_better else "log")
        ax.set_xlabel("parameters")
        ax.set_ylabel(f"{self.metric} (dB)" if self.higher_is_better else self.metric)
        ax.set_title(title or f"size against {self.metric} ({self.domain})", fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        if legend:
            ax.legend(fontsize=7, loc="best")


def _clip(front: Frontier, scratch) -> Callable[[float], float]:
    """How a value is drawn: on the log axis at least a decade below the smallest positive
    value shown; for PSNR (linear axis) as it is, infinities 5 dB above the largest finite."""
    vals = [v for r in front.rows for v in (r.error, r.error_before)
            if v is not None and math.isfinite(v)] + [e for _, e in scratch or ()]
    if front.higher_is_better:
        top = max(vals, default=0.0) + 5.0
        return lambda v: min(v, top)
    vals = [v for v in vals + [front.teacher_error] if v > 0]
    floor = min(vals) / 10 if vals else 1e-16
    return lambda v: max(v, floor)


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3e}" if np.isfinite(v) else str(v)


def _short(method: str) -> str:
    """A method's description without its order (one label per method family)."""
    short = re.sub(r"order=(\([^)]*\)|[^,()]*)(, )?", "", method).replace("()", "")
    return re.sub(r"^(\w+)\(features=\1(, |(?=\)))", r"\1(", short).replace("()", "")
