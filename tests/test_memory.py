"""The memory estimate is an upper bound of what ``compress`` really uses, compilation included.

A subprocess measures, for each (network, method), how much the process's peak resident memory
(``VmHWM``, reset between cases through ``/proc/self/clear_refs``; else ``ru_maxrss`` in a fresh
process per case) grows during one ``compress`` call of a new shape, compilation included, after a
warm-up compression of another shape has loaded the runtime. The library's estimate
(:func:`jaxcompress.planning.memory_estimate`) must be at least that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxcompress as jc
from jaxcompress.features import taylor_compile_cost
from jaxcompress.planning import memory_estimate

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import json, os, resource, sys
import jax
jax.config.update("jax_enable_x64", True)
import jaxcompress as jc
from jaxcompress.planning import memory_estimate

def peak():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False

cases = json.loads(sys.argv[1])
# the warm-up selects (D_1 < 8), so it loads what every compression needs (a layer kept whole
# computes nothing and would leave that to the first measured case)
jc.compress(jc.init_mlp(jax.random.PRNGKey(1), [cases[0][0][0], 8, 8, 1]),
            jc.derivative_matching(1), activation="sigmoid")
for sizes, kind, k in cases:
    p = jc.init_mlp(jax.random.PRNGKey(0), sizes)
    dom = jc.Ball(sizes[0], 1.0)
    m = {"derivative": jc.derivative_matching, "collocation": jc.collocation}[kind](k)
    resettable = reset()
    base = peak()
    small, info = jc.compress(p, m, activation="sigmoid", domain=dom)
    jax.block_until_ready(small)
    grown = peak() - base
    est = sum(memory_estimate(m, sizes, p[0]["kernel"].dtype, dom, compilation=True).values())
    print(json.dumps({"sizes": sizes, "kind": kind, "k": k, "measured": grown,
                      "estimate": est, "resettable": resettable}), flush=True)
"""


def _measure(cases):
    """Run the cases in one process when the peak can be reset, else one process each."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # what a compression costs as the library runs it: compiled, not read from the suite's cache
    env.pop("JAX_COMPILATION_CACHE_DIR", None)

    def run(batch):
        out = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(batch)], env=env,
                             capture_output=True, text=True, timeout=1800, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    rows = run(cases)
    if rows and not rows[0]["resettable"]:
        rows = [run([c])[0] for c in cases]
    return rows


def _check(rows):
    report = "\n".join(f"{r['sizes']} {r['kind']} k={r['k']}: measured {r['measured'] / 2**20:.1f} "
                       f"MiB, estimate {r['estimate'] / 2**20:.1f} MiB" for r in rows)
    print(report)
    for r in rows:
        assert r["estimate"] >= r["measured"], report


def test_memory_estimate_bounds_measured_peak():
    _check(_measure([[[2, 64, 64, 1], "derivative", 6], [[2, 64, 64, 1], "collocation", 4],
                     [[1, 48, 48, 1], "derivative", 16]]))


@pytest.mark.slow
def test_memory_estimate_bounds_measured_peak_large():
    # k = 50 ... 100 on a narrow net whose layers still select (D_k = k + 1 < 128), and wider
    # two-input nets
    _check(_measure([[[1, 128, 128, 1], "derivative", 50], [[1, 128, 128, 1], "derivative", 75],
                     [[1, 128, 128, 1], "derivative", 100], [[2, 256, 256, 1], "derivative", 16],
                     [[3, 128, 128, 1], "derivative", 5], [[2, 512, 512, 1], "collocation", 10]]))


def test_layers_that_keep_all_neurons_cost_nothing():
    # D_k >= d_l in every layer: nothing is selected, no features are needed
    dom = jc.Ball(2, 1.0)
    assert taylor_compile_cost((2, 2), (200, 200), (32, 32)) == (0, 0.0)
    parts = memory_estimate(jc.derivative_matching(200), [2, 32, 32, 1], jnp.float64, dom,
                            compilation=True)
    assert "Taylor pass" not in parts and "compiling the Taylor pass" not in parts
    assert parts["selection"] == 0
    # one selecting layer deep in the net: the pass runs through the layers above it
    b, s = taylor_compile_cost((2, 2), (30, 30), (32, 1000))
    assert b > 0 and s == 2 * (1e-4 * 30**3 + 0.5)


def test_refuses_a_compile_that_would_not_finish():
    p = jc.init_mlp(jax.random.PRNGKey(0), [1, 400, 400, 1])
    with pytest.raises(ValueError, match=r"compress: order 300 on \[1, 400, 400, 1\] would "
                                         r"compile a Taylor pass for about \d+ s"):
        jc.compress(p, jc.derivative_matching(300), activation="sigmoid")

