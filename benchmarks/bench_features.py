"""Benchmark the derivative-feature backends and end-to-end compression on the Fig. 2 network.

The network is the paper's random ``[2, 1024, 1024, 1024, 1024, 2]`` sigmoid MLP
(``jc.init_mlp(PRNGKey(0), ...)``). For k = 2..10 the script measures

1. ``jc.features.derivative_features(params, activation="sigmoid", order=k, backend=b)`` under
   ``jax.jit`` for ``b`` in ``taylor`` (default), ``jet`` and ``jacfwd`` (nested ``jax.jacfwd``,
   the slow reference): compile time (``jax.jit(f).lower(params).compile()``, tracing included)
   and the median run time of the compiled function over ``--repeats`` calls after one warm-up.
   Before any timing it checks the answer: the ``jet`` and ``jacfwd`` features must agree with
   the ``taylor`` ones to ``max|Z_b - Z_taylor| / max|Z_taylor| < 1e-8`` (float64) or ``1e-3``
   (float32); otherwise the script exits with status 1. ``jacfwd`` is only run while its
   previous k finished compile + run within ``--jacfwd-cap`` seconds; larger k are recorded
   as skipped.
2. ``jc.compress(params, activation="sigmoid", order=k, radius=1.0)``: the first call
   (compilation included) and the median warm call.

It prints the device, jax version, dtype and matmul precision, a table as it goes, and the
speed-up of ``taylor`` over ``jacfwd`` in compile + run at k = 8 against the required 10x (a
lower bound ``cap / taylor`` when the cap skipped jacfwd at k = 8; exit status 2 when a measured
speed-up misses 10x). Results go to ``<out>/bench_features_<platform>_<dtype>.json`` and
``.png`` (compile time and run time vs k, log scale); ``--quick`` appends ``_quick`` to the
names so it never overwrites a full run.

Run (from the repository root; the same command on CPU and GPU, JAX picks the device)::

    python benchmarks/bench_features.py                    # full run, float64, k = 2..10
    python benchmarks/bench_features.py --dtype float32    # float32 (HIGHEST matmuls, no TF32)
    python benchmarks/bench_features.py --quick            # width 64, k = 2..4: a smoke test
    JAX_PLATFORMS=cpu python benchmarks/bench_features.py  # force CPU on a GPU machine

On a 2-core CPU the full float64 run takes tens of minutes, nearly all of it compiling nested
``jacfwd`` (DESIGN section 3); on a GPU, install ``jax[cuda12]`` and run the same command.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import time
from pathlib import Path

import jax
import jaxlib
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

import jaxcompress as jc  # noqa: E402

BACKENDS = ("taylor", "jet", "jacfwd")
REFERENCE = "taylor"
ACTIVATION = "sigmoid"
RADIUS = 1.0
DEPTH = 4
SPEEDUP_K = 8
SPEEDUP_TARGET = 10.0
#: max|Z_b - Z_taylor| / max|Z_taylor| must stay below this (dtype-dependent rounding).
TOLERANCE = {"float64": 1e-8, "float32": 1e-3}
PRECISION = "highest"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kmin", type=int, default=None, help="smallest order (default 2)")
    p.add_argument("--kmax", type=int, default=None, help="largest order (default 10)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per case (default 5)")
    p.add_argument("--width", type=int, default=None, help="hidden width (default 1024)")
    p.add_argument("--jacfwd-cap", type=float, default=120.0,
                   help="skip jacfwd at k once its compile + run at k-1 exceeded this (seconds)")
    p.add_argument("--dtype", choices=tuple(TOLERANCE), default="float64")
    p.add_argument("--quick", action="store_true",
                   help="width 64, k = 2..4, 2 repeats (a smoke test for the test suite)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                   help="results folder (default: benchmarks/results)")
    args = p.parse_args(argv)
    quick = {"kmin": 2, "kmax": 4, "repeats": 2, "width": 64}
    full = {"kmin": 2, "kmax": 10, "repeats": 5, "width": 1024}
    for name, value in C.mode_config(args, full, quick, tuple(full)).items():
        setattr(args, name, value)
    if not 0 <= args.kmin <= args.kmax:
        p.error(f"need 0 <= --kmin <= --kmax, got {args.kmin}, {args.kmax}")
    if args.repeats < 1 or args.width < 1:
        p.error("--repeats and --width must be >= 1")
    return args


def _block(tree):
    return jax.block_until_ready(tree)


def time_features(params, backend: str, k: int, repeats: int):
    """Compile and run ``derivative_features`` under jit; returns (row, features)."""
    f = functools.partial(jc.features.derivative_features, activation=ACTIVATION, order=k,
                          backend=backend)
    with jax.default_matmul_precision(PRECISION):
        t0 = time.perf_counter()
        lowered = jax.jit(f).lower(params)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        feats = _block(compiled(params))  # the warm-up call; its answer is the one checked
        t3 = time.perf_counter()
        run_s, times = C.median_time(lambda: compiled(params), repeats)
        run_min_s = min(times)
    row = {
        "kind": "features", "backend": backend, "k": k, "status": "ok",
        "trace_s": t1 - t0, "xla_compile_s": t2 - t1, "compile_s": t2 - t0,
        "first_run_s": t3 - t2, "run_s": run_s, "run_min_s": run_min_s,
        "total_s": (t2 - t0) + run_s,
    }
    return row, feats


def agreement(feats, ref) -> float:
    """``max |Z - Z_ref| / max |Z_ref|`` over all hidden layers."""
    diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
               for a, b in zip(feats, ref, strict=True))
    scale = max(float(np.max(np.abs(np.asarray(b, np.float64)))) for b in ref)
    return diff / scale


def time_compress(params, k: int, repeats: int) -> dict:
    def call():
        return jc.compress(params, activation=ACTIVATION, order=k, radius=RADIUS)

    with jax.default_matmul_precision(PRECISION):
        t0 = time.perf_counter()
        small, info = _block(call())
        first = time.perf_counter() - t0
        warm, times = C.median_time(call, repeats)
        warm_min = min(times)
    return {
        "kind": "compress", "backend": "compress", "k": k, "status": "ok",
        "first_call_s": first, "run_s": warm, "run_min_s": warm_min,
        "sizes": jc.layer_sizes(small),
        "rank": [int(layer.rank) for layer in info.layers],
        "max_residual": max(float(layer.residual) for layer in info.layers),
    }


HEADER = (f"{'backend':<9}{'k':>3}{'D_k':>5}{'trace s':>9}{'compile s':>11}{'run ms':>11}"
          f"{'comp+run s':>12}  rel. diff vs taylor")


def _feature_line(row: dict, d_k: int) -> str:
    if row["status"] == "skipped":
        return f"{row['backend']:<9}{row['k']:>3}{d_k:>5}  skipped: {row['reason']}"
    agree = row.get("rel_diff")
    agree_s = "(reference)" if agree is None else f"{agree:.2e}"
    return (f"{row['backend']:<9}{row['k']:>3}{d_k:>5}{row['trace_s']:>9.2f}"
            f"{row['compile_s']:>11.2f}{1e3 * row['run_s']:>11.3f}{row['total_s']:>12.2f}  "
            f"{agree_s}")


def _speedup(rows: list[dict], cap: float) -> dict:
    def find(backend):
        return next((r for r in rows if r["kind"] == "features" and r["backend"] == backend
                     and r["k"] == SPEEDUP_K), None)

    taylor, jacfwd = find("taylor"), find("jacfwd")
    out = {"k": SPEEDUP_K, "target": SPEEDUP_TARGET, "metric": "compile_s + run_s (median)"}
    if taylor is None or jacfwd is None:
        out.update(value=None, lower_bound=False, meets_target=None,
                   note=f"k = {SPEEDUP_K} not in the measured range")
    elif jacfwd["status"] == "ok":
        value = jacfwd["total_s"] / taylor["total_s"]
        out.update(value=value, lower_bound=False, meets_target=value >= SPEEDUP_TARGET,
                   taylor_s=taylor["total_s"], jacfwd_s=jacfwd["total_s"])
    else:
        # jacfwd at k - 1 already exceeded the cap and its cost grows with k: >= cap at k.
        value = cap / taylor["total_s"]
        out.update(value=value, lower_bound=True,
                   meets_target=True if value >= SPEEDUP_TARGET else None,
                   taylor_s=taylor["total_s"], jacfwd_s=None,
                   note=f"jacfwd skipped at k = {SPEEDUP_K} (cap {cap:g} s): cap / taylor is a "
                        "lower bound")
    return out


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, (ax_c, ax_r) = plt.subplots(1, 2, figsize=(11, 4.4))
    styles = {"taylor": "o-", "jet": "s-", "jacfwd": "^-", "compress": "D--"}
    for backend in (*BACKENDS, "compress"):
        ok = [r for r in rows if r["backend"] == backend and r["status"] == "ok"]
        if not ok:
            continue
        ks = [r["k"] for r in ok]
        if backend == "compress":
            ax_c.semilogy(ks, [r["first_call_s"] for r in ok], styles[backend],
                          label="compress (first call)")
            ax_r.semilogy(ks, [1e3 * r["run_s"] for r in ok], styles[backend],
                          label="compress (end to end)")
        else:
            ax_c.semilogy(ks, [r["compile_s"] for r in ok], styles[backend], label=backend)
            ax_r.semilogy(ks, [1e3 * r["run_s"] for r in ok], styles[backend], label=backend)
    skipped = sorted(r["k"] for r in rows if r["status"] == "skipped")
    if skipped:
        cap = result["jacfwd_cap_s"]
        ax_c.axhline(cap, color="gray", ls=":", lw=1)
        ax_c.annotate(f"jacfwd cap {cap:g} s: skipped k = {', '.join(map(str, skipped))}",
                      (0.02, cap), xycoords=("axes fraction", "data"), fontsize=7,
                      color="gray", xytext=(0, 3), textcoords="offset points")
    ax_c.set_ylabel("compile time [s] (trace + XLA)")
    ax_r.set_ylabel("run time [ms] (median, compiled)")
    for ax in (ax_c, ax_r):
        ax.set_xlabel("Taylor order k")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xticks(sorted({r["k"] for r in rows}))
    dev = result["device"]
    sizes = result["sizes"]
    sp = result["speedup"]
    sp_s = ("" if sp["value"] is None else
            f"; taylor vs jacfwd at k={sp['k']}: {'>= ' if sp['lower_bound'] else ''}"
            f"{sp['value']:.3g}x")
    where = f"{dev['device_kind']} ({dev['platform']}"
    where += f", {dev['host_cpus']} cores)" if dev["platform"] == "cpu" else ")"
    fig.suptitle(f"derivative features of {sizes} {ACTIVATION}: {where}, {result['dtype']}{sp_s}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    # compile times must be real compilations, never persistent-cache hits
    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp

    dev = jax.devices()[0]
    device = {"device": str(dev), "platform": dev.platform,
              "device_kind": getattr(dev, "device_kind", str(dev)),
              "num_devices": jax.device_count(), "host_cpus": os.cpu_count(),
              "host_cpu": C.cpu_model()}
    load_start = C.loadavg()
    tol = TOLERANCE[args.dtype]
    sizes = [2] + [args.width] * DEPTH + [2]
    print(f"# device: {device['device']}, platform {device['platform']}, "
          f"device_kind {device['device_kind']} (host: {device['host_cpus']} x "
          f"{device['host_cpu']}; load average 1/5/15 min {load_start})")
    print(f"# jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
          f"jaxcompress {jc.__version__}, dtype {args.dtype}, matmul precision HIGHEST "
          f"(library Precision.HIGHEST + jax.default_matmul_precision('{PRECISION}'))")
    print(f"# network {sizes} {ACTIVATION}, k = {args.kmin}..{args.kmax}, repeats "
          f"{args.repeats}, jacfwd cap {args.jacfwd_cap:g} s, agreement tolerance {tol:g}",
          flush=True)
    params = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=jnp.dtype(args.dtype))
    params = _block(params)

    rows: list[dict] = []
    agree: dict[str, dict[str, float | None]] = {b: {} for b in BACKENDS if b != REFERENCE}
    failures: list[str] = []
    jacfwd_over_cap_at: int | None = None
    print("\n## derivative_features under jax.jit (compile s = trace + XLA compile; run ms = "
          "median of compiled calls)")
    print(HEADER, flush=True)
    for k in range(args.kmin, args.kmax + 1):
        d_k = jc.taylor.num_monomials(2, k)
        ref = None
        for backend in BACKENDS:
            if backend == "jacfwd" and jacfwd_over_cap_at is not None:
                row = {"kind": "features", "backend": backend, "k": k, "status": "skipped",
                       "reason": f"compile + run at k = {jacfwd_over_cap_at} exceeded the "
                                 f"{args.jacfwd_cap:g} s cap"}
                agree[backend][str(k)] = None
            else:
                row, feats = time_features(params, backend, k, args.repeats)
                if backend == REFERENCE:
                    ref = feats
                else:
                    rel = agreement(feats, ref)
                    row["rel_diff"] = rel
                    agree[backend][str(k)] = rel
                    if not rel < tol:
                        failures.append(f"{backend} at k = {k}: rel. diff {rel:.3e} >= {tol:g}")
                if backend == "jacfwd" and row["total_s"] > args.jacfwd_cap:
                    jacfwd_over_cap_at = k
                del feats
            row["num_features"] = d_k
            rows.append(row)
            print(_feature_line(row, d_k), flush=True)

    print("\n## compress end to end (first call includes compilation; warm = median)")
    print(f"{'k':>3}{'width':>7}{'first call s':>14}{'warm ms':>10}{'max residual':>14}",
          flush=True)
    for k in range(args.kmin, args.kmax + 1):
        row = time_compress(params, k, args.repeats)
        row["num_features"] = jc.taylor.num_monomials(2, k)
        rows.append(row)
        print(f"{k:>3}{row['sizes'][1]:>7}{row['first_call_s']:>14.2f}"
              f"{1e3 * row['run_s']:>10.3f}{row['max_residual']:>14.2e}", flush=True)

    speedup = _speedup(rows, args.jacfwd_cap)
    print(f"\n## speed-up of taylor over jacfwd at k = {SPEEDUP_K} ({speedup['metric']})")
    if speedup["value"] is None:
        verdict = f"not measured: {speedup['note']}"
    else:
        bound = ">= " if speedup["lower_bound"] else ""
        if speedup["meets_target"]:
            verdict = f"PASS ({bound}{speedup['value']:.1f}x >= {SPEEDUP_TARGET:g}x)"
        elif speedup["lower_bound"]:
            verdict = (f"UNDETERMINED (lower bound {speedup['value']:.1f}x < "
                       f"{SPEEDUP_TARGET:g}x; raise --jacfwd-cap)")
        else:
            verdict = f"FAIL ({speedup['value']:.1f}x < {SPEEDUP_TARGET:g}x)"
        if speedup["lower_bound"]:
            verdict += f"; {speedup['note']}"
    speedup["verdict"] = verdict
    print(verdict)
    print(f"## agreement with taylor (tolerance {tol:g}): "
          + ("ok" if not failures else "FAILED: " + "; ".join(failures)), flush=True)

    result = {
        "benchmark": "bench_features",
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "device": device,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "jaxcompress_version": jc.__version__,
        "dtype": args.dtype,
        "precision": "HIGHEST (Precision.HIGHEST in the library, default_matmul_precision "
                     f"'{PRECISION}' around every call)",
        "sizes": sizes, "activation": ACTIVATION, "radius": RADIUS,
        "kmin": args.kmin, "kmax": args.kmax, "repeats": args.repeats, "quick": args.quick,
        "jacfwd_cap_s": args.jacfwd_cap,
        "load_avg_1_5_15": {"start": load_start, "end": C.loadavg()},
        "agreement": {"reference": REFERENCE, "tolerance": tol,
                      "metric": "max|Z_b - Z_taylor| / max|Z_taylor| over all hidden layers",
                      "passed": not failures, "failures": failures, "rel_diff": agree},
        "speedup": speedup,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"bench_features_{device['platform']}_{args.dtype}" + ("_quick" if args.quick else "")
    json_path, png_path = args.out / f"{stem}.json", args.out / f"{stem}.png"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, png_path)
    print(f"# wrote {json_path} and {png_path}", flush=True)
    if failures:
        return 1
    if speedup["meets_target"] is False:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
