"""Helpers shared by the paper-figure benchmarks (``fig1_single_layer.py``, ``fig2_deep.py``,
``fig4_runtime.py``): command-line options, the device / environment record, progress lines,
JSON output, the float rounding floor and small plotting utilities.

Conventions (the same as ``bench_features.py``):

* ``--quick`` (tiny sizes, a smoke test), ``--dtype float32|float64`` (float64 enables
  ``jax_enable_x64``), ``--out`` (default ``benchmarks/results``);
* every script prints its device, dtype and matmul precision first and wraps library calls in
  ``jax.default_matmul_precision("highest")`` (the library itself requests
  ``Precision.HIGHEST`` in every matmul, so float32 on NVIDIA GPUs never drops to TF32);
* results go to ``<out>/<name>_<platform>_<dtype>[_quick].json`` and ``.png``, so a quick run
  never overwrites a full one; the JSON names the device, the load average of the machine and
  what the paper reports for the figure (DESIGN.md section 2).

Import :mod:`jax` only after :func:`configure` has run: it sets ``XLA_FLAGS`` for single-threaded
runs, which XLA reads once, when the CPU backend starts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
PRECISION = "highest"
PRECISION_NOTE = ("HIGHEST (Precision.HIGHEST in every library matmul, plus "
                  f"jax.default_matmul_precision('{PRECISION}') around every call)")
SINGLE_THREAD_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def parser(doc: str, *, default_dtype: str) -> argparse.ArgumentParser:
    """An argument parser with the shared options ``--quick``, ``--dtype`` and ``--out``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes: a smoke test of a few seconds (results get a _quick suffix)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=default_dtype,
                   help=f"parameter and compute dtype (default {default_dtype}; float64 enables "
                        "jax_enable_x64)")
    p.add_argument("--out", type=Path, default=RESULTS,
                   help="results folder (default: benchmarks/results)")
    p.add_argument("--replot", type=Path, default=None, metavar="JSON",
                   help="only redraw the PNG of a saved result JSON (beside it) and exit")
    return p


SUP_ERROR_OPTIONS = ("samples", "steps", "starts")


def add_sup_error_options(p: argparse.ArgumentParser, full: dict, quick: dict) -> None:
    """``--samples``, ``--steps``, ``--starts`` of ``jc.sup_error``, defaulting per mode."""
    for name in SUP_ERROR_OPTIONS:
        p.add_argument(f"--{name}", type=int, default=None,
                       help=f"sup_error {name} (default {full[name]}; quick {quick[name]})")


def mode_config(args, full: dict, quick: dict, names: Sequence[str]) -> dict:
    """The ``full`` or ``quick`` configuration, with the options ``names`` given overriding."""
    cfg = dict(quick if args.quick else full)
    for name in names:
        if getattr(args, name) is not None:
            cfg[name] = getattr(args, name)
    return cfg


def parse_error_sweep(doc: str, argv, *, full: dict, quick: dict):
    """Command line of the Fig 1 / Fig 2 error sweeps: ``(args, cfg)``."""
    p = parser(doc, default_dtype="float32")
    p.add_argument("--rtol", type=parse_rtols, default=None,
                   help="comma-separated rank thresholds: 'default' (the library's, 10 eps), a "
                        "number, or '<number>eps' (default: default)")
    p.add_argument("--seed", type=int, default=0, help="teacher PRNG seed (default 0)")
    add_sup_error_options(p, full, quick)
    args = p.parse_args(argv)
    if args.rtol is None:
        args.rtol = ["default"]
    return args, mode_config(args, full, quick, SUP_ERROR_OPTIONS)


