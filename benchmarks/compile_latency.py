"""Compile once: how much of a user's wait is XLA compilation (issue 42).

On a coordinate network the arithmetic of a call takes milliseconds and compiling its programs
seconds. This script measures, with JAX's own ``jax.monitoring`` duration events, how a user's
wait splits into XLA compilation, tracing + lowering and the rest, for four things a user does:

* ``cli``: ``jaxcompress compress t.jcz -o s.jcz --eps 1e-6 --radius 1`` on a ``[2, 64, 64, 1]``
  tanh network written with ``jc.save`` (the command picks the smallest order within ``--eps``,
  compressing and measuring each order);
* ``compress``: ``jc.compress(net, jc.collocation(6), domain=jc.Ball(2, 1.0))`` of the nnx
  neural field of ``docs/shrink.md`` (``Field(128)``, float64, traced with
  ``jc.trace_module``), a second call, then ``jc.collocation(5)``: what a new order costs;
* ``search``: the "how small can it get?" search of ``docs/shrink.md`` (the field trained as
  there, ``jc.compress_to_tolerance(net, jc.Measured(metric=task_mse, polish=True), ...)``),
  run twice;
* ``verify``: the proof of ``docs/verify.md`` (``jc.verify(teacher, small, domain=jc.Ball(2, 1.0))``
  of a ``[2, 64, 64, 1]`` tanh teacher and its ``jc.collocation(4)`` compression), run twice: its
  programs compile fast first and switch to XLA's defaults once they have run a while
  (:class:`jaxcompress.compiling.FastFirst`).

Each case runs in fresh Python processes (so no case finds another's programs compiled), each
starting ``python -c`` with a listener registered through
``jax.monitoring.register_event_duration_secs_listener`` (and ``register_event_listener`` for
the persistent cache's hits) before anything is compiled. The processes of a case:

1. **cold**: a new, empty persistent compilation cache (``JAXCOMPRESS_CACHE_DIR`` for the
   command line, ``jax_compilation_cache_dir`` for the library calls, as the command line
   sets it); the call, then the same call again in the same process;
2. **warm**: a second process on the same cache: the call a user makes the next time;
3. **no cache**: the cache off (``jaxcompress --no-cache``; no cache directory for the library,
   JAX's default): the call (full runs; with ``--quick`` only for the command line).

Per call: the wall time, the programs compiled (``backend_compile_duration`` events; those
served by the persistent cache, a ``cache_hits`` event inside the event's span, are counted
apart), the XLA compile seconds (the union of those events' spans), the trace + lower seconds
(``jaxpr_trace_duration`` and ``jaxpr_to_mlir_module_duration``: the union of their spans
outside the compile spans, so nested jits and compiles started while tracing count once) and
the compile share, compile / wall. For the command line also the process's start-up (Python,
``import jax`` and the library, before ``main`` runs) and the whole process's wall time.

Checked, every call (compilation is what is timed, so the check follows each call): the
command exits 0 and writes a network narrower than the teacher, each call the same widths; the
compression has a finite error estimate and the same widths twice; the search meets its budget
(``res.metric_value <= eps``) with the same widths twice; the proof converges, its upper bound
is at least the sampled error, and the bracket is the same twice. The exit status is 1 if a
check fails.

Output: ``<out>/compile_latency_<platform>_<dtype>[_quick].{json,png}``: per case and call the
numbers above, the names of the programs compiled (``fun_name``) and the event names seen; the
PNG is one grouped horizontal bar chart per case (first call, second call, second process, no
cache), each bar split into compile, trace + lower and the rest, the programs annotated.

Run (from the repository root)::

    python benchmarks/compile_latency.py                       # the issue's sizes (~12 min)
    python benchmarks/compile_latency.py --quick --out /tmp/c  # small sizes, about a minute
    python benchmarks/compile_latency.py --cases cli,compress
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

NAME = "compile_latency"
HERE = Path(__file__).resolve().parent

#: The ``jax.monitoring`` events read (``jax/_src/dispatch.py``, ``jax/_src/compiler.py``).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                "/jax/core/compile/jaxpr_to_mlir_module_duration")
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

#: Sizes per mode: the issue's (full) and the smallest that run every path (quick; the search's
#: are the ones tests/test_docs.py runs docs/shrink.md with).
CONFIG = {
    "full": {"cli": {"sizes": [2, 64, 64, 1], "eps": 1e-6},
             "compress": {"width": 128, "order": 6, "new_order": 5},
             "search": {"width": 128, "train_steps": 3000, "eps_factor": 1.05, "polish": None},
             "verify": {"sizes": [2, 64, 64, 1], "order": 4}},
    "quick": {"cli": {"sizes": [2, 16, 16, 1], "eps": 5e-2},
              "compress": {"width": 32, "order": 6, "new_order": 5},
              "search": {"width": 16, "train_steps": 10, "eps_factor": 3.0,
                         "polish": {"steps": 20, "shrink_steps": 20, "points": 256}},
              "verify": {"sizes": [2, 16, 16, 1], "order": 2}},
}
CASE_NAMES = ("cli", "compress", "search", "verify")
#: The processes of a case (see the module docstring); quick runs "nocache" for the CLI only.
PROCESSES = ("cold", "warm", "nocache")
#: The bars of the plot: (label, process, call).
BARS = (("first call (cold cache)", "cold", "first"),
        ("second call, same process", "cold", "second"),
        ("second process (warm cache)", "warm", "first"),
        ("first call, no cache", "nocache", "first"))


def parse(argv):
    p = C.parser(__doc__, default_dtype="float64")
    p.add_argument("--cases", default=",".join(CASE_NAMES),
                   help=f"comma-separated subset of {','.join(CASE_NAMES)} (default: all)")
    args = p.parse_args(argv)
    names = [s.strip() for s in args.cases.split(",") if s.strip()]
    unknown = [n for n in names if n not in CASE_NAMES]
    if unknown or not names:
        p.error(f"unknown case(s) {unknown}; known: {list(CASE_NAMES)}")
    cfg = {"cases": names, "mode": "quick" if args.quick else "full",
           **{n: CONFIG["quick" if args.quick else "full"][n] for n in names}}
    return args, cfg


def processes_of(quick: bool) -> tuple[str, ...]:
    return PROCESSES[:2] if quick else PROCESSES


# ------------------------------------------------------------------------------------------
# measuring (in the child process)


def _union(spans) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, -math.inf
    for s, e in sorted(spans):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


class Recorder:
    """Every ``jax.monitoring`` duration event (as a span ending when it is reported) and every
    plain event, from its creation on; :meth:`call` summarises one call's window."""

    def __init__(self):
        import jax.monitoring

        self.spans: list[tuple[str, float, float, str | None]] = []
        self.events: list[tuple[str, float]] = []
        self.names: set[str] = set()
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)

    def _duration(self, event, secs, **kw):
        end = time.time()
        self.names.add(event)
        self.spans.append((event, end - secs, end, kw.get("fun_name")))

    def _event(self, event, **kw):
        self.names.add(event)
        self.events.append((event, time.time()))

    def call(self, label: str, fn):
        """Run ``fn()`` and return ``(its value, the window's summary)``."""
        n_spans, n_events = len(self.spans), len(self.events)
        t0, p0 = time.time(), time.perf_counter()
        value = fn()
        wall = time.perf_counter() - p0
        t1 = time.time()
        return value, self.summary(label, t0, t1, wall, self.spans[n_spans:],
                                   self.events[n_events:])

    @staticmethod
    def summary(label, t0, t1, wall, spans, events) -> dict:
        hits = [t for e, t in events if e == CACHE_HIT_EVENT]

        def clip(s, e):
            return max(s, t0), min(e, t1)

        compiles = [(clip(s, e), name, any(s <= t <= e for t in hits))
                    for ev, s, e, name in spans if ev == COMPILE_EVENT]
        comp = [c for c, _, _ in compiles]
        trace = [clip(s, e) for ev, s, e, _ in spans if ev in TRACE_EVENTS]
        compile_s = _union(comp)
        compiled = Counter(name for _, name, hit in compiles if not hit)
        return {
            "call": label, "t0": t0, "wall_s": wall, "programs": len(compiles),
            "cache_hits": sum(hit for _, _, hit in compiles),
            "compiled": sum(compiled.values()),
            "compile_s": compile_s,
            "compile_uncached_s": _union([c for c, _, hit in compiles if not hit]),
            "trace_lower_s": _union(comp + trace) - compile_s,
            "traces": sum(1 for ev, *_ in spans if ev == TRACE_EVENTS[0]),
            "compile_share": compile_s / wall if wall > 0 else None,
            "programs_compiled": dict(compiled.most_common()),
        }


