"""The programs XLA compiles (or JAX traces) during a call (a helper of the tests, with
``jax.monitoring``)."""

import jax

COMPILED = "/jax/core/compile/backend_compile_duration"
TRACED = "/jax/core/compile/jaxpr_trace_duration"


def named_events(fn, event):
    """``fn()`` and the function names of the ``event`` duration events reported meanwhile."""
    names = []

    def listen(seen, secs, fun_name="?", **_):
        if seen == event:
            names.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        return fn(), names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def programs_compiled(fn):
    """``fn()`` and the names of the programs XLA compiled meanwhile (``backend_compile``
    events: a program the persistent cache serves counts too, one already in this process's
    caches does not)."""
    return named_events(fn, COMPILED)