def configure(dtype: str, *, single_thread: bool = False, fast_compile: str = "off") -> None:
    """Set up JAX for ``dtype``; optionally restrict XLA (and BLAS) on CPU to one thread.

    ``fast_compile``: the library's compile choice on a CPU (``JAXCOMPRESS_FAST_COMPILE``,
    :mod:`jaxcompress.compiling`) unless the caller's environment sets it. ``off`` by default:
    the benchmarks time warm runs of the optimised program (``compile_latency.py`` measures
    what a user waits for, under the library's default ``auto``).

    Must run before the first JAX computation (``single_thread`` before ``import jax``).
    """
    os.environ.setdefault("JAXCOMPRESS_FAST_COMPILE", fast_compile)
    if single_thread:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} {SINGLE_THREAD_XLA_FLAGS}".strip()
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = "1"
    import jax

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    # compile times must be real compilations, never persistent-cache hits
    jax.config.update("jax_enable_compilation_cache", False)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> list[float] | None:
    """The 1/5/15-minute load average (the machine may be shared), or None where unknown."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def environment() -> dict[str, Any]:
    """Device, versions, host and load: the ``device`` and ``env`` entries of every JSON."""
    import jax
    import jaxlib

    import jaxcompress as jc

    dev = jax.devices()[0]
    return {
        "device": {"device": str(dev), "platform": dev.platform,
                   "device_kind": getattr(dev, "device_kind", str(dev)),
                   "num_devices": jax.device_count(), "host_cpus": os.cpu_count(),
                   "host_cpu": cpu_model()},
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "jaxcompress_version": jc.__version__,
        "python": platform.python_version(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "load_avg_1_5_15": {"start": loadavg()},
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def device_label(env: dict[str, Any]) -> str:
    """A short device name for titles: ``cpu (2 x Intel Xeon ...)`` or the accelerator's kind."""
    dev = env["device"]
    if dev["platform"] == "cpu":
        return f"CPU, {dev['host_cpus']} cores ({dev['host_cpu']})"
    return f"{dev['device_kind']} ({dev['platform']})"


def print_header(env: dict[str, Any], dtype: str, lines: Sequence[str] = ()) -> None:
    dev = env["device"]
    print(f"# device: {dev['device']}, platform {dev['platform']}, device_kind "
          f"{dev['device_kind']} (host: {dev['host_cpus']} x {dev['host_cpu']}; load average "
          f"1/5/15 min {env['load_avg_1_5_15']['start']})")
    print(f"# jax {env['jax_version']}, jaxlib {env['jaxlib_version']}, jaxcompress "
          f"{env['jaxcompress_version']}, dtype {dtype}, matmul precision {PRECISION_NOTE}")
    if env["xla_flags"]:
        print(f"# XLA_FLAGS={env['xla_flags']}")
    for line in lines:
        print(f"# {line}")
    sys.stdout.flush()