def _configure_child(dtype: str, cache: str | None) -> None:
    import jax

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    if cache is not None:  # what ``jaxcompress.cli`` sets for its cache
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _child_cli(spec, rec):
    import jaxcompress as jc
    from jaxcompress.cli import main

    out = Path(spec["workdir"]) / f"s_{spec['process']}.jcz"
    argv = (["--no-cache"] if spec["cache"] is None else []) + [
        "compress", spec["teacher"], "-o", str(out), "--eps", f"{spec['eps']:g}", "--radius", "1"]
    calls, widths = [], []
    for label in ("first", "second")[:spec["calls"]]:
        out.unlink(missing_ok=True)
        rc, row = rec.call(label, lambda: main(argv))
        calls.append(row)
        small = jc.load(str(out))
        widths.append(jc.layer_sizes(small.params))
        row["check"] = {"exit_status": rc, "widths": widths[-1]}
        if rc != 0:
            return calls, f"{label} call: exit status {rc}"
    teacher = jc.layer_sizes(jc.load(spec["teacher"]).params)
    if any(w[1:-1] >= teacher[1:-1] for w in widths):
        return calls, f"not compressed: {widths} against the teacher's {teacher}"
    if any(w != widths[0] for w in widths):
        return calls, f"the calls gave different widths: {widths}"
    return calls, None


