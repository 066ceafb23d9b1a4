"""Strict JAX for every test, and a cheaper compiler.

float64 is available, silent rank promotion and implicit dtype promotion between array types are
errors (equinox/lineax do the same), so broadcasting and promotion bugs fail loudly.

XLA compiles at optimisation level 0 in the tests (unless XLA_FLAGS sets one): the test suite is
compilation-bound, and level 0 compiles about 1.4x faster with the same results (measured on this
suite's compress calls: identical kept neurons and errors). It also uses the CPU backend's older
elemental fusion emitter (``--xla_cpu_use_fusion_emitters=false``), which compiles a mix of
compress / sup_error / nested-jacfwd calls in 5.3-5.7 s instead of 6.8-7.5 s, and compiles each
program as one LLVM module (``--xla_cpu_parallel_codegen_split_count=1``: with every core already
running a test worker, splitting a program for parallel codegen costs more than it saves; the
default run went from 224 s to 198 s). The host also
shows four CPU devices, so the sharding tests run in the test process. The flags are set before
JAX starts its CPU backend and are inherited by the benchmark scripts and notebooks the tests
start.

Each test worker runs on a core of its own (``os.sched_setaffinity``, when there are at least as
many cores as workers; ``JAXCOMPRESS_TEST_PIN=off`` turns it off): XLA's CPU runtime runs a
program on a thread pool as wide as the cores the process may use, so two unpinned workers ran
four busy threads on two cores. Pinned, each worker's pool has one thread; a default cold run on
two cores went from 232 s to 221 s (and 240 s to 227 s profiled; 2026-12-06, Xeon). The processes
a test starts inherit its core.
"""

import os


def _pin_worker() -> None:
    """This xdist worker on core ``worker index mod cores`` (before JAX starts its backend)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    off = os.environ.get("JAXCOMPRESS_TEST_PIN", "").strip().lower() in ("off", "0", "false")
    if off or not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if 1 < count <= len(cores):
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


_pin_worker()

_FLAGS = {"xla_backend_optimization_level": "0",
          # the older elemental fusion emitter compiles small programs faster
          "xla_cpu_use_fusion_emitters": "false",
          # one LLVM module per program: splitting it for parallel codegen costs more than it saves
          "xla_cpu_parallel_codegen_split_count": "1",
          # four CPU devices: the sharding tests run in-process (others use device 0 only)
          "xla_force_host_platform_device_count": "4"}
for _name, _value in _FLAGS.items():
    if _name not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_name}={_value}".strip()

#: Compiled programs shared by the suite's processes (the two workers, the benchmark scripts and
#: command lines it starts) and kept between runs: JAX's persistent compilation cache, in a
#: per-user folder outside the checkout (``JAXCOMPRESS_TEST_CACHE=off`` runs the suite cold; it
#: passes either way). Set through the environment, so the processes the tests start share it.
_CACHE = os.environ.get("JAXCOMPRESS_TEST_CACHE",
                        os.path.join(os.environ.get("XDG_CACHE_HOME")
                                     or os.path.join(os.path.expanduser("~"), ".cache"),
                                     "jaxcompress", "tests-xla"))
if _CACHE.strip().lower() not in ("", "off", "0", "none", "false"):
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    os.environ.setdefault("JAXCOMPRESS_CACHE_DIR", _CACHE)   # the command line's own
else:   # the command lines the tests run (in-process too) must not use the user's own cache
    os.environ.setdefault("JAXCOMPRESS_CACHE_DIR", "off")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)


@pytest.fixture
def user_broadcasting():
    """User code adds biases by implicit rank promotion (``x @ w + b``): the traced-network
    tests run it as JAX's default allows (``pytestmark = usefixtures("user_broadcasting")``)."""
    with jax.numpy_rank_promotion("allow"):
        yield