class Progress:
    """Numbered, timestamped, flushed progress lines: ``[ 3/80  12.4 s] message``."""

    def __init__(self, total: int):
        self.total = total
        self.count = 0
        self.t0 = time.perf_counter()

    def __call__(self, message: str) -> None:
        self.count += 1
        width = len(str(self.total))
        print(f"[{self.count:>{width}}/{self.total} {self.elapsed():7.1f} s] {message}",
              flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0


def result_stem(name: str, env: dict[str, Any], dtype: str, quick: bool) -> str:
    return f"{name}_{env['device']['platform']}_{dtype}" + ("_quick" if quick else "")


def _jsonable(obj: Any) -> Any:
    """Plain JSON: numpy scalars/arrays become Python numbers/lists, NaN/inf become None."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy / jax arrays and scalars
        return _jsonable(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(result), indent=2, allow_nan=False) + "\n")


def finish(env: dict[str, Any], start: float) -> None:
    """Record the end load average and the total wall time in ``env``."""
    env["load_avg_1_5_15"]["end"] = loadavg()
    env["wall_s"] = round(time.perf_counter() - start, 2)


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """Median wall-clock of ``repeats`` calls of ``fn`` (each blocked until ready), all times."""
    import jax

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def permuted_copy(params, seed: int = 0):
    """The same network with the neurons of every hidden layer permuted.

    Mathematically the identical function; evaluated in floating point its sums run in another
    order, so ``sup |F - F_perm|`` measures the rounding floor of evaluating the teacher, the
    smallest error any compressed network can be measured to have.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    out = [dict(layer) for layer in params]
    for i in range(len(params) - 1):
        perm = rng.permutation(params[i]["kernel"].shape[1])
        out[i]["kernel"] = out[i]["kernel"][:, perm]
        out[i]["bias"] = out[i]["bias"][perm]
        out[i + 1]["kernel"] = out[i + 1]["kernel"][perm]
    return out


def sup_error(jc, teacher, student, *, activation: str, domain, key,
              **kw) -> tuple[float, str | None]:
    """``jc.sup_error`` with a fallback: ``(error, note)``.

    Before commit 20b780c, ``jc.sup_error``'s projected ascent returned NaN in float32 when the
    error's gradient was exactly zero at a start point (its ``1e-300`` norm guard underflowed to
    0: ``0 / 0``), which happens at the rounding floor; the two Fig 2 float32 rows marked in the
    committed results were measured then. The library is fixed; the guard stays so that a
    non-finite local search can never pass silently: the error is re-measured on the same
    uniform samples without the local search (a valid, slightly weaker lower bound on the sup)
    and ``note`` says so.
    """
    err = float(jc.sup_error(teacher, student, activation=activation, domain=domain, key=key,
                             **kw))
    if math.isfinite(err):
        return err, None
    sampled = {**kw, "local_search_steps": 0}
    err = float(jc.sup_error(teacher, student, activation=activation, domain=domain, key=key,
                             **sampled))
    return err, "local search gave a non-finite value: samples only"


def parse_rtols(text: str) -> list[str]:
    """``"default,10eps"`` -> ``["default", "10eps"]`` (validated)."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    for s in items:
        if s != "default":
            try:
                float(s[:-3] if s.endswith("eps") else s)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(
                    f"--rtol: {s!r} is neither 'default', a number nor '<number>eps'") from exc
    if not items:
        raise argparse.ArgumentTypeError("--rtol: give at least one value")
    return items


def rtol_value(spec: str, dtype: str) -> float | None:
    """The ``rtol`` passed to ``jc.compress``: None for the library default, else a number."""
    if spec == "default":
        return None
    if spec.endswith("eps"):
        import numpy as np

        return float(spec[:-3]) * float(np.finfo(dtype).eps)
    return float(spec)


def first_floor_k(ks: Sequence[int], errs: Sequence[float], factor: float = 2.0) -> int | None:
    """The first order ``k`` whose error is within ``factor`` of the smallest error over ``k``."""
    finite = [e for e in errs if e is not None and math.isfinite(e)]
    if not finite:
        return None
    floor = min(finite)
    return next(k for k, e in zip(ks, errs, strict=True)
                if e is not None and math.isfinite(e) and e <= factor * floor)


def decay_rate(ks: Sequence[int], errs: Sequence[float], floor: float) -> float | None:
    """Fitted geometric rate ``q`` (error ~ q^k) over the orders before the error reaches
    ``3 x floor``; None when fewer than two such points exist."""
    import numpy as np

    pts = [(k, math.log(e)) for k, e in zip(ks, errs, strict=True)
           if e is not None and e > 3.0 * floor]
    # stop at the first point that reached the floor: later points above it are noise
    kept = []
    for k, le in pts:
        if kept and k != kept[-1][0] + 1:
            break
        kept.append((k, le))
    if len(kept) < 2:
        return None
    slope = np.polyfit([k for k, _ in kept], [le for _, le in kept], 1)[0]
    return float(math.exp(slope))


def draw_floor(ax, floors) -> None:
    """Shade the band of rounding floors (one per radius) on a log-y error plot."""
    vals = [f for f in floors if f is not None and f > 0]
    if not vals:
        return
    lo, hi = min(vals), max(vals)
    if hi < 1.3 * lo:
        lo, hi = lo / 1.15, hi * 1.15
    ax.axhspan(lo, hi, color="gray", alpha=0.25, lw=0)


def rounding_floors(jc, teacher, *, activations: Sequence[str], radii: Sequence[float],
                    key, n_samples: int, progress: Progress) -> dict[str, dict[str, float]]:
    """``{activation: {str(R): floor}}``: the error between ``teacher`` and a permuted copy.

    Measured on ``n_samples`` uniform points of each ball (no local search: the two networks
    are the same function, so there is no maximum to climb to).
    """
    import jax

    d_in = teacher[0]["kernel"].shape[0]
    permuted = permuted_copy(teacher)
    floors: dict[str, dict[str, float]] = {}
    with jax.default_matmul_precision(PRECISION):
        for act in activations:
            floors[act] = {}
            for r in radii:
                f = float(jc.sup_error(teacher, permuted, activation=act,
                                       domain=jc.Ball(d_in, r), key=key, n_samples=n_samples,
                                       local_search_steps=0))
                floors[act][str(r)] = f
                progress(f"{act:<8} R={r:<4g} rounding floor {f:.3e}")
    return floors


def save_results(args, env: dict[str, Any], name: str, result: dict[str, Any],
                 plot: Callable[[dict, Path], None], *, suffix: str = "") -> tuple[Path, Path]:
    """Write ``<out>/<name>_<platform>_<dtype>[suffix][_quick].json`` and draw its ``.png``."""
    stem = result_stem(name, env, args.dtype, args.quick) + ("" if args.quick else suffix)
    json_path, png_path = args.out / f"{stem}.json", args.out / f"{stem}.png"
    write_json(json_path, result)
    plot(result, png_path)
    return json_path, png_path


def write_error_sweep(args, env: dict[str, Any], start: float, name: str, paper: dict, *,
                      config: dict, rows: list[dict], floors: dict, comparison: dict,
                      plot: Callable[[dict, Path], None],
                      summary: Callable[[dict], None]) -> int:
    """Finish a Fig 1 / Fig 2 error sweep: JSON + PNG + summary; exit status 1 on a NaN error."""
    bad = [x for x in rows if not math.isfinite(x["sup_error"])]
    fallbacks = sum(1 for x in rows if x["sup_error_note"])
    if fallbacks:
        print(f"# {fallbacks} sup errors measured on samples only (non-finite local search)")
    finish(env, start)
    result = {
        "benchmark": name, "paper": paper, "env": env, "device": env["device"],
        "dtype": args.dtype, "precision": PRECISION_NOTE, "quick": args.quick,
        "config": config, "rounding_floor": floors, "sup_error_fallbacks": fallbacks,
        "comparison": comparison, "rows": rows,
    }
    paths = save_results(args, env, name, result, plot)
    summary(result)
    print_written(paths, env)
    if bad:
        print(f"# FAILED: {len(bad)} non-finite errors", flush=True)
        return 1
    return 0


def print_written(paths: Sequence[Path], env: dict[str, Any]) -> None:
    print(f"# wrote {' and '.join(str(p) for p in paths)} ({env['wall_s']:.0f} s; load average "
          f"{env['load_avg_1_5_15']})", flush=True)


def save_figure(fig, path: Path, *, rect=(0, 0, 1, 1), dpi: int = 120) -> None:
    """``tight_layout(rect)`` (room for a figure legend below), save, close."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def replot(path: Path, plot: Callable[[dict, Path], None]) -> int:
    """Redraw the PNG of a saved result (``--replot results/<stem>.json``)."""
    result = json.loads(Path(path).read_text())
    png = Path(path).with_suffix(".png")
    plot(result, png)
    print(f"# wrote {png}")
    return 0


def begin(parse: Callable, argv, plot: Callable[[dict, Path], None], *,
          fast_compile: str = "off"):
    """The start of a benchmark's ``main``: note the start time and parse ``argv``; then either
    redraw the PNG of ``--replot`` (returns its exit status) or configure JAX for
    ``args.dtype`` and return ``(start, args, cfg, env)`` with the environment record.

    ``parse(argv)`` returns ``(args, cfg)``; the script must not have run a JAX computation yet.
    ``fast_compile``: see :func:`configure`.
    """
    start = time.perf_counter()
    args, cfg = parse(argv)
    if args.replot is not None:
        return replot(args.replot, plot)
    configure(args.dtype, fast_compile=fast_compile)
    return start, args, cfg, environment()


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def run_error_sweep(argv, *, doc: str, name: str, paper: dict, full: dict, quick: dict,
                    activations: Sequence[str], layer_orders: Sequence[str], compare, plot,
                    summary) -> int:
    """The Fig 1 / Fig 2 sweep: sup error of derivative matching over activations, rank
    thresholds, layer orders, k and radii, with the rounding floors; JSON + PNG + summary.

    ``compare(rows, floors, radii, kmax, variants)`` turns the rows into the paper comparison;
    ``plot(result, path)`` and ``summary(result)`` draw and print it. Every row records the
    activation, threshold, layer order, radius, k, hidden sizes and per-layer ranks, residuals,
    ``max |C|``, the error estimate, the sup error and the compression and measurement times.
    """
    start = time.perf_counter()
    args, cfg = parse_error_sweep(doc, argv, full=full, quick=quick)
    if args.replot is not None:
        return replot(args.replot, plot)
    configure(args.dtype)
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    env = environment()
    sizes, radii, kmax = cfg["sizes"], cfg["radii"], cfg["kmax"]
    d_in = sizes[0]
    rtols = {v: rtol_value(v, args.dtype) for v in args.rtol}
    print_header(env, args.dtype, [
        f"network {sizes} (seed {args.seed}), activations {tuple(activations)}, radii {radii}, "
        f"k = 0..{kmax}, layer orders {tuple(layer_orders)}, rtol {rtols}",
        f"sup_error: {cfg['samples']} uniform samples + {cfg['steps']} projected ascent steps "
        f"from the {cfg['starts']} worst"])
    teacher = jax.block_until_ready(
        jc.init_mlp(jax.random.PRNGKey(args.seed), sizes, dtype=jnp.dtype(args.dtype)))
    err_kw = {"n_samples": cfg["samples"], "local_search_steps": cfg["steps"],
              "n_starts": cfg["starts"]}
    key = jax.random.PRNGKey(1)
    n_rows = len(activations) * len(rtols) * len(layer_orders) * (kmax + 1) * len(radii)
    progress = Progress(n_rows + len(activations) * len(radii))
    floors = rounding_floors(jc, teacher, activations=activations, radii=radii, key=key,
                             n_samples=4 * cfg["samples"], progress=progress)
    rows: list[dict] = []
    with jax.default_matmul_precision(PRECISION):
        for act in activations:
            for variant, rtol in rtols.items():
                for order in layer_orders:
                    for k in range(kmax + 1):
                        for r in radii:
                            method = jc.derivative_matching(
                                k, layer_order=order, selector=jc.PivotedQR(rtol=rtol))
                            domain = jc.Ball(d_in, r)
                            t0 = time.perf_counter()
                            small, info = jax.block_until_ready(
                                jc.compress(teacher, method, activation=act, domain=domain))
                            t1 = time.perf_counter()
                            err, note = sup_error(jc, teacher, small, activation=act,
                                                  domain=domain, key=key, **err_kw)
                            t2 = time.perf_counter()
                            ranks = [int(layer.rank) for layer in info.layers]
                            row = {"activation": act, "rtol_spec": variant, "rtol": rtol,
                                   "layer_order": order, "radius": r, "k": k,
                                   "width": jc.layer_sizes(small)[1],
                                   "sizes": jc.layer_sizes(small), "ranks": ranks,
                                   "residuals": [float(layer.residual) for layer in info.layers],
                                   "max_coef": [float(layer.max_coef) for layer in info.layers],
                                   "error_estimate": float(info.error_estimate),
                                   "sup_error": err, "sup_error_note": note,
                                   "compress_s": round(t1 - t0, 3),
                                   "error_s": round(t2 - t1, 3)}
                            rows.append(row)
                            progress(f"{act:<8} rtol {variant:<8} {order:<8} k={k:<2} "
                                     f"R={r:<4g} width {row['width']:>4} ranks {ranks} sup "
                                     f"error {err:.3e}  (compress {t1 - t0:.2f} s, error "
                                     f"{t2 - t1:.2f} s)" + (f" [{note}]" if note else ""))
    config = {"sizes": sizes, "seed": args.seed, "activations": list(activations),
              "layer_orders": list(layer_orders), "radii": radii, "kmax": kmax,
              "rtol": list(rtols), "rtol_values": rtols,
              "sup_error": {"n_samples": cfg["samples"], "local_search_steps": cfg["steps"],
                            "n_starts": cfg["starts"], "key": 1},
              "compress": "jc.compress(teacher, jc.derivative_matching(k, layer_order=order, "
                          "selector=jc.PivotedQR(rtol=rtol)), activation=act, "
                          "domain=jc.Ball(d_in, R))"}
    comparison = compare(rows, floors, radii, kmax, list(rtols))
    return write_error_sweep(args, env, start, name, paper, config=config, rows=rows,
                             floors=floors, comparison=comparison, plot=plot, summary=summary)


#: The compression methods the comparison benchmarks measure, by name: ``(factory, uses data)``
#: where ``factory(jc, k, *, data, seed, oversample)`` returns the method (``jc`` is passed in so
#: this module never imports JAX before :func:`configure`). Every method compresses all hidden
#: layers to ``D_k = C(2 + k, 2)``.
METHODS: dict[str, tuple[Callable, bool]] = {
    "derivative": (lambda jc, k, **_: jc.derivative_matching(k), False),
    "derivative+maxvol": (lambda jc, k, **_: jc.derivative_matching(k, selector=jc.MaxVol()),
                          False),
    "derivative+omp": (lambda jc, k, **_: jc.derivative_matching(k, selector=jc.OMP()), False),
    "taylor_multi": (lambda jc, k, **_: jc.derivative_matching(k, centers="auto"), False),
    "collocation": (lambda jc, k, *, oversample, **_: jc.collocation(
        k, oversample=oversample, selector=jc.PivotedQR(), layer_order="backward"), False),
    "collocation+maxvol": (lambda jc, k, *, oversample, **_: jc.collocation(
        k, oversample=oversample, selector=jc.MaxVol(), layer_order="backward"), False),
    "collocation+omp": (lambda jc, k, *, oversample, **_: jc.collocation(
        k, oversample=oversample, selector=jc.OMP(), layer_order="backward"), False),
    "collocation+omp/fwd": (lambda jc, k, *, oversample, **_: jc.collocation(
        k, oversample=oversample), False),
    "data": (lambda jc, k, *, data, **_: jc.data_matching(
        data, order=k, selector=jc.PivotedQR(), layer_order="backward"), True),
    "data+omp/fwd": (lambda jc, k, *, data, **_: jc.data_matching(data, order=k), True),
    "weight_norm+lstsq": (lambda jc, k, *, oversample, **_: jc.collocation(
        k, oversample=oversample, selector=jc.select.WeightNorm(), layer_order="backward"), False),
    "random+lstsq": (lambda jc, k, *, oversample, seed, **_: jc.collocation(
        k, oversample=oversample, selector=jc.select.RandomChoice(jax_key(1000 + seed)),
        layer_order="backward"), False),
}


def jax_key(seed: int):
    import jax

    return jax.random.PRNGKey(seed)


def make_method(jc, name: str, k: int, *, data=None, seed: int = 0, oversample: int = 4):
    """The method ``name`` of :data:`METHODS` at order ``k``."""
    factory, uses_data = METHODS[name]
    if uses_data and data is None:
        raise ValueError(f"method {name!r} needs data")
    return factory(jc, k, data=data, seed=seed, oversample=oversample)


def compress_cost(sizes: Sequence[int], k: int, itemsize: int, *, error_points: int = 256
                  ) -> dict[str, float]:
    """FLOPs and bytes that backward-order derivative matching cannot avoid, and how they split.

    Per hidden layer ``l`` (widths ``d_{l-1} -> d_l``, ``D = C(d_in + k, d_in)`` monomials,
    ``P = C(2 d_in + k, 2 d_in)`` coefficient pairs): the Taylor pass's matmul
    ``2 D d_{l-1} d_l`` and its ``k`` truncated products ``2 k P d_l``; the selection's pivoted
    QR ``4 D^2 d_l``; the re-weighting ``2 m d_l d_{l+1}`` (``m = min(D, d_l)`` kept, ``d_{l+1}``
    the next layer's kept width in backward order); and the error estimate's two forward passes
    at ``error_points`` points. Bytes: reading every parameter once. A lower bound on the work
    (the library's compiled program does more: index gathers, the Horner loop's copies).
    """
    d_in = sizes[0]
    big_d = math.comb(d_in + k, d_in)
    pairs = math.comb(2 * d_in + k, 2 * d_in)
    hidden = list(sizes[1:-1])
    kept = [min(big_d, w) for w in hidden] + [sizes[-1]]
    taylor = sum(2 * big_d * a * b + 2 * k * pairs * b
                 for a, b in zip(sizes[:-2], hidden, strict=True))
    select = sum(4 * big_d * big_d * w for w in hidden)
    reweight = sum(2 * kept[i] * hidden[i] * kept[i + 1] for i in range(len(hidden)))
    student = [d_in] + kept
    estimate = 2 * error_points * (sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True))
                                   + sum(a * b for a, b in zip(student[:-1], student[1:],
                                                               strict=True)))
    from jaxcompress.mlp import param_count  # deferred: this module starts before JAX

    params = param_count(sizes)
    return {"flops": float(taylor + select + reweight + estimate), "taylor_flops": float(taylor),
            "select_flops": float(select), "reweight_flops": float(reweight),
            "estimate_flops": float(estimate), "bytes": float(params * itemsize)}