def _field(width: int, dtype):
    """The nnx neural field of docs/shrink.md."""
    import jax.numpy as jnp
    from flax import nnx

    class Field(nnx.Module):
        def __init__(self, width, rngs):
            self.inp = nnx.Linear(2, width, rngs=rngs, param_dtype=dtype)
            self.mid = nnx.Linear(width, width, rngs=rngs, param_dtype=dtype)
            self.out = nnx.Linear(width, 1, rngs=rngs, param_dtype=dtype)

        def __call__(self, x):
            return self.out(jnp.tanh(self.mid(jnp.tanh(self.inp(x)))))

    return Field(width, nnx.Rngs(0))


def _child_compress(spec, rec):
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    dtype = jnp.dtype(spec["dtype"])
    disk = jc.Ball(2, 1.0)
    model = _field(spec["width"], dtype)
    x = disk.sobol(8, dtype=dtype)[:4]
    net, traced = rec.call("trace_module", lambda: jc.trace_module(model, x))
    calls, results = [traced], []

    def run(k):
        def go():
            small, info = jc.compress(net, jc.collocation(k), domain=disk)
            return jax.block_until_ready((small, info))
        return go

    labels = [("first", spec["order"]), ("second", spec["order"])][:spec["calls"]]
    if spec["calls"] > 1:
        labels.append(("new_order", spec["new_order"]))
    for label, k in labels:
        (small, info), row = rec.call(label, run(k))
        est = float(info.error_estimate)
        row["check"] = {"order": k, "params": jc.num_params(small), "error_estimate": est}
        calls.append(row)
        results.append(row["check"])
        if not math.isfinite(est):
            return calls, f"{label}: error estimate {est}"
    same = [r["params"] for r in results if r["order"] == spec["order"]]
    if len(set(same)) > 1:
        return calls, f"the calls at order {spec['order']} gave {same} parameters"
    return calls, None


def _child_search(spec, rec):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import jaxcompress as jc

    dtype = jnp.dtype(spec["dtype"])
    disk = jc.Ball(2, 1.0)
    x_train = disk.sobol(2048, dtype=dtype)
    x_val = disk.sobol(1024, skip=4096, dtype=dtype)

    def target(x):
        return jnp.sin(2 * x[:, :1]) + 0.5 * jnp.cos(3 * x[:, 1:]) + 0.25 * x[:, :1] * x[:, 1:]

    model = _field(spec["width"], dtype)
    opt = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt):
        loss, grads = nnx.value_and_grad(
            lambda m: jnp.mean((m(x_train) - target(x_train)) ** 2))(model)
        opt.update(model, grads)
        return loss

    for _ in range(spec["train_steps"]):
        step(model, opt)

    def task_mse(f):
        return float(jnp.mean((f(x_val) - target(x_val)) ** 2))

    teacher_mse = task_mse(model)
    eps = spec["eps_factor"] * teacher_mse
    net = jc.trace_module(model, x_val[:4])
    polish = True if spec["polish"] is None else jc.PolishSettings(**spec["polish"])

    def go():
        res = jc.compress_to_tolerance(net, jc.Measured(metric=task_mse, polish=polish),
                                       domain=disk, eps=eps)
        return jax.block_until_ready(res)

    calls, widths = [], []
    for label in ("first", "second")[:spec["calls"]]:
        res, row = rec.call(label, go)
        widths.append(list(res.widths))
        row["check"] = {"widths": widths[-1], "params": jc.num_params(res.compressed),
                        "metric": float(res.metric_value), "eps": eps,
                        "teacher_params": jc.num_params(net), "teacher_metric": teacher_mse}
        calls.append(row)
        if not float(res.metric_value) <= eps:
            return calls, f"{label}: task metric {float(res.metric_value):.3e} > eps {eps:.3e}"
    if any(w != widths[0] for w in widths):
        return calls, f"the runs gave different widths: {widths}"
    return calls, None