#: The files that take longest, longest first (CPU seconds of the test process and the processes
#: it starts, measured file by file with ``JAXCOMPRESS_TEST_PROFILE`` and
#: ``tests/profile_report.py`` on the 2-core EPYC, warm compilation cache, 2026-12-07:
#: test_docs ~75, test_benchmarks_figures ~55 (its five benchmark processes), test_verify 51,
#: test_masked_orders 23, test_searches 23, test_cli 23, ... down to test_benchmarks_workloads
#: 1.5; every file is listed), started first: with one worker per core and a file per work unit
#: (``--dist loadfile``), each worker takes the next file when it is done, so the long ones must
#: not come last (a long file left to the end keeps one core busy while the other idles: the
#: previous list left out test_check, test_trace_ensemble and test_verify_property, about 40 s
#: that ran last). A file not listed follows in collection order.
HEAVY_FILES = ("test_docs.py", "test_benchmarks_figures.py", "test_verify.py",
               "test_masked_orders.py", "test_searches.py", "test_cli.py", "test_compiling.py",
               "test_derivatives.py", "test_sharding.py", "test_check.py",
               "test_trace_module.py", "test_benchmarks_zoo.py", "test_trace_graphs.py",
               "test_methods.py", "test_polish.py", "test_verbs_on_every_network.py",
               "test_benchmarks_compile.py", "test_trace_ensemble.py", "test_certify.py",
               "test_trace_derivative.py", "test_compress.py", "test_trace.py",
               "test_features.py", "test_trace_scan.py", "test_verify_property.py",
               "test_stored.py", "test_activations.py", "test_many_inputs.py",
               "test_trace_tied.py", "test_trace_residual.py", "test_bad_inputs.py",
               "test_bad_inputs_fuzz.py", "test_trace_shared.py", "test_flax.py",
               "test_networks.py", "test_memory.py", "test_io.py", "test_select.py",
               "test_certify_validity.py", "test_architecture.py", "test_trace_property.py",
               "test_defaults.py", "test_zoo.py", "test_certify_paper.py", "test_mlp.py",
               "test_benchmarks_manifold.py", "test_benchmarks_frontier.py", "test_measure.py",
               "test_widths.py", "test_closed_form.py", "test_taylor.py", "test_domains.py",
               "test_sobol.py", "test_benchmarks_workloads.py", "test_benchmarks_features.py",
               "test_notebooks.py")


def pytest_collection_modifyitems(config, items):
    """Order the collected tests longest file first (a stable sort: a file's tests keep their
    order)."""
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


#: ``JAXCOMPRESS_TEST_PROFILE=folder``: each test process appends one JSON line per test to
#: ``folder/<worker>.jsonl`` with its wall time and what JAX spent in it (``jax.monitoring``:
#: XLA compile seconds and programs, trace + lower seconds, persistent-cache hits) — where the
#: suite's time goes, summed by ``python tests/profile_report.py folder``. Off by default.
_PROFILE = os.environ.get("JAXCOMPRESS_TEST_PROFILE")
if _PROFILE:
    import json
    import resource
    import sys
    import time

    import jax.monitoring

    _COUNTS = {"compile_s": 0.0, "programs": 0, "trace_s": 0.0, "traces": 0, "cache_hits": 0}

    #: function name -> [programs, compile seconds, traces, trace + lower seconds]; the same
    #: per call site (``lib:`` the innermost frame in jaxcompress/, ``test:`` in tests/)
    _NAMES: dict = {}
    _HERE = os.path.dirname(os.path.abspath(__file__))
    _LIB = os.path.join(os.path.dirname(_HERE), "jaxcompress")

    def _sites():
        """The innermost library and test frames of the current call (who asked for it)."""
        found = {}
        frame = sys._getframe(2)
        while frame is not None and len(found) < 2:
            path = frame.f_code.co_filename
            for kind, root in (("lib", _LIB), ("test", _HERE)):
                if kind not in found and path.startswith(root) and not path.endswith(
                        ("compiling.py", "conftest.py")):
                    found[kind] = (f"{kind}:{os.path.relpath(path, os.path.dirname(root))}:"
                                   f"{frame.f_lineno} {frame.f_code.co_name}")
            frame = frame.f_back
        return list(found.values())

    def _on_duration(event, secs, fun_name="?", **_):
        compiled = event == "/jax/core/compile/backend_compile_duration"
        traced = event in ("/jax/core/compile/jaxpr_trace_duration",
                           "/jax/core/compile/jaxpr_to_mlir_module_duration")
        if not (compiled or traced):
            return
        add = ([1, secs, 0, 0.0] if compiled
               else [0, 0.0, int(event.endswith("trace_duration")), secs])
        for key in (fun_name, *_sites()):
            _NAMES[key] = [a + b for a, b in zip(_NAMES.get(key, (0, 0.0, 0, 0.0)), add,
                                                   strict=True)]
        for key, value in zip(("programs", "compile_s", "traces", "trace_s"), add, strict=True):
            _COUNTS[key] += value

    def _on_event(event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            _COUNTS["cache_hits"] += 1

    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)

    def _cpu():
        """CPU seconds of this process and of the child processes it has waited for."""
        me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN))
        return {"cpu_s": me.ru_utime + me.ru_stime, "child_cpu_s": kids.ru_utime + kids.ru_stime}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        before, start, cpu = dict(_COUNTS), time.perf_counter(), _cpu()
        yield
        row = {"test": item.nodeid, "wall_s": time.perf_counter() - start,
               **{k: _COUNTS[k] - before[k] for k in _COUNTS},
               **{k: v - c for (k, v), c in zip(_cpu().items(), cpu.values(), strict=True)}}
        os.makedirs(_PROFILE, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(_PROFILE, f"{worker}.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")

    def pytest_sessionfinish(session):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(_PROFILE, f"{worker}.names.json"), "w") as f:
            json.dump(_NAMES, f)
