"""How the library's programs are compiled on a CPU (ours, not the paper's).

On the coordinate networks people compress, XLA's compilation of one compression takes seconds
and its run milliseconds (``benchmarks/compile_latency.py``). XLA's CPU backend compiles the
same program several times faster at optimisation level 0 with its older elemental fusion
emitter (:data:`FAST_OPTIONS`), and the program then runs slower; the same kept neurons come
out, the coefficients equal to rounding. One call always comes out ahead; the slower run pays
the saving back only after many calls, the fewer the wider the teacher (the measurements are in
``benchmarks/README.md``, "Compile once"). So :data:`jaxcompress.driver.run_jit` compiles
*fast* on a CPU when the teacher has at most :data:`FAST_MAX_PARAMS` parameters, and XLA's
defaults otherwise, on every accelerator (a GPU's compile is another trade) and under an
enclosing ``jax.jit`` / ``vmap`` / ``grad`` (the enclosing program is compiled as its caller
asked).

The sup-error measurement of two chains is called many times at one shape by the searches, and
its run grows faster with the width: it compiles fast up to :data:`FAST_MAX_PARAMS_MEASURE`
parameters.

``JAXCOMPRESS_FAST_COMPILE`` overrides the choice: ``auto`` (default), ``on`` (every CPU
compile fast) or ``off`` (XLA's defaults everywhere). The user's own XLA flags are never
changed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from jax._src import core as jax_core  # trace_state_clean: is any trace active

from jaxcompress import _stored

__all__ = ["FAST_MAX_PARAMS", "FAST_MAX_PARAMS_MEASURE", "FAST_OPTIONS", "CompileClock",
           "FastFirst", "FastOnSmallCPU", "compile_clock", "fast_compile_mode"]

#: XLA options of the fast compile: optimisation level 0, the older elemental fusion emitter.
FAST_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0,
                                "xla_cpu_use_fusion_emitters": False}
#: The largest teacher (parameters) whose compression compiles fast on a CPU under ``auto``.
FAST_MAX_PARAMS = 300_000
#: The largest first network (parameters) whose sup-error measurement compiles fast.
FAST_MAX_PARAMS_MEASURE = 50_000
#: The environment variable of the choice.
ENV = "JAXCOMPRESS_FAST_COMPILE"
_MODES = {"auto": "auto", "": "auto", "on": "on", "1": "on", "true": "on", "off": "off",
          "0": "off", "false": "off"}


def fast_compile_mode() -> str:
    """``"auto"``, ``"on"`` or ``"off"``, from ``JAXCOMPRESS_FAST_COMPILE`` (read per call)."""
    raw = os.environ.get(ENV, "auto").strip().lower()
    if raw not in _MODES:
        raise ValueError(f"{ENV} must be one of auto, on, off (or 1 / 0), got {raw!r}")
    return _MODES[raw]


def _float_size(tree) -> int:
    return sum(int(np.prod(np.shape(x))) for x in jax.tree.leaves(tree)
               if np.issubdtype(x.dtype if hasattr(x, "dtype") else np.result_type(x),
                                np.inexact))


def _fast_mode() -> str | None:
    """``"on"`` or ``"auto"`` when this call may compile fast (a CPU, outside any trace, not
    turned off), else ``None``: inside the caller's jit / vmap / grad (a traced argument or a
    closure alike) the program is the caller's, with its options (JAX refuses compiler options
    on a nested jit)."""
    mode = fast_compile_mode()
    if mode == "off" or jax.default_backend() != "cpu" or not jax_core.trace_state_clean():
        return None
    return mode


class _Twin:
    """``fun`` jitted twice: ``full`` (XLA's defaults) and ``fast`` (:data:`FAST_OPTIONS`)."""

    def __init__(self, fun: Callable, **jit_kwargs):
        self.jit_kwargs = jit_kwargs
        self.full = jax.jit(fun, **jit_kwargs)
        self.fast = jax.jit(fun, compiler_options=FAST_OPTIONS, **jit_kwargs)
        self.__wrapped__ = fun
        self.__doc__ = fun.__doc__

    def _cache_size(self) -> int:
        return self.full._cache_size() + self.fast._cache_size()


class FastOnSmallCPU(_Twin):
    """``jax.jit(fun, **jit_kwargs)`` that compiles with :data:`FAST_OPTIONS` when the call runs
    on a CPU, outside any trace, and its first argument (the teacher) has at most as many
    floating-point entries as the module constant named ``limit`` (read per call; see the
    module docstring).

    ``full`` and ``fast`` are the two jitted functions; :meth:`lower` follows the same choice.
    Inside a ``jaxcompress._stored.keep_programs`` block (the command line's), a call outside
    any trace runs the program that block's folder keeps for it, lowered by an earlier process
    (the same bits; see that module), when its key can be made.
    """

    def __init__(self, fun: Callable, *, limit: str = "FAST_MAX_PARAMS", **jit_kwargs):
        if not isinstance(globals().get(limit), int):
            raise ValueError(f"FastOnSmallCPU: no size limit named {limit!r} in {__name__}")
        super().__init__(fun, **jit_kwargs)
        self.limit = limit

    def choose(self, leaves) -> Any:
        """The jitted function a call with these leaves uses."""
        mode = _fast_mode()
        if mode == "on" or (mode == "auto" and _float_size(leaves) <= globals()[self.limit]):
            return self.fast
        return self.full

    def __call__(self, leaves, *args, **kwargs):
        chosen = self.choose(leaves)
        store = _stored.active()
        if (store is not None and set(self.jit_kwargs) <= {"static_argnames"}
                and jax_core.trace_state_clean()):
            names = self.jit_kwargs.get("static_argnames", ())
            out = store.call(self.__wrapped__, (names,) if isinstance(names, str) else names,
                             FAST_OPTIONS if chosen is self.fast else None,
                             (leaves, *args), kwargs)
            if out is not NotImplemented:
                return out
        return chosen(leaves, *args, **kwargs)

    def lower(self, leaves, *args, **kwargs):
        return self.choose(leaves).lower(leaves, *args, **kwargs)


class FastFirst(_Twin):
    """``jax.jit(fun, **jit_kwargs)`` for a program called an unknown number of times (ours):
    on a CPU, outside any trace, its calls run the fast compile until they have spent
    :attr:`budget_s` seconds running (the calls after its first, which compiles), then XLA's
    defaults. A short run pays the fast compile only; a long one pays at most ``budget_s`` of
    slower calls and both compiles: never far from the better of the two choices, whichever
    it is. The proof search of :func:`jaxcompress.verify` uses it.

    When it switches depends on the machine's speed; the two programs compute the same
    arithmetic (XLA does not reassociate floating point without fast-math), so results agree
    to rounding. ``JAXCOMPRESS_FAST_COMPILE`` applies as for :class:`FastOnSmallCPU`.
    """

    #: seconds of fast-compiled calls (after the first) before switching to XLA's defaults
    budget_s: float = 1.0

    def __init__(self, fun: Callable, **jit_kwargs):
        super().__init__(fun, **jit_kwargs)
        self.spent = 0.0
        self.calls = 0

    def __call__(self, *args, **kwargs):
        mode = _fast_mode()
        if mode is None or (mode == "auto" and self.spent > self.budget_s):
            return self.full(*args, **kwargs)
        t0 = time.perf_counter()
        out = jax.block_until_ready(self.fast(*args, **kwargs))
        if self.calls:
            self.spent += time.perf_counter() - t0
        self.calls += 1
        return out


#: The ``jax.monitoring`` duration events of making a program: tracing to a jaxpr, lowering to
#: StableHLO, XLA's compilation (or reading it from the persistent cache).
COMPILE_EVENTS = frozenset(("/jax/core/compile/jaxpr_trace_duration",
                            "/jax/core/compile/jaxpr_to_mlir_module_duration",
                            "/jax/core/compile/backend_compile_duration"))

_clocks = threading.local()
_listening = [False]
_listen_lock = threading.Lock()


def _on_duration(event: str, duration: float, **_) -> None:
    if event in COMPILE_EVENTS:
        for clock in getattr(_clocks, "active", ()):
            clock.seconds += duration


class CompileClock:
    """Seconds this thread spent making programs (tracing, lowering, compiling) while the
    clock ran (:func:`compile_clock`)."""

    def __init__(self):
        self.seconds = 0.0


@contextlib.contextmanager
def compile_clock() -> Iterator[CompileClock]:
    """``with compile_clock() as clock:`` counts in ``clock.seconds`` the time this thread
    spends making programs inside the block (from ``jax.monitoring``'s duration events; one
    listener, registered on first use, counts nothing outside a block)."""
    with _listen_lock:
        if not _listening[0]:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _listening[0] = True
    clock = CompileClock()
    active = getattr(_clocks, "active", ())
    _clocks.active = (*active, clock)
    try:
        yield clock
    finally:
        _clocks.active = active
