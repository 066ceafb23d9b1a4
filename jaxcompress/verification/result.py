"""The result of :func:`~jaxcompress.verification.verify`: a proven bracket on the sup of the
difference, how it was reached, and a plot of it narrowing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["GUARANTEE", "STATUSES", "Verification"]

#: What ``lower <= sup <= upper`` rests on, in words (also in every summary).
GUARANTEE = ("rigorous up to floating point: float64 Taylor-model arithmetic with every "
             "rounding error bounded into the remainders (Higham's gamma_n), assuming the "
             "platform's elementary functions are accurate to 32 ulp (log1p 1,024, erfc "
             "2,048: 8x what was measured); the program is "
             "bounded as real arithmetic (float32 casts inside it treated as exact, its "
             "x-independent constants as JAX computes them)")

#: The statuses a verification ends with.
STATUSES = {
    "certified": "upper <= eps: the sup of the difference is at most eps",
    "refuted": "lower > eps: the difference exceeds eps at argmax",
    "converged": "upper - lower <= tol * upper (or upper <= atol)",
    "timeout": "max_seconds passed: the bracket reached so far",
}


@dataclasses.dataclass(frozen=True, eq=False)
class Verification:
    r"""A proven bracket ``lower <= sup_{x in domain} max_j |F_a(x)_j - F_b(x)_j| <= upper``.

    Attributes:
      lower: the largest ``max_j |F_a - F_b|`` proven at a point of the domain (``argmax``).
      upper: a bound on the supremum over the whole domain.
      status: ``"certified"``, ``"refuted"``, ``"converged"`` or ``"timeout"``
        (:data:`STATUSES`).
      argmax: the point of the domain where ``lower`` is attained, shape ``(d,)``.
      eps: the tolerance asked about (None: the bracket alone was asked for).
      tol: the relative width at which the bracket counts as converged.
      domain: the domain verified on.
      boxes: how many boxes were bounded.
      seconds: wall-clock time of the call (tracing and compilation included).
      history: ``(seconds, lower, upper)`` as the bracket narrowed.
      order: the degree ``K`` of the Taylor models.
      compile_seconds: the part of ``seconds`` spent making programs (tracing, lowering and
        compiling the bounds; a second call of the same structure reuses them). It counts
        against ``max_seconds``, but one batch of boxes is always bounded: when compilation
        takes the budget, the result is a ``"timeout"`` and its summary says so.
      guarantee: what the bracket rests on (:data:`GUARANTEE`).
      proof: the certificate's contents (the programs, the domain, the search's proof tree;
        :class:`~jaxcompress.verification.proof.Proof`), written by :meth:`save`; None for a
        result built by hand.
    """

    lower: float
    upper: float
    status: str
    argmax: np.ndarray
    eps: float | None
    tol: float
    domain: Any
    boxes: int
    seconds: float
    history: tuple[tuple[float, float, float], ...]
    order: int
    compile_seconds: float = 0.0
    guarantee: str = GUARANTEE
    proof: Any = dataclasses.field(default=None, repr=False)

    @property
    def ratio(self) -> float:
        """``upper / lower`` (``inf`` when ``lower`` is 0)."""
        return self.upper / self.lower if self.lower > 0 else float("inf")

    def summary(self) -> str:
        """A few lines: the bracket, the status, the effort and the guarantee."""
        head = (f"sup |F_a - F_b| in [{self.lower:.6e}, {self.upper:.6e}]"
                + (f" (upper/lower {self.ratio:.4f})" if self.lower > 0 else ""))
        status = f"status {self.status}: {STATUSES.get(self.status, '')}"
        if self.eps is not None:
            status += f" (eps = {self.eps:.3e})"
        where = np.array2string(np.asarray(self.argmax), precision=6, separator=", ")
        effort = (f"{self.boxes:,} boxes bounded in {self.seconds:.2f} s ("
                  + (f"{self.compile_seconds:.2f} s of it compiling; " if self.compile_seconds
                     else "")
                  + f"Taylor models of order {self.order}); lower bound attained at x = "
                  f"{where}")
        if self.status == "timeout" and self.compile_seconds >= 0.5 * self.seconds:
            effort += ("\ncompilation took most of the time budget: a second call with "
                       "networks of the same shapes reuses the compiled programs, or raise "
                       "max_seconds")
        return "\n".join([head, status, effort, self.guarantee])

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (the domain by its kind and numbers)."""
        dom = self.domain
        domain = {"kind": type(dom).__name__}
        for name in ("dim", "radius", "center", "lo", "hi"):
            if name in getattr(type(dom), "__dataclass_fields__", {}):
                v = getattr(dom, name)
                domain[name] = None if v is None else np.asarray(v, np.float64).tolist()
        return {"lower": self.lower, "upper": self.upper, "status": self.status,
                "argmax": np.asarray(self.argmax, np.float64).tolist(), "eps": self.eps,
                "tol": self.tol, "domain": domain, "boxes": self.boxes,
                "seconds": self.seconds, "compile_seconds": self.compile_seconds,
                "order": self.order,
                "history": [list(h) for h in self.history], "guarantee": self.guarantee}

    def save(self, path) -> Path:
        """Write the certificate to ``path`` (one ``.npz``): both programs in the checker's op
        language, the domain, every box of the search with its parent and each leaf's claimed
        bound, ``upper``, ``lower`` and ``argmax``. :func:`jaxcompress.check` proves it again
        in ball arithmetic (python-flint), without the verifier.

        Raises:
          ValueError: a result without a proof (built by hand), or programs outside the
            certificate's op language
            (:class:`~jaxcompress.verification.proof.UnsupportedForCertificate`, naming the
            primitive).
        """
        if self.proof is None:
            raise ValueError("Verification.save: this result carries no proof (it was not "
                             "returned by jc.verify); nothing to certify")
        return self.proof.save(path, upper=self.upper, lower=self.lower, argmax=self.argmax,
                               status=self.status)

    def plot(self, path=None, ax=None):
        """The bracket narrowing over time (log scale): ``upper`` and ``lower`` against seconds.

        Draws on ``ax`` when given (returns it), else on a new figure; writes it to ``path``
        when given (with matplotlib's Agg backend when no figure was passed in).
        """
        import matplotlib

        if ax is None and path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        own = ax is None
        if own:
            fig, ax = plt.subplots(figsize=(6, 4))
        hist = np.asarray(self.history, dtype=np.float64).reshape(-1, 3)
        finite = np.isfinite(hist[:, 2]) & (hist[:, 2] > 0)
        t = np.maximum(hist[:, 0], 1e-3)
        ax.step(t[finite], hist[finite, 2], where="post", color="C3", label="upper (proven)")
        pos = hist[:, 1] > 0
        ax.step(t[pos], hist[pos, 1], where="post", color="C0", label="lower (attained)")
        if self.eps is not None:
            ax.axhline(self.eps, color="gray", ls="--", lw=1, label=f"eps = {self.eps:.2e}")
        ax.set_yscale("log")
        ax.set_xscale("log")
        ax.set_xlabel("seconds")
        ax.set_ylabel("sup |F_a - F_b|")
        ax.set_title(f"{self.status}: [{self.lower:.3e}, {self.upper:.3e}]", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        if own and path is not None:
            fig.tight_layout()
            fig.savefig(path, dpi=120)
            plt.close(fig)
        return ax