def _child_verify(spec, rec):
    import jax
    import jax.numpy as jnp

    import jaxcompress as jc

    dtype = jnp.dtype(spec["dtype"])
    ball = jc.Ball(2, 1.0)
    teacher = jc.init_mlp(jax.random.PRNGKey(0), spec["sizes"], dtype=dtype)
    small, _ = jc.compress(teacher, jc.collocation(spec["order"]), activation="tanh",
                           domain=ball)
    sampled = float(jc.sup_error(teacher, small, activation="tanh", domain=ball,
                                 key=jax.random.PRNGKey(1)))
    calls, brackets = [], []
    for label in ("first", "second")[:spec["calls"]]:
        res, row = rec.call(label, lambda: jc.verify(teacher, small, activation="tanh",
                                                     domain=ball))
        row["check"] = {"lower": float(res.lower), "upper": float(res.upper),
                        "status": res.status, "boxes": int(res.boxes), "sampled": sampled}
        calls.append(row)
        brackets.append((float(res.lower), float(res.upper)))
        if res.status != "converged" or not sampled <= res.upper:   # sampled <= sup <= upper
            return calls, (f"{label}: status {res.status}, bracket [{res.lower:.6e}, "
                           f"{res.upper:.6e}] against the sampled {sampled:.6e}")
    if len(set(brackets)) > 1:
        return calls, f"the two proofs gave different brackets: {brackets}"
    return calls, None


CHILDREN = {"cli": _child_cli, "compress": _child_compress, "search": _child_search,
            "verify": _child_verify}


def child(spec_json: str) -> int:
    """One process of a case (``spec_json``: the case, its sizes, the cache); prints its
    summary as JSON on the last line of stdout."""
    spec = json.loads(spec_json)
    rec = Recorder()  # before anything is compiled
    if spec["case"] != "cli":  # the command line configures JAX itself
        _configure_child(spec["dtype"], spec["cache"])
    import jax

    with jax.default_matmul_precision(C.PRECISION):
        calls, failure = CHILDREN[spec["case"]](spec, rec)
    print(json.dumps({"calls": calls, "failure": failure,
                      "event_names": sorted(rec.names)}), flush=True)
    return 0


# ------------------------------------------------------------------------------------------
# running the processes (in the parent)

CHILD_CODE = ("import sys; sys.path.insert(0, {here!r}); import compile_latency as M; "
              "sys.exit(M.child(sys.argv[1]))")
#: Environment variables of the test suite's shared cache that must not reach a child.
_CACHE_VARS = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
               "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "JAXCOMPRESS_CACHE_DIR")


def run_process(spec: dict, env_cache: str | None) -> dict:
    """Start one child; return its summary with the process's wall time and start-up."""
    env = {k: v for k, v in os.environ.items() if k not in _CACHE_VARS}
    env["JAXCOMPRESS_CACHE_DIR"] = env_cache or "off"
    cmd = [sys.executable, "-c", CHILD_CODE.format(here=str(HERE)), json.dumps(spec)]
    launched, p0 = time.time(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - p0
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['case']} ({spec['process']}): exit {proc.returncode}\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    # Python, the imports and the set-up, from the launch to the first call
    out["startup_s"] = max(out["calls"][0]["t0"] - launched, 0.0) if out["calls"] else None
    return out


