"""The programs XLA compiles during a call (a helper of the tests, with ``jax.monitoring``)."""

import jax


def programs_compiled(fn):
    """``fn()`` and the names of the programs XLA compiled meanwhile (``backend_compile``
    events: a program the persistent cache serves counts too, one already in this process's
    caches does not)."""
    names = []

    def listen(event, secs, fun_name="?", **_):
        if event == "/jax/core/compile/backend_compile_duration":
            names.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        return fn(), names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
