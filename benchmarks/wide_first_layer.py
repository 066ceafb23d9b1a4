"""Wide first layers: ``jc.compress`` of ``[2, d, 1]`` sigmoid networks at k = 11, d = 16k..128k.

Issue 21's target: the warm compression of ``[2, d, 1]`` at k = 11 (``D_11 = 78`` kept neurons),
float64, one thread, takes at most five same-run 2048^2 float64 matmuls at d = 128,000 and grows
linearly in d. The first hidden layer's derivative features are in closed form
(``jaxcompress.taylor.affine_features``: ``s_|alpha|(u0) |alpha|!/alpha! w^alpha``, ``O(D_k d)``);
what is left is mostly the pivoted QR of the ``78 x d`` feature matrix.

For every width the script

1. compresses once (the first call: trace + compile + run) and checks the answer: the sup error
   of the compressed network against the teacher on the unit disk (``jc.sup_error``, uniform
   samples plus a short projected local search) must be finite and below ``CHECK_TOL``,
   otherwise the script exits with status 1;
2. times ``--repeats`` warm calls of ``jc.compress`` and of the feature step alone
   (``jc.features.derivative_features``), each paired with the median of a same-run 2048^2 float64
   matmul and of a 4096^2 copy measured right before and after it (the machine may be shared:
   the load average is recorded per width).

Output: ``<out>/wide_first_layer_<platform>_<dtype>[_quick].{json,png}``: warm time and feature
time vs d (log-log, with a d^1 guide), and the warm time in units of the same-run matmul against
the target of 5.

Run (from the repository root)::

    python benchmarks/wide_first_layer.py                 # d = 16k, 32k, 64k, 128k; one thread
    python benchmarks/wide_first_layer.py --quick --out /tmp/wide   # tiny, seconds
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "wide_first_layer"
ACTIVATION = "sigmoid"
ORDER = 11
RADIUS = 1.0
MATMUL_N = 2048
TARGET_MATMULS = 5.0
CHECK_TOL = 1e-6
CHECK_KW = {"n_samples": 2048, "local_search_steps": 10, "n_starts": 4}
QUICK_CHECK_KW = {"n_samples": 256, "local_search_steps": 0, "n_starts": 4}
FULL = {"widths": [16_000, 32_000, 64_000, 128_000], "repeats": 5}
QUICK = {"widths": [500, 1000], "repeats": 2}
ISSUE = {
    "source": "issue 21, item 4",
    "target": f"warm jc.compress of [2, d, 1] at k = {ORDER}, float64, one thread: <= "
              f"{TARGET_MATMULS:g} same-run {MATMUL_N}^2 float64 matmuls at d = 128,000, "
              "linear in d",
}


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--threads", choices=("1", "all"), default="1",
                   help="CPU threads for XLA and BLAS (default 1)")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"warm runs per width (default {FULL['repeats']})")
    p.add_argument("--widths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma-separated widths d")
    args = p.parse_args(argv)
    cfg = C.mode_config(args, FULL, QUICK, ("repeats", "widths"))
    if cfg["repeats"] < 1:
        p.error("--repeats must be >= 1")
    if args.replot is None:  # before C.begin imports jax: XLA reads its flags once
        C.configure(args.dtype, single_thread=args.threads == "1")
    return args, cfg


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(result["rows"], key=lambda r: r["d"])
    ds = [r["d"] for r in rows]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.6))
    slope = result["fit"]["warm_loglog_slope"]
    ax_t.loglog(ds, [r["warm_median_s"] for r in rows], "o-", color="C0",
                label="jc.compress, warm median" + ("" if slope is None else
                                                    f" (slope {slope:.2f})"))
    ax_t.loglog(ds, [r["features_median_s"] for r in rows], "s-", color="C2",
                label="derivative features alone (closed form)")
    ax_t.loglog(ds, [r["matmul_median_s"] for r in rows], "^:", color="gray",
                label=f"same-run {MATMUL_N}^2 matmul")
    t0 = rows[0]["warm_median_s"]
    ax_t.loglog([ds[0], ds[-1]], [t0, t0 * ds[-1] / ds[0]], "--", color="C0", lw=1, alpha=0.5,
                label="~ d")
    ax_t.set_xlabel(f"first-layer width d  (network [2, d, 1], k = {ORDER}, D_k = "
                    f"{rows[0]['num_features']})")
    ax_t.set_ylabel("wall-clock [s]")
    ax_t.set_xticks(ds)
    ax_t.set_xticklabels([f"{d // 1000}k" if d >= 1000 else str(d) for d in ds])
    ax_t.minorticks_off()
    ax_t.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=8)
    ax_t.set_title("time", fontsize=10)

    ax_m.semilogx(ds, [r["warm_in_matmuls"] for r in rows], "o-", color="C0",
                  label="jc.compress warm / same-run matmul")
    ax_m.semilogx(ds, [r["features_in_matmuls"] for r in rows], "s-", color="C2",
                  label="features / same-run matmul")
    ax_m.axhline(TARGET_MATMULS, color="C3", ls="--", lw=1,
                 label=f"target at d = 128k: {TARGET_MATMULS:g} matmuls")
    ax_m.set_xticks(ds)
    ax_m.set_xticklabels([f"{d // 1000}k" if d >= 1000 else str(d) for d in ds])
    ax_m.minorticks_off()
    ax_m.set_ylim(bottom=0)
    ax_m.set_xlabel("first-layer width d")
    ax_m.set_ylabel(f"multiples of a {MATMUL_N}^2 float64 matmul")
    ax_m.grid(True, which="both", alpha=0.3)
    ax_m.legend(fontsize=8)
    ax_m.set_title("in units of the machine's own matmul (same run)", fontsize=10)
    env = result["env"]
    fig.suptitle(f"[2, d, 1] {ACTIVATION}, k = {ORDER}, {result['dtype']}, threads "
                 f"{result['config']['threads']}, {C.device_label(env)}; load avg "
                 f"{env['load_avg_1_5_15']['start']} -> {env['load_avg_1_5_15'].get('end')} "
                 "(shared machine)", fontsize=9)
    C.save_figure(fig, path)


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun
    start, args, cfg, env = begun
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxcompress as jc

    check_kw = QUICK_CHECK_KW if args.quick else CHECK_KW
    C.print_header(env, args.dtype, [
        f"[2, d, 1] {ACTIVATION}, k = {ORDER}, R = {RADIUS:g}, d = {cfg['widths']}, "
        f"{cfg['repeats']} warm runs, threads {args.threads}",
        f"check before timing: sup_error ({check_kw}) < {CHECK_TOL:g}",
        "the machine may be shared with other jobs: every time is paired with a same-run "
        f"{MATMUL_N}^2 matmul and a copy, and the load average is recorded"])
    dtype = jnp.dtype(args.dtype)
    a = jnp.full((MATMUL_N, MATMUL_N), 0.5, dtype)
    big = jnp.ones((4096, 4096), dtype)
    matmul = jax.jit(lambda x: jnp.matmul(x, x, precision=C.PRECISION))
    copy = jax.jit(lambda x: x + 1.0)
    jax.block_until_ready((matmul(a), copy(big)))

    def machine():
        t_mm, _ = C.median_time(lambda: matmul(a), 3)
        t_cp, _ = C.median_time(lambda: copy(big), 3)
        return t_mm, t_cp

    domain = jc.Ball(2, RADIUS)
    method = jc.derivative_matching(ORDER)
    progress = C.Progress(len(cfg["widths"]))
    rows, failures = [], []
    for d in cfg["widths"]:
        teacher = jax.block_until_ready(jc.init_mlp(jax.random.PRNGKey(0), [2, d, 1],
                                                    dtype=dtype))

        def call(teacher=teacher):
            return jc.compress(teacher, method, activation=ACTIVATION, domain=domain)

        def features(teacher=teacher):
            return jc.features.derivative_features(teacher, activation=ACTIVATION, order=ORDER)

        with jax.default_matmul_precision(C.PRECISION):
            t0 = time.perf_counter()
            small, info = jax.block_until_ready(call())
            first = time.perf_counter() - t0
            err, note = C.sup_error(jc, teacher, small, activation=ACTIVATION, domain=domain,
                                    key=jax.random.PRNGKey(1), **check_kw)
            ok = math.isfinite(err) and err < CHECK_TOL
            jax.block_until_ready(features())
            before = machine()
            warm, times = C.median_time(call, cfg["repeats"])
            feat, feat_times = C.median_time(features, cfg["repeats"])
            after = machine()
        t_mm = float(np.median([before[0], after[0]]))
        t_cp = float(np.median([before[1], after[1]]))
        row = {"d": d, "sizes": [2, d, 1], "k": ORDER,
               "num_features": jc.taylor.num_monomials(2, ORDER),
               "new_sizes": jc.layer_sizes(small), "rank": int(info.layers[0].rank),
               "first_call_s": first, "warm_median_s": warm, "warm_s": times,
               "features_median_s": feat, "features_s": feat_times,
               "matmul_median_s": t_mm, "matmul_s_before_after": [before[0], after[0]],
               "copy_4096sq_median_s": t_cp, "copy_s_before_after": [before[1], after[1]],
               "copy_bytes_per_s": 2.0 * big.size * big.dtype.itemsize / t_cp,
               "warm_in_matmuls": warm / t_mm, "features_in_matmuls": feat / t_mm,
               "error_estimate": float(info.error_estimate), "sup_error": err,
               "sup_error_note": note, "check_passed": ok,
               "load_avg_1min": C.loadavg()[0] if C.loadavg() else None}
        rows.append(row)
        if not ok:
            failures.append(f"d={d}: sup error {err:.3e} (tolerance {CHECK_TOL:g})")
        progress(f"d={d:>7}: first {first:6.2f} s  warm {warm:7.3f} s ({warm / t_mm:5.1f} "
                 f"matmuls)  features {1e3 * feat:8.1f} ms  matmul {1e3 * t_mm:6.1f} ms  sup "
                 f"error {err:.2e} {'ok' if ok else 'FAILED'}  load {row['load_avg_1min']}")
        del teacher, small, info

    ds = [r["d"] for r in rows]
    fit = {"warm_loglog_slope": None, "features_loglog_slope": None}
    if len(ds) >= 2:
        logd = np.log(ds)
        fit = {"warm_loglog_slope": float(np.polyfit(logd, np.log([r["warm_median_s"]
                                                                   for r in rows]), 1)[0]),
               "features_loglog_slope": float(np.polyfit(logd, np.log(
                   [r["features_median_s"] for r in rows]), 1)[0])}
    at_max = rows[-1]
    C.finish(env, start)
    result = {
        "benchmark": NAME, "issue": ISSUE, "env": env, "device": env["device"],
        "dtype": args.dtype, "precision": C.PRECISION_NOTE, "quick": args.quick,
        "config": {**cfg, "threads": args.threads, "activation": ACTIVATION, "order": ORDER,
                   "radius": RADIUS, "matmul_n": MATMUL_N,
                   "check": {**check_kw, "tolerance": CHECK_TOL},
                   "shared_machine_note": "the development CPU is shared with other jobs "
                                          "(see load_avg_1_5_15 and the per-row load_avg_1min); "
                                          "compare each time with its same-run matmul"},
        "fit": fit,
        "target": {"d": at_max["d"], "warm_in_matmuls": at_max["warm_in_matmuls"],
                   "limit": TARGET_MATMULS,
                   "met": at_max["d"] >= 128_000 and at_max["warm_in_matmuls"] <= TARGET_MATMULS},
        "checks": {"passed": not failures, "failures": failures},
        "rows": rows,
    }
    paths = C.save_results(args, env, NAME, result, plot)
    def slope(x):
        return "n/a" if x is None else f"{x:.2f}"

    print(f"\n## warm time ~ d^{slope(fit['warm_loglog_slope'])}, features ~ "
          f"d^{slope(fit['features_loglog_slope'])}; at d = {at_max['d']}: "
          f"{at_max['warm_in_matmuls']:.1f} same-run matmuls (target {TARGET_MATMULS:g})")
    C.print_written(paths, env)
    if failures:
        print("# FAILED checks: " + "; ".join(failures), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