def run_case(name: str, cfg: dict, args, workdir: Path, log) -> dict:
    """Every process of case ``name``: the rows of its bars and its checks."""
    sizes = cfg[name]
    base = {"case": name, "dtype": args.dtype, "workdir": str(workdir), **sizes}
    if name == "cli":
        import jax
        import jax.numpy as jnp

        import jaxcompress as jc

        teacher = workdir / "t.jcz"
        jc.save(str(teacher), jc.init_mlp(jax.random.PRNGKey(0), sizes["sizes"],
                                          dtype=jnp.dtype(args.dtype)), activation="tanh")
        base["teacher"] = str(teacher)
    cache = workdir / f"cache_{name}"
    procs, failures = {}, []
    for process in processes_of(args.quick):
        use = None if process == "nocache" else str(cache)
        spec = {**base, "process": process, "cache": use,
                "calls": 2 if process == "cold" else 1}
        out = run_process(spec, use)
        procs[process] = out
        if out["failure"]:
            failures.append(f"{name} ({process}): {out['failure']}")
        for row in out["calls"]:
            if row["call"] == "trace_module":
                continue
            log(f"{name:<8} {process:<7} {row['call']:<9} wall {row['wall_s']:7.2f} s  compile "
                f"{row['compile_s']:6.2f} s ({_pct(row['compile_share'])})  trace+lower "
                f"{row['trace_lower_s']:5.2f} s  programs {row['programs']:>4} (compiled "
                f"{row['compiled']}, cache hits {row['cache_hits']})"
                + (f"  compiled: {_top(row['programs_compiled'])}" if row["compiled"] else ""))
        if name == "cli":
            log(f"{name:<8} {process:<7} process   wall {out['process_wall_s']:7.2f} s "
                f"(start-up and imports {out['startup_s']:.2f} s)")
    return {"case": name, "what": WHAT[name], "sizes": sizes, "processes": procs,
            "bars": _bars(name, procs), "failures": failures}


WHAT = {
    "cli": "jaxcompress compress t.jcz -o s.jcz --eps {eps:g} --radius 1 on a {sizes} tanh "
           "network (jc.save)",
    "compress": "net = jc.trace_module(Field({width}), x); jc.compress(net, jc.collocation("
                "{order}), domain=jc.Ball(2, 1.0)); then jc.collocation({new_order})",
    "search": "jc.compress_to_tolerance(Field({width}) trained {train_steps} steps, "
              "jc.Measured(metric=task_mse, polish=...), eps={eps_factor} x teacher MSE)",
    "verify": "jc.verify(teacher, small, domain=jc.Ball(2, 1.0)): a {sizes} tanh teacher, "
              "small its jc.collocation({order})",
}


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _top(programs: dict, n: int = 4) -> str:
    items = list(programs.items())
    more = f", +{len(items) - n} more" if len(items) > n else ""
    return ", ".join(f"{k} x{v}" for k, v in items[:n]) + more


def _bars(name: str, procs: dict) -> list[dict]:
    bars = []
    for label, process, call in BARS + ((("new order, same process", "cold", "new_order"),)
                                        if name == "compress" else ()):
        if process not in procs:
            continue
        rows = [c for c in procs[process]["calls"] if c["call"] == call]
        if not rows:
            continue
        row = rows[0]
        bar = {"label": label, "process": process, "call": call,
               **{k: row[k] for k in ("wall_s", "compile_s", "trace_lower_s", "programs",
                                      "compiled", "cache_hits", "compile_share")}}
        if name == "cli" and call == "first":  # the user waits for the whole process
            bar["startup_s"] = procs[process]["startup_s"]
            bar["process_wall_s"] = procs[process]["process_wall_s"]
        bars.append(bar)
    return bars


# ------------------------------------------------------------------------------------------
# output


