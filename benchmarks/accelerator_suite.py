"""The accelerator suite: check, then time, everything worth measuring on a GPU, in one command.

Run it first whenever a GPU machine is lent (``python benchmarks/accelerator_suite.py``, at most
about 10 minutes on one H200), then commit what it writes: ``*_gpu_*`` JSON and PNG files under
``benchmarks/results/`` naming the device. On a CPU it runs with ``--quick`` (seconds per step,
the same code). Steps, in order, each in its own time budget; a step that fails or runs out of
time is recorded as such and the suite goes on:

``correctness``
    Before timing anything: compressions on the accelerator (float32 and float64) against the
    same compressions on the host CPU in the same dtype: the same widths and ranks (float32
    keeps fewer neurons than float64 where its rounding floor is reached, on every device), sup
    errors within 2x the host's float64 compression (plus the float32 rounding floor), and the
    derivative features within rounding of the host's float64 ones.
``verify``
    ``verify.py --no-check --repeats 1 --cases`` :data:`VERIFY_CASES`: ``jc.verify``'s proven
    brackets with the batches of boxes on the accelerator (soundness checked against sampled
    maxima before anything is timed; the certificate check is a host-CPU matter, timed by the
    CPU runs of the script).
``features``
    ``bench_features.py --jacfwd-cap 5``: the three feature backends and the whole compress
    call, k = 2..10 (nested jacfwd, the slow reference, stops once one order took 5 s).
``fig4``
    ``fig4_runtime.py --threads all --widths 1024,4096 --depths 1,8``: compress wall-clock vs
    width and depth, each warm time as a multiple of its roofline (8 of the script's 26
    networks: its checks take ~14 s a network on an H200).
``roofline``
    The Fig 2 network ``[2, 1024 x 4, 2]`` at k = 10 (targets: warm <= 10 ms, first call <= 5 s)
    and ``[2, w, w, 2]`` at k = 10 for w = 1024 ... the largest whose memory estimate fits
    (target at w = 16,384: within 10x of the roofline), float32 at highest matmul precision.
``stages``
    ``compress_stages.py --widths 16384,1024 --repeats 3`` in the suite's own process (its
    budget is not enforced there): one compress call split into features, selection
    (``pivoted_qr`` and ``greedy_gs``) and the whole call, for ``[2, w, w, 2]`` and the Fig 2
    network.
``fig1``
    ``fig1_single_layer.py --dtype float64``.
``teachers``
    The Table 1 teachers trained with the paper's protocol (``teachers.py --config paper``:
    full-batch Adam on the 20,000 points, a checkpoint every 250 steps up to 2,500, the best
    by validation MSE), then ``fig3_post_training.py --teachers paper`` on them.

Output: ``<out>/accelerator_suite_<platform>[_quick].json`` (every step's status, time and
numbers; rewritten after each step, so a run cut short keeps what it finished) and
``..._roofline.png``; the scripts it starts write their own results beside it. ``--deadline``
bounds the whole run: each step's budget is clipped to the time left and the steps after it are
recorded as skipped. JAX's preallocation of 75% of GPU memory is turned off (unless the caller
set ``XLA_PYTHON_CLIENT_PREALLOCATE``): the scripts the suite starts need the memory its own
process would otherwise hold.

Run (from the repository root)::

    python benchmarks/accelerator_suite.py                 # on a GPU machine
    python benchmarks/accelerator_suite.py --quick         # on a CPU: every step, tiny sizes
    python benchmarks/accelerator_suite.py --steps correctness,roofline
    python benchmarks/accelerator_suite.py --deadline 540  # inside a 10-minute lease
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "accelerator_suite"
HERE = Path(__file__).resolve().parent
STEPS = ("correctness", "verify", "fig4", "features", "roofline", "stages", "fig1", "teachers")
#: Seconds each step may take (full run; --quick divides by 4), adding up to ~10 min with
#: ``--deadline`` clipping the last ones. The steps with no GPU figure yet come first.
BUDGET = {"correctness": 60, "verify": 120, "features": 90, "fig4": 120, "roofline": 120,
          "stages": 170, "fig1": 120, "teachers": 180}
#: The rows of ``benchmarks/verify.py`` the suite runs (its cheaper ones; the certificate check
#: runs on the host CPU and is timed by the CPU runs of the script, so it is skipped here).
VERIFY_CASES = "exact,col6_box,col6_ball,relu,skip,softplus3"
TARGETS = {"fig2_warm_s": 0.010, "fig2_first_call_s": 5.0, "wide_over_roofline": 10.0}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes (a CPU smoke test)")
    p.add_argument("--steps", default=",".join(STEPS),
                   help=f"comma-separated steps to run, of {','.join(STEPS)}")
    p.add_argument("--out", type=Path, default=C.RESULTS, help="results folder")
    p.add_argument("--deadline", type=float, default=None,
                   help="seconds the whole run may take: step budgets are clipped to the time "
                        "left, later steps skipped (default: the steps' own budgets)")
    args = p.parse_args(argv)
    if args.deadline is not None and args.deadline <= 0:
        p.error("--deadline must be positive")
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in args.steps if s not in STEPS]
    if bad:
        p.error(f"unknown steps {bad}; choose from {STEPS}")
    return args


def run_script(args, script: str, extra: list[str], budget: float, out: Path | None = None
               ) -> dict:
    """Run ``benchmarks/<script>`` (``--quick`` in quick mode) with a time budget, writing to
    ``out`` (default ``--out``)."""
    cmd = [sys.executable, str(HERE / script), *extra, "--out", str(out or args.out)]
    if args.quick:
        cmd.insert(2, "--quick")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget,
                              cwd=HERE.parent)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        tail = (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired as exc:
        status, tail = f"over its {budget:.0f} s budget", str(exc.stdout or "")[-1500:]
    return {"command": " ".join(cmd[1:]), "status": status,
            "seconds": round(time.perf_counter() - t0, 1), "log_tail": tail}


def correctness(jax, jnp, np, jc, quick: bool) -> dict:
    """The accelerator's compressions against the host CPU's in float64."""
    cpu = jax.devices("cpu")[0]
    width, order = (32, 3) if quick else (256, 6)
    out, failures = {}, []
    for act in ("sigmoid",) if quick else ("sigmoid", "gelu"):
        teacher64 = jc.init_mlp(jax.random.PRNGKey(0), [2, width, width, width, 2])
        method, domain = jc.derivative_matching(order), jc.Ball(2, 1.0)
        host = {}
        with jax.default_device(cpu):
            ref_params = jax.device_put(teacher64, cpu)
            for dtype in ("float64", "float32"):
                host[dtype] = jc.compress(_cast(jnp, ref_params, dtype), method,
                                          activation=act, domain=domain)
            ref = host["float64"][0]
            ref_err = float(jc.sup_error(ref_params, ref, activation=act, domain=domain,
                                         key=jax.random.PRNGKey(1), n_samples=2048))
            ref_z = jc.features.derivative_features(ref_params, activation=act, order=order)
        for dtype in ("float64", "float32"):
            t = _cast(jnp, teacher64, dtype)
            small, info = jc.compress(t, method, activation=act, domain=domain)
            host_small, host_info = host[dtype]
            err = float(jc.sup_error(teacher64, [{k: jnp.asarray(v, jnp.float64) for k, v in
                                                  layer.items()} for layer in small],
                                     activation=act, domain=domain, key=jax.random.PRNGKey(1),
                                     n_samples=2048))
            z = jc.features.derivative_features(t, activation=act, order=order)
            zdiff = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b))))
                        / float(np.max(np.abs(np.asarray(b)))) for a, b in zip(z, ref_z,
                                                                                strict=True))
            floor = 1e-5 if dtype == "float32" else 1e-12
            same_shape = jc.layer_sizes(small) == jc.layer_sizes(host_small)
            ranks = [int(li.rank) for li in info.layers]
            host_ranks = [int(li.rank) for li in host_info.layers]
            ok = (same_shape and ranks == host_ranks and err <= 2 * ref_err + floor
                  and zdiff <= (1e-4 if dtype == "float32" else 1e-10))
            out[f"{act}/{dtype}"] = {"sup_error": err, "cpu_float64_sup_error": ref_err,
                                     "features_rel_diff": zdiff, "ranks": ranks,
                                     f"cpu_{dtype}_ranks": host_ranks, "ok": ok}
            if not ok:
                failures.append(f"{act}/{dtype}")
    return {"cases": out, "failures": failures, "status": "ok" if not failures else "FAILED"}


def _cast(jnp, params, dtype):
    return [{k: jnp.asarray(v, dtype) for k, v in layer.items()} for layer in params]


def roofline(jax, jnp, jc, quick: bool, dtype: str, machine: dict, budget: float) -> dict:
    """Warm and first-call times of compress against the roofline, up to the widest that fits."""
    from jaxcompress.planning import memory_estimate
    from jaxcompress.taylor import memory_limit

    k = 3 if quick else 10
    cases = [("fig2", [2, 32, 32, 2] if quick else [2, 1024, 1024, 1024, 1024, 2])]
    widths = [64] if quick else [1024, 2048, 4096, 8192, 16384, 32768]
    cases += [(f"w{w}", [2, w, w, 2]) for w in widths]
    rows, t_start = [], time.perf_counter()
    method = jc.derivative_matching(k)
    for name, sizes in cases:
        domain = jc.Ball(2, 1.0)
        need = sum(memory_estimate(method, sizes, jnp.dtype(dtype), domain).values())
        if need > memory_limit() or time.perf_counter() - t_start > budget:
            rows.append({"case": name, "sizes": sizes, "skipped": "memory" if need >
                         memory_limit() else "time budget"})
            continue
        teacher = jax.block_until_ready(jc.init_mlp(jax.random.PRNGKey(0), sizes,
                                                    dtype=jnp.dtype(dtype)))

        def call(teacher=teacher, domain=domain):
            return jc.compress(teacher, method, activation="sigmoid", domain=domain)

        with jax.default_matmul_precision(C.PRECISION):
            jax.clear_caches()
            t0 = time.perf_counter()
            small, info = jax.block_until_ready(call())
            first = time.perf_counter() - t0
            est = float(info.error_estimate)
            warm, times = C.median_time(call, 5)
        cost = C.compress_cost(sizes, k, jnp.dtype(dtype).itemsize)
        bound = C.roofline(cost, machine)
        rows.append({"case": name, "sizes": sizes, "k": k, "first_call_s": first,
                     "warm_median_s": warm, "warm_s": times, "roofline_s": bound,
                     "warm_over_roofline": warm / bound, "cost": cost, "error_estimate": est})
        print(f"  {name:<6} {str(sizes):<34} first {first:6.2f} s  warm {1e3 * warm:8.2f} ms  "
              f"roofline {1e3 * bound:8.3f} ms  ({warm / bound:5.1f}x)  estimate {est:.1e}",
              flush=True)
        del teacher, small, info
    fig2 = next((r for r in rows if r["case"] == "fig2" and "warm_median_s" in r), None)
    wide = next((r for r in rows if r["case"] == "w16384" and "warm_median_s" in r), None)
    targets = {}
    if fig2 is not None and not quick:
        targets["fig2_warm_s"] = {"value": fig2["warm_median_s"],
                                  "target": TARGETS["fig2_warm_s"],
                                  "met": fig2["warm_median_s"] <= TARGETS["fig2_warm_s"]}
        targets["fig2_first_call_s"] = {"value": fig2["first_call_s"],
                                        "target": TARGETS["fig2_first_call_s"],
                                        "met": fig2["first_call_s"]
                                        <= TARGETS["fig2_first_call_s"]}
    if wide is not None:
        targets["wide_over_roofline"] = {"value": wide["warm_over_roofline"],
                                         "target": TARGETS["wide_over_roofline"],
                                         "met": wide["warm_over_roofline"]
                                         <= TARGETS["wide_over_roofline"]}
    return {"rows": rows, "targets": targets, "machine": machine, "status": "ok"}


def stages(args) -> dict:
    """``compress_stages.py`` in this process (its imports and JAX already warm)."""
    import compress_stages

    extra = ["--quick"] if args.quick else ["--widths", "16384,1024", "--repeats", "3"]
    code = compress_stages.main([*extra, "--out", str(args.out)])
    return {"command": "compress_stages.py " + " ".join(extra), "exit": code,
            "status": "ok" if code == 0 else "FAILED"}


def main(argv=None) -> int:
    start = time.perf_counter()
    args = parse(argv)
    # before JAX starts: the child scripts need the GPU memory a preallocating parent would hold
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    dtype = "float32"
    C.configure("float64")  # float64 available; the roofline runs in float32
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jaxcompress as jc

    env = C.environment()
    platform = env["device"]["platform"]
    C.print_header(env, "float32 and float64", [
        f"steps {args.steps}" + (" (quick)" if args.quick else ""),
        "on a CPU without --quick this takes hours: pass --quick" if platform == "cpu"
        and not args.quick else ""])
    scale = 0.25 if args.quick else 1.0
    budget = {s: BUDGET[s] * scale + (60 if args.quick else 0) for s in STEPS}
    report: dict = {}
    stem = f"{NAME}_{platform}" + ("_quick" if args.quick else "")
    json_path = args.out / f"{stem}.json"

    def write(done: bool) -> None:
        C.write_json(json_path, {"benchmark": NAME, "env": env, "device": env["device"],
                                 "quick": args.quick, "precision": C.PRECISION_NOTE,
                                 "budget_s": budget, "deadline_s": args.deadline,
                                 "complete": done, "steps": report})

    for step in args.steps:
        t0 = time.perf_counter()
        if args.deadline is not None:
            left = args.deadline - (t0 - start)
            if left < 10:
                report[step] = {"status": f"skipped: the {args.deadline:.0f} s deadline",
                                "seconds": 0.0}
                print(f"## {step}: {report[step]['status']}", flush=True)
                write(False)
                continue
            budget[step] = min(budget[step], left)
        print(f"## {step}", flush=True)
        try:
            if step == "correctness":
                report[step] = correctness(jax, jnp, np, jc, args.quick)
            elif step == "verify":
                # the proof search's batches of boxes on the accelerator (float64)
                report[step] = run_script(args, "verify.py", ["--no-check", "--repeats", "1"]
                                          + ([] if args.quick else ["--cases", VERIFY_CASES]),
                                          budget[step])
            elif step == "features":
                # jacfwd stops once one order took 5 s (at k = 7 it took 30 s on an H200)
                report[step] = run_script(args, "bench_features.py",
                                          [] if args.quick else ["--jacfwd-cap", "5"],
                                          budget[step])
            elif step == "fig4":
                # 8 of the script's 26 networks: each takes ~14 s on an H200 (its checks)
                report[step] = run_script(args, "fig4_runtime.py", ["--threads", "all"] + (
                    [] if args.quick else ["--widths", "1024,4096", "--depths", "1,8"]),
                    budget[step])
            elif step == "roofline":
                machine = C.machine_throughput(dtype, n=512 if args.quick else 4096)
                print(f"  measured matmul {machine['matmul_flops_per_s'] / 1e12:.3f} TFLOP/s, "
                      f"copy {machine['copy_bytes_per_s'] / 1e9:.1f} GB/s ({dtype})", flush=True)
                report[step] = roofline(jax, jnp, jc, args.quick, dtype, machine, budget[step])
            elif step == "stages":
                report[step] = stages(args)
            elif step == "fig1":
                report[step] = run_script(args, "fig1_single_layer.py", ["--dtype", "float64"],
                                          budget[step])
            elif step == "teachers":
                # quick: the cache fig3 --quick reads (<out>/teachers); else the shared one
                cache = args.out / "teachers" if args.quick else HERE / "results" / "teachers"
                train = run_script(args, "teachers.py",
                                   ["--config", "paper_quick" if args.quick else "paper"]
                                   + (["--seeds", "0", "1"] if args.quick else []),
                                   budget[step] * 0.6, out=cache)
                fig3 = run_script(args, "fig3_post_training.py", ["--teachers", "paper"],
                                  budget[step] * 0.4)
                report[step] = {"train": train, "fig3": fig3,
                                "status": "ok" if train["status"] == fig3["status"] == "ok"
                                else "FAILED"}
        except Exception as exc:  # noqa: BLE001 - record the failure, go on with the next step
            report[step] = {"status": f"error: {type(exc).__name__}: {exc}"}
        report[step]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"## {step}: {report[step]['status']} ({report[step]['seconds']} s)", flush=True)
        write(False)
    C.finish(env, start)
    write(True)
    result = {"env": env, "steps": report}
    paths = [json_path]
    if "roofline" in report and "rows" in report["roofline"]:
        png = args.out / f"{stem}_roofline.png"
        plot(result, png)
        paths.append(png)
    C.print_written(paths, env)
    failed = [s for s, r in report.items() if r["status"] != "ok"]
    if failed:
        print(f"# steps not ok: {failed}", flush=True)
    return 1 if "correctness" in failed else 0


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["steps"]["roofline"]["rows"] if "warm_median_s" in r]
    wide = [r for r in rows if r["case"] != "fig2"]
    fig, ax = plt.subplots(figsize=(6, 4))
    if wide:
        ws = [r["sizes"][1] for r in wide]
        ax.loglog(ws, [r["warm_median_s"] for r in wide], "o-", label="warm median")
        ax.loglog(ws, [r["roofline_s"] for r in wide], "k--", label="roofline (FLOPs, bytes)")
    for r in rows:
        if r["case"] == "fig2":
            ax.axhline(r["warm_median_s"], color="tab:red", alpha=0.5,
                       label=f"Fig 2 net warm ({1e3 * r['warm_median_s']:.1f} ms)")
    ax.set_xlabel("teacher width w  ([2, w, w, 2], derivative matching)")
    ax.set_ylabel("seconds")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"compress vs its roofline, {C.device_label(result['env'])}", fontsize=9)
    C.save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
