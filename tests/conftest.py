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
"""

import os

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


#: The files that take longest, longest first (CPU seconds in a full default run on two cores,
#: children included, 2026-12-02, by today's names: test_docs 61, test_benchmarks_figures 39
#: (its five benchmark processes), test_trace_graphs 29, test_sharding 23,
#: test_verbs_on_every_network 23, test_searches 22, test_derivatives 21, test_trace_scan 20,
#: test_methods 19, test_benchmarks_zoo 19, test_compress 18, test_activations 17, ... down to
#: test_defaults 9), started first: with one worker per core and a file per work unit
#: (``--dist loadfile --no-loadscope-reorder``), each worker takes the next file when it is
#: done, so the long ones must not come last (a long file left to the end keeps one core busy
#: while the other idles). The other files follow in their collection order.
HEAVY_FILES = ("test_docs.py", "test_benchmarks_figures.py", "test_trace_graphs.py",
               "test_sharding.py", "test_verbs_on_every_network.py", "test_searches.py",
               "test_derivatives.py", "test_trace_scan.py", "test_methods.py",
               "test_benchmarks_zoo.py", "test_compress.py", "test_activations.py",
               "test_certify.py", "test_trace_module.py", "test_trace_tied.py",
               "test_trace_residual.py", "test_features.py", "test_trace.py", "test_select.py",
               "test_trace_property.py", "test_bad_inputs.py", "test_many_inputs.py",
               "test_defaults.py")


def pytest_collection_modifyitems(config, items):
    """Order the collected tests longest file first (a stable sort: a file's tests keep their
    order)."""
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