def plot(result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    heights = [0.55 * len(c["bars"]) + 1.1 for c in cases]
    fig, axes = plt.subplots(len(cases), 1, figsize=(10, sum(heights) + 0.9), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    colors = {"compile": "#c0392b", "trace": "#f39c12", "rest": "#95a5a6", "startup": "#d5dbdb"}
    for ax, case in zip(axes[:, 0], cases, strict=True):
        bars = case["bars"]
        ys = list(range(len(bars)))[::-1]
        right = max(b.get("startup_s", 0.0) + b["wall_s"] for b in bars)
        for y, b in zip(ys, bars, strict=True):
            left = 0.0
            parts = [("startup", b.get("startup_s", 0.0)), ("compile", b["compile_s"]),
                     ("trace", b["trace_lower_s"]),
                     ("rest", max(b["wall_s"] - b["compile_s"] - b["trace_lower_s"], 0.0))]
            for key, width in parts:
                if width > 0:
                    ax.barh(y, width, left=left, color=colors[key], height=0.7,
                            edgecolor="white", lw=0.5, hatch="//" if key == "startup" else None)
                    left += width
            share = "" if b["compile_share"] is None else f" ({_pct(b['compile_share'])})"
            cached = f", {b['cache_hits']} cached" if b["cache_hits"] else ""
            ax.text(left + 0.01 * right, y,
                    f"{left:.2f} s; {b['programs']} program{'' if b['programs'] == 1 else 's'} "
                    f"({b['compiled']} compiled{cached});"
                    f" compile {b['compile_s']:.2f} s{share}", va="center", fontsize=7.5)
        ax.set_yticks(ys)
        ax.set_yticklabels([b["label"] for b in bars], fontsize=8)
        ax.set_xlim(0, right * 2.0)
        ax.set_xlabel("seconds", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(f"{case['case']}: {case['what_text']}", fontsize=8.5, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    handles = [matplotlib.patches.Patch(color=colors["compile"], label="XLA compile"),
               matplotlib.patches.Patch(color=colors["trace"], label="trace + lower"),
               matplotlib.patches.Patch(color=colors["rest"], label="the rest of the call"),
               matplotlib.patches.Patch(facecolor=colors["startup"], hatch="//",
                                        label="process start-up and imports (CLI)")]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"compile latency (jax.monitoring events): {C.device_label(result['env'])}, "
                 f"{result['dtype']}" + (" (quick sizes)" if result["quick"] else ""),
                 fontsize=10)
    C.save_figure(fig, path, rect=(0, 0.03, 1, 0.97))


def print_table(result) -> None:
    print("\n## case      bar                           wall s  compile s  trace+lower s  "
          "programs (compiled)  compile share")
    for case in result["cases"]:
        for b in case["bars"]:
            wall = b["wall_s"] + b.get("startup_s", 0.0)
            print(f"   {case['case']:<9} {b['label']:<29} {wall:7.2f}  {b['compile_s']:9.2f}  "
                  f"{b['trace_lower_s']:13.2f}  {b['programs']:>8} ({b['compiled']:>4})"
                  f"{'':>8}{_pct(b['compile_share'])}"
                  + (f"  (start-up {b['startup_s']:.2f} s)" if "startup_s" in b else ""))


def main(argv=None) -> int:
    begun = C.begin(parse, argv, plot, fast_compile="auto")  # what a user waits for
    if isinstance(begun, int):
        return begun
    start, args, cfg, env = begun

    def log(line):
        print(line, flush=True)

    C.print_header(env, args.dtype, [
        f"cases {cfg['cases']} ({cfg['mode']} sizes); each in fresh processes: cold cache "
        "(two calls), warm cache, no cache" + (" (CLI only)" if args.quick else ""),
        f"events: compile = {COMPILE_EVENT}; trace + lower = {' + '.join(TRACE_EVENTS)}; "
        f"persistent-cache hits = {CACHE_HIT_EVENT}"])
    cases, failures, names = [], [], set()
    with tempfile.TemporaryDirectory(prefix="compile_latency_") as tmp:
        for name in cfg["cases"]:
            workdir = Path(tmp) / name
            workdir.mkdir()
            row = run_case(name, cfg, args, workdir, log)
            row["what_text"] = WHAT[name].format(**cfg[name])
            for out in row["processes"].values():
                if not names:
                    log(f"# jax.monitoring events seen: {sorted(out['event_names'])}")
                names |= set(out["event_names"])
            cases.append(row)
            failures += row["failures"]
    C.finish(env, start)
    result = {"benchmark": NAME, "env": env, "device": env["device"], "dtype": args.dtype,
              "precision": C.PRECISION_NOTE, "quick": args.quick, "config": cfg,
              "events": {"compile": COMPILE_EVENT, "trace_lower": list(TRACE_EVENTS),
                         "cache_hit": CACHE_HIT_EVENT, "seen": sorted(names)},
              "cases": cases, "checks": {"passed": not failures, "failures": failures}}
    paths = C.save_results(args, env, NAME, result, plot)
    print_table(result)
    if failures:
        log("## check FAILED: " + "; ".join(failures))
    C.print_written(paths, env)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
