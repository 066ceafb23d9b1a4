"""The proof search's boxes split over several devices (ours): one device against all of them.

``jc.verify(..., devices=...)`` splits every batch of boxes over the devices (``jax.sharding``:
the boxes along one mesh axis, the weights replicated; no hand-written communication). The
boxes are independent, so the bracket must be one device's (to rounding): the script checks
that first (exit status 1 otherwise), then times the search on one device and on all of them
(median of ``--repeats`` runs, each compiled first), on the same pairs as
``benchmarks/verify.py``'s tanh rows (a ``jc.init_mlp`` teacher against its
``jc.collocation(k)`` student on the unit box).

On a CPU the devices are XLA host devices: ``--host-devices N`` (default 4) sets
``--xla_force_host_platform_device_count`` before JAX starts. They share the machine's cores,
so the speed-up is bounded by the cores (a 2-core machine: at most 2x); on a machine with
several accelerators, each is a device.

Output: ``<out>/verify_sharded_<platform>_float64[_quick].{json,png}`` (per case: seconds on
1 and on N devices, the speed-up, both brackets, boxes).

Run (from the repository root)::

    python benchmarks/verify_sharded.py                  # the cases below, 4 host devices
    python benchmarks/verify_sharded.py --quick --out /tmp/vs
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "verify_sharded"
#: name -> (teacher sizes, collocation order)
CASES = {"tanh_2x256x256": ([2, 256, 256, 1], 6), "tanh_3x128x128": ([3, 128, 128, 1], 4),
         "tanh_4x64x64": ([4, 64, 64, 1], 3)}
QUICK_CASES = {"tanh_2x32x32": ([2, 32, 32, 1], 3)}


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--host-devices", type=int, default=4,
                   help="XLA host devices on a CPU (default 4)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs (default 3; quick 1)")
    args = p.parse_args(argv)
    if args.host_devices < 2:
        p.error("--host-devices must be >= 2")
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count="
                               f"{args.host_devices}").strip()
    cfg = {"repeats": args.repeats or (1 if args.quick else 3), "tol": 0.01,
           "cases": QUICK_CASES if args.quick else CASES}
    return args, cfg


def run_case(name, sizes, k, cfg, log):
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    teacher = jc.init_mlp(jax.random.PRNGKey(0), sizes, dtype=jnp.float64)
    d = sizes[0]
    box = jc.Box(jax.device_put(-jnp.ones(d)), jax.device_put(jnp.ones(d)))
    student, _ = jc.compress(teacher, jc.collocation(k), activation="tanh", domain=box)
    row = {"case": name, "sizes": sizes, "order": k, "runs": {}}
    for label, devices in (("1", jax.devices()[:1]), (str(len(jax.devices())), jax.devices())):
        def once(devices=devices):
            return jc.verify(teacher, student, activation="tanh", domain=box, tol=cfg["tol"],
                             max_seconds=float("inf"), devices=devices)

        first = once()  # compiles
        times, results = [], []
        for _ in range(cfg["repeats"]):
            t0 = time.perf_counter()
            results.append(once())
            times.append(time.perf_counter() - t0)
        res = results[len(results) // 2]
        row["runs"][label] = {"devices": len(devices), "seconds": times,
                              "median_s": statistics.median(times),
                              "first_call_s": first.seconds,
                              "compile_s": first.compile_seconds, "lower": res.lower,
                              "upper": res.upper, "status": res.status, "boxes": res.boxes}
        log(f"{name}: {len(devices)} device(s): median {statistics.median(times):.2f} s, "
            f"[{res.lower:.6e}, {res.upper:.6e}] {res.status}, {res.boxes:,} boxes")
    one, many = row["runs"]["1"], row["runs"][str(len(jax.devices()))]
    row["speedup"] = one["median_s"] / many["median_s"]
    row["same_bracket"] = (abs(one["upper"] - many["upper"]) <= 1e-9 * one["upper"]
                           and abs(one["lower"] - many["lower"]) <= 1e-9 * one["upper"])
    return row


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["cases"]
    n = result["devices"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["runs"]["1"]["median_s"] for r in rows], 0.4,
           label="1 device")
    ax.bar([x + 0.2 for x in xs], [r["runs"][str(n)]["median_s"] for r in rows], 0.4,
           label=f"{n} devices")
    for x, r in zip(xs, rows, strict=True):
        ax.annotate(f"{r['speedup']:.2f}x", (x + 0.2, r["runs"][str(n)]["median_s"]),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), [r["case"] for r in rows], fontsize=8)
    ax.set_ylabel("seconds to converge (median)")
    ax.set_title(f"jc.verify: boxes split over {n} devices ({C.device_label(result['env'])})",
                 fontsize=9)
    ax.legend(fontsize=8)
    C.save_figure(fig, path)


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot)
    if isinstance(begun, int):
        return begun
    start, args, cfg, env = begun
    import jax

    def log(line):
        print(line, flush=True)

    C.print_header(env, args.dtype, [
        f"{len(jax.devices())} devices; {cfg['repeats']} timed run(s) per setting (median), "
        f"tol {cfg['tol']}, each setting compiled first"])
    with jax.default_matmul_precision(C.PRECISION):
        rows = [run_case(name, sizes, k, cfg, log) for name, (sizes, k) in cfg["cases"].items()]
    C.finish(env, start)
    result = {"benchmark": NAME, "env": env, "device": env["device"], "dtype": args.dtype,
              "precision": C.PRECISION_NOTE, "quick": args.quick, "devices": len(jax.devices()),
              "config": {k: v for k, v in cfg.items() if k != "cases"}, "cases": rows}
    paths = C.save_results(args, env, NAME, result, plot)
    bad = [r["case"] for r in rows if not r["same_bracket"]]
    log("## speed-up: " + ", ".join(f"{r['case']} {r['speedup']:.2f}x" for r in rows))
    if bad:
        log("## FAILED: the bracket differs between one device and several: " + ", ".join(bad))
    C.print_written(paths, env)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