def machine_throughput(dtype: str, *, n: int = 1024, repeats: int = 5, copy_n: int = 4096
                       ) -> dict[str, float]:
    """This run's measured matmul FLOP/s (``n x n`` by ``n x n``) and copy bytes/s (``x + 1`` on
    ``copy_n x copy_n``), in ``dtype``.

    The roofline of :func:`compress_cost` uses them: ``max(flops / F, bytes / B)`` is the time
    the work would take at the speed the machine just showed.
    """
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), dtype) * 0.5
    mm = jax.jit(lambda x: jnp.matmul(x, x, precision=PRECISION))
    jax.block_until_ready(mm(a))
    t_mm, _ = median_time(lambda: mm(a), repeats)
    big = jnp.ones((copy_n, copy_n), dtype)
    cp = jax.jit(lambda x: x + 1.0)
    jax.block_until_ready(cp(big))
    t_cp, _ = median_time(lambda: cp(big), repeats)
    return {"matmul_flops_per_s": 2.0 * n**3 / t_mm,
            "copy_bytes_per_s": 2.0 * big.size * big.dtype.itemsize / t_cp,
            "matmul_n": n, "copy_n": copy_n}


def roofline(cost: dict[str, float], machine: dict[str, float]) -> float:
    """Seconds the work of :func:`compress_cost` takes at the throughputs just measured."""
    return max(cost["flops"] / machine["matmul_flops_per_s"],
               cost["bytes"] / machine["copy_bytes_per_s"])
