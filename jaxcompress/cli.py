"""The ``jaxcompress`` command.

``jaxcompress compress IN -o OUT --order K`` (or ``--eps TOL``) compresses a saved network and
prints a before/after table (widths, parameters, measured sup error, time).

``jaxcompress demo`` builds the paper's random ``[2, 1024, 1024, 1024, 1024, 2]`` sigmoid network
(Fig. 2), compresses all four hidden layers for ``k = 0..10`` on the ball of radius 1, prints a
table (k, width, parameters, reduction, sup error, seconds) and writes a PNG of error vs width.
Everything is generated in-process; nothing is downloaded.

``jaxcompress shrink IN -o OUT --eps TOL [--metric sup|rel_l2|psnr] [--polish]`` searches for
the smallest network within the budget (:func:`jaxcompress.compress_to_tolerance` with
:class:`jaxcompress.Measured`: orders, then narrower layers while the budget holds) and
writes it, every candidate measured (JSON) and the size-against-error plot (PNG).

The searches (``shrink``, ``compress --eps``) print each step with the time so far and an
estimate of what is left, take ``--max-seconds``, and stop early when the error stopped
improving with the order (:mod:`jaxcompress.stopping`); stopped before the target, they write
what they found all the same, say why on stderr, and exit with status 1.

``jaxcompress verify TEACHER SMALL --eps 1e-3`` proves (or refutes) that two saved networks differ
by at most ``eps`` on the domain (:func:`jaxcompress.verify`); the exit status says which.

Every command reads every network :func:`jaxcompress.save` writes, as the Python verbs do: a
params list (or an ``.npz``), a traced function or module, compressed or not (its stored chain of
dense layers, else its stored jaxpr: :mod:`jaxcompress.io`). The domain is the ball of
``--radius`` around ``--center`` (default the unit ball at the origin) or the box of ``--box LO_1
.. LO_d HI_1 .. HI_d``. **Exit status** (:data:`EXIT_STATUS`): 0 done as asked (proven,
certified, a search's target met), 1 not proven (``verify`` refuted, out of time or converged
above ``--eps``; a search stopped before its target), 2 an error, with one line on stderr and no
traceback (``JAXCOMPRESS_TRACEBACK=1`` prints it). Building the parser imports no JAX (the
package imports its names on first use), so ``--help`` answers at once.

``jaxcompress check CERTIFICATE`` re-proves a certificate that ``Verification.save`` wrote, in
ball arithmetic and without the verifier (:func:`jaxcompress.check`): exit status 0 confirmed,
1 rejected, 2 an unreadable file.

``jaxcompress certify PARAMS_FILE --activation sigmoid --radius 1 --eps 1e-3`` prints the
certificate of :func:`jaxcompress.certify` (the theorem's constants, Assumption 4, the certified
orders and widths, the Appendix G diagnostics) for a saved network: an ``.npz`` with arrays
``kernel_0`` ``(d_in, d_1)``, ``bias_0`` ``(d_1,)``, ``kernel_1``, ... for every dense layer in
order (Flax ``Dense`` layout, the last layer linear) and optionally a 0-d string ``activation``
(see :func:`jaxcompress.io.save_npz`), or a file written by :func:`jaxcompress.save`. ``--json OUT``
also writes ``to_dict()``.

**Compiled programs are kept between runs.** On a coordinate network the arithmetic of a
command takes milliseconds and XLA's compilation seconds, so every command turns on JAX's
persistent compilation cache (``jax_compilation_cache_dir``) in a per-user folder:
``$JAXCOMPRESS_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxcompress/xla``, else
``~/.cache/jaxcompress/xla``. ``JAXCOMPRESS_CACHE_DIR=off`` (or ``--no-cache``) turns it off. The
library itself never changes your JAX configuration: in a notebook,
``jax.config.update("jax_compilation_cache_dir", path)`` does the same. JAX's cache is keyed by
the lowered program, so a later run would still trace the library's Python and lower it to
StableHLO before the cache answers: the command line also keeps the lowered programs
(:func:`jax.export`, in the folder's ``programs/``, keyed by the library's source, the versions
and everything the trace depends on; :mod:`jaxcompress._stored`), and a later run calls them
without tracing (``compress --eps`` of a ``[2, 64, 64, 1]`` network: 0.87 s instead of 1.24 s,
the same bits).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time


def _print_env(dtype: str) -> None:
    import jax

    dev = jax.devices()[0]
    print(f"# device: {dev.platform} ({getattr(dev, 'device_kind', dev)}), jax {jax.__version__}, "
          f"dtype {dtype}, matmul precision HIGHEST")


def _demo(args: argparse.Namespace) -> int:
    import jax

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    import jaxcompress as jc
    from jaxcompress._checks import seed_key

    if args.kmin < 0 or args.kmax < args.kmin:
        raise ValueError(f"demo: need 0 <= --kmin <= --kmax, got --kmin {args.kmin} --kmax "
                         f"{args.kmax}")
    for name in ("width", "depth", "samples"):
        if getattr(args, name) < 1:
            raise ValueError(f"demo: --{name} must be >= 1, got {getattr(args, name)}")
    if not (args.radius > 0 and args.radius < float("inf")):
        raise ValueError(f"demo: --radius must be finite and > 0, got {args.radius}")
    _print_env(args.dtype)
    sizes = [2] + [args.width] * args.depth + [2]
    params = jc.init_mlp(seed_key(args.seed), sizes, dtype=jnp.dtype(args.dtype))
    domain = jc.Ball(2, args.radius)
    n0 = jc.num_params(params)
    print(f"# teacher {sizes}, {n0:,} parameters, activation {args.activation}, "
          f"radius {args.radius}, backward order, pivoted QR, derivative features (taylor)")
    header = (f"{'k':>3} {'width':>6} {'params':>9} {'reduction':>10} {'sup error':>11} "
              f"{'seconds':>8}")
    print(header)
    rows = []
    key = seed_key(args.seed + 1)
    for k in range(args.kmin, args.kmax + 1):
        t0 = time.perf_counter()
        small, info = jc.compress(params, jc.derivative_matching(k), activation=args.activation,
                                  domain=domain)
        jax.block_until_ready(small)
        secs = time.perf_counter() - t0
        err = float(jc.sup_error(params, small, activation=args.activation, domain=domain,
                                 key=key, n_samples=args.samples))
        width = info.layers[0].width_out
        n1 = jc.num_params(small)
        rows.append({"k": k, "width": width, "params": n1, "reduction": n0 / n1,
                     "sup_error": err, "seconds": secs})
        print(f"{k:>3} {width:>6} {n1:>9,} {n0 / n1:>9.1f}x {err:>11.3e} {secs:>8.2f}",
              flush=True)
    print("# seconds: wall clock of compress() including its compilation for that k")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "demo.json"), "w") as f:
        json.dump({"sizes": sizes, "activation": args.activation, "radius": args.radius,
                   "dtype": args.dtype, "device": str(jax.devices()[0]), "rows": rows}, f,
                  indent=2)
    png = os.path.join(args.out, "demo_error_vs_width.png")
    _plot(rows, png, f"{args.activation} {sizes}, R = {args.radius}, {args.dtype}")
    print(f"# wrote {png} and demo.json")
    return 0


def _method(name: str, order: int):
    """The method ``--method name`` at order ``k``."""
    import jaxcompress as jc

    if name == "derivative":
        return jc.derivative_matching(order)
    if name == "collocation":
        return jc.collocation(order)
    return jc.best_of(jc.derivative_matching(order), jc.collocation(order))


#: ``--method`` of ``jaxcompress compress``.
METHODS = ("best", "derivative", "collocation")


def _check_output_path(path: str) -> None:
    """Fail before any work when the output cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"compress: the output folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"compress: the output folder {folder!r} is not writable")
    if os.path.isdir(path):
        raise ValueError(f"compress: the output {path!r} is a folder; give a file name")


def _load_model(path: str, activation: str | None, where: str = "load"):
    """The network of a file, as :func:`jaxcompress.load` reads it (a
    :class:`~jaxcompress.LoadedNetwork`): a saved params list or ``.npz`` (``--activation``
    where it stores none), a saved traced network or module (its stored chain of dense layers
    when it is one with a registered activation, else its stored program). A traced network
    saved without a program the library can read is an error naming the file."""
    import jaxcompress as jc
    from jaxcompress.io import load_npz, loaded_chain, resolve_activation

    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path!r}")
    if path.endswith(".npz"):
        return load_npz(path, activation=activation)
    model = jc.load(path)
    if model.chain is None:   # a traced network read from its stored program
        if activation is not None:
            raise ValueError(f"{where}: {path!r} is a saved traced network, which carries its "
                             f"own activation in its program; leave out --activation "
                             f"{activation}")
        model.readable(f"{where}: {path!r}")
        return model
    resolve_activation(model.activation, activation, repr(path))
    return loaded_chain(model.chain, model.activation, dict(model.metadata))


def _teacher(model) -> tuple:
    """``(network, activation)`` as the verbs take a loaded file: a chain's params list and its
    activation name, or the loaded traced network itself and ``None``."""
    if model.chain is not None:
        return model.chain, model.activation
    return model, None


def _dtype(net) -> str:
    """The dtype of a network's inputs: its first kernel's (a params list), else the one its
    stored program was saved for."""
    if isinstance(net, list):
        return str(net[0]["kernel"].dtype)
    return net.program.dtype


def _order_search(params, act: str | None, domain, eps: float, max_order: int, method: str,
                  measure, max_seconds: float | None = None) -> tuple:
    """Smallest uniform order whose measured sup error is ``<= eps``: the search's loop
    (:mod:`jaxcompress.search`) with its uniform orders as the proposer and ``measure`` of the
    network the command writes as the judge, with progress lines (each with the time so far
    and an estimate of what is left).

    Returns ``(small, info, order, err)``. Stopped before an order met ``eps``
    (``--max-seconds`` spent, the error stalled, no order left; :mod:`jaxcompress.stopping`),
    raises :class:`_Missed` (a ``ValueError``) saying why: which order came closest and whether
    raising ``--max-order`` can help (the error still falling) or not (the error growing with
    k), as :func:`jaxcompress.search.order_advice` words it; its ``found()`` is that
    order's network.
    """
    from jaxcompress.compression import compressed_like
    from jaxcompress.networks import as_network
    from jaxcompress.search import Candidate, Candidates, Judge, Search, Verdict, order_advice
    from jaxcompress.search.proposers import uniform_orders
    from jaxcompress.stopping import Clock, StallRule, check_max_seconds

    class Written(Judge):   # the sup error of the network the command writes
        name = "measured sup error"

        def judge(self, cand, cands):
            return Verdict(self._number(measure(cand.measured)), cand)

    net = as_network(params, activation=act, where="compress")
    cands = Candidates(net, domain, params, where="compress")

    def family(k):
        return _method(method, k)

    def build(k):   # every order of a bucket of four in one compiled program
        small, info = cands.uniform_leaves(family, k, max_order)
        return Candidate(small, tuple(li.width_out for li in info.layers), info, family(k), k,
                         measured=compressed_like(params, net, small, info, domain))

    def describe(t):
        info = t.candidate.info
        return (f"measured {t.figure:.3e}, width {info.layers[0].width_out}, estimate "
                f"{float(info.error_estimate):.3e}{_winner(info)}")

    clock = Clock(check_max_seconds(max_seconds, "compress", "--max-seconds"), StallRule())
    search = Search(cands, Written(), eps, clock,
                    progress=lambda line: print(f"# {line}", flush=True))
    out = search.run(uniform_orders(
        build, range(max_order + 1), label="uniform", describe=describe,
        advice=lambda ts: order_advice([t.figure for t in ts], eps, "--max-order")))
    chosen = out.chosen

    def at_order():   # the order's network at its own widths (as --order k), measured
        k = chosen.candidate.order
        if not cands.masks_orders(family, max_order):
            return chosen.candidate.measured, chosen.candidate.info, k, chosen.figure
        small, info = cands.exact(family, k)
        small = compressed_like(params, net, small, info, domain)
        return small, info, k, measure(small)

    if not out.stop.met:   # the caller writes the closest order all the same (exit status 1)
        missed = out.stop.reason
        if "grows with k" in missed and method == "derivative":
            missed += "; try --method collocation (fits on Sobol points of the domain)"
        raise _Missed("compress", missed, at_order)
    return at_order()


class _Missed(ValueError):
    """A search stopped before its target (``--max-seconds`` spent, the error stalled, no
    order left): ``reason`` says why, ``found()`` computes what it found, which the command
    writes all the same before it exits with status 1."""

    def __init__(self, where: str, reason: str, found):
        super().__init__(f"{where}: {reason}")
        self.reason, self.found = reason, found


def _compress_cmd(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # never lose the bits of a float64 input
    import jaxcompress as jc
    from jaxcompress._checks import seed_key
    from jaxcompress.compression import trim_info

    if (args.order is None) == (args.eps is None):
        raise ValueError("compress: give exactly one of --order K or --eps TOL")
    if args.eps is not None and not args.eps > 0:
        raise ValueError(f"compress: --eps must be positive, got {args.eps}")
    if args.max_order < 0:
        raise ValueError(f"compress: --max-order must be >= 0, got {args.max_order}")
    if args.order is not None and args.order < 0:
        raise ValueError(f"compress: --order must be >= 0, got {args.order}")
    _check_output_path(args.output)
    model = _load_model(args.input, args.activation, "compress")
    params, act = _teacher(model)   # a params list (a chain) or the loaded traced network
    d = jc.layer_sizes(params)[0]
    domain = _domain(args, d, "compress")
    dtype = _dtype(params)
    _print_env(dtype)
    key = seed_key(args.seed)
    def measure(p):
        return float(jc.sup_error(params, p, activation=act, domain=domain, key=key,
                                  n_samples=args.samples))

    t0 = time.perf_counter()
    if args.order is not None:
        small, info = jc.compress(params, _method(args.method, args.order), activation=act,
                                  domain=domain)
        err = measure(small)
        order, missed = args.order, None
    else:
        try:
            small, info, order, err = _order_search(params, act, domain, args.eps,
                                                    args.max_order, args.method, measure,
                                                    args.max_seconds)
            missed = None
        except _Missed as stop:
            (small, info, order, err), missed = stop.found(), stop.reason
    # the rank-deficient neurons go, and the record follows (it describes what is saved)
    small, info = jc.trim(small), trim_info(info, small)
    secs = time.perf_counter() - t0
    # the smallest error measurable in this dtype: the teacher against itself, summed in another
    # order (its hidden neurons permuted), measured as the candidates were (the same program)
    # (a chain's: a traced network's program fixes the order of its sums)
    floor = measure(_permuted(params)) if isinstance(params, list) else None
    n0, n1 = jc.num_params(params), jc.num_params(small)
    print(f"{'':>10} {'widths':>32} {'parameters':>12} {'sup error':>11}")
    print(f"{'before':>10} {str(jc.layer_sizes(params)):>32} {n0:>12,} "
          f"{'-' if floor is None else f'{floor:.3e}':>11}")
    print(f"{'after':>10} {str(jc.layer_sizes(small)):>32} {n1:>12,} {err:>11.3e}")
    if floor is not None:
        print(f"# before: the teacher against itself with its neurons summed in another order "
              f"(the rounding floor of {dtype})")
    else:
        print("# before: not measured for a traced network (its program fixes the order of its "
              "sums)")
    print(f"# method {args.method}{_winner(info)}, order {order}, {_where(args)}, reduction "
          f"{n0 / n1:.1f}x, {secs:.2f} s (compression and error measurement, including "
          "compilation)")
    meta = dict(model.metadata)
    meta.update({"domain": _domain_record(args, d),
                 "method": args.method, "measured_sup_error": err, "rounding_floor": floor,
                 "source": os.path.basename(args.input)})
    if args.eps is not None:
        meta.update({"eps": args.eps, "target_met": missed is None,
                     **({"stopped": missed} if missed else {})})
    jc.save(args.output, small, activation=act, metadata=meta, info=info)
    print(f"# wrote {args.output}")
    return _missed("compress", missed, f"the closest order, k = {order} (sup error {err:.3e})")


def _missed(where: str, missed: str | None, written: str) -> int:
    """The exit status of a search: 0 when it met its target, else 1 with a message saying
    why not and what was written."""
    if missed is None:
        return 0
    print(f"jaxcompress {where}: the target was not reached: {missed}; wrote {written} all "
          "the same", file=sys.stderr)
    return 1


def _shrink_cmd(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # never lose the bits of a float64 input
    import jaxcompress as jc
    from jaxcompress._checks import seed_key

    if not args.eps > 0:
        raise ValueError(f"shrink: --eps must be positive, got {args.eps}")
    if args.max_order < 0:
        raise ValueError(f"shrink: --max-order must be >= 0, got {args.max_order}")
    _check_output_path(args.output)
    model = _load_model(args.input, args.activation, "shrink")
    params, act = _teacher(model)   # a params list (a chain) or the loaded traced network
    d = jc.layer_sizes(params)[0]
    domain = _domain(args, d, "shrink")
    _print_env(_dtype(params))
    strategy = jc.Measured(method=jc.collocation if args.method == "collocation"
                           else jc.derivative_matching, metric=args.metric,
                           polish=args.polish, max_order=args.max_order,
                           key=seed_key(args.seed), n_samples=args.samples)
    t0 = time.perf_counter()
    # stopped before the target (--max-seconds, a stall, no order left), the best network found
    # is written all the same, and the exit status says 1
    res = jc.compress_to_tolerance(params, strategy, activation=act, domain=domain,
                                   eps=args.eps, progress=lambda line: print(f"# {line}",
                                                                             flush=True),
                                   max_seconds=args.max_seconds, throw=False)
    secs = time.perf_counter() - t0
    # a chain's params list (the search also gives its Compressed beside it), else the traced
    # network's compression
    small = res.params if act is not None else res.compressed
    n0, n1 = jc.num_params(params), jc.num_params(small)
    print(f"{'':>10} {'widths':>32} {'parameters':>12} {args.metric:>11} {'sup error':>11}")
    print(f"{'before':>10} {str(jc.layer_sizes(params)):>32} {n0:>12,} "
          f"{res.frontier.teacher_error:>11.3e} {0.0:>11.3e}")
    print(f"{'after':>10} {str(jc.layer_sizes(small)):>32} {n1:>12,} "
          f"{res.metric_value:>11.3e} {res.measured_error:>11.3e}")
    print(f"# {args.method}{', polished' if args.polish else ''}, eps {args.eps:g} "
          f"({args.metric}), {_where(args)}, reduction {n0 / n1:.1f}x, {secs:.1f} s; "
          f"{len(res.frontier.rows)} candidates measured")
    meta = dict(model.metadata)
    meta.update({"domain": _domain_record(args, d),
                 "method": res.info.method, "metric": args.metric, "eps": args.eps,
                 "metric_value": res.metric_value, "measured_sup_error": res.measured_error,
                 "source": os.path.basename(args.input), "target_met": res.met,
                 "stopped": res.status})
    jc.save(args.output, small, activation=act, metadata=meta, info=res.info)
    stem = os.path.splitext(args.output)[0]
    json_path = args.json or f"{stem}_frontier.json"
    with open(json_path, "w") as f:
        json.dump(res.frontier.to_dict(), f, indent=2)
    png = args.plot or f"{stem}_frontier.png"
    res.frontier.plot(png, eps=args.eps, title=f"{os.path.basename(args.input)}: every "
                      f"candidate of the search ({args.metric}, eps {args.eps:g})")
    print(f"# wrote {args.output}, {json_path} and {png}")
    if res.met and res.status != "met":
        print(f"# {res.reason}")
    return _missed("shrink", None if res.met else res.reason,
                   f"the best network found ({args.metric} {res.metric_value:.4g})")


def _winner(info) -> str:
    """``" (won: derivative_matching)"`` for a best-of result, else ``""``."""
    if info.choice is None:
        return ""
    return f" (won: {info.candidates[int(info.choice)].split('(')[0]})"


def _permuted(params):
    """The same network with every hidden layer's neurons in reversed order (on the host:
    no program per leaf shape to compile)."""
    import numpy as np

    out = [{name: np.asarray(v) for name, v in layer.items()} for layer in params]
    for i in range(len(params) - 1):
        out[i] = {"kernel": out[i]["kernel"][:, ::-1], "bias": out[i]["bias"][::-1]}
        out[i + 1] = {"kernel": out[i + 1]["kernel"][::-1], "bias": out[i + 1]["bias"]}
    return out


def _certify_cmd(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # never lose the bits of a float64 input
    import jaxcompress as jc

    params, act = _teacher(_load_model(args.input, args.activation, "certify"))
    domain = _domain(args, jc.layer_sizes(params)[0], "certify")
    report = jc.certify(params, activation=act, domain=domain, eps=args.eps,
                        rho0=args.rho0, delta=args.delta, n_samples=args.samples, seed=args.seed)
    print(report)
    _write_json(args.json, report)
    return 0


def _box(args: argparse.Namespace, d: int, where: str) -> tuple[list[float], list[float]]:
    """``--box LO_1 .. LO_d HI_1 .. HI_d`` as ``(lo, hi)``, checked against the network's
    ``d`` inputs."""
    values = list(args.box)
    if len(values) % 2:
        raise ValueError(f"{where}: --box takes the lower corner then the upper corner, an even "
                         f"count of numbers (LO_1 .. LO_d HI_1 .. HI_d), got {len(values)}")
    lo, hi = values[:len(values) // 2], values[len(values) // 2:]
    if len(lo) != d:
        raise ValueError(f"{where}: --box has {len(values)} numbers, corners of {len(lo)} "
                         f"coordinates; the network takes inputs of size {d} ({2 * d} numbers: "
                         f"LO_1 .. LO_{d} HI_1 .. HI_{d})")
    if not all(v - v == 0 for v in values):
        raise ValueError(f"{where}: --box must be finite numbers, got {values}")
    bad = [i + 1 for i in range(d) if not lo[i] < hi[i]]
    if bad:
        raise ValueError(f"{where}: --box needs LO_i < HI_i in every coordinate; coordinate "
                         f"{bad[0]} has LO {lo[bad[0] - 1]:g} >= HI {hi[bad[0] - 1]:g}")
    return lo, hi


def _domain(args: argparse.Namespace, d: int, where: str):
    """The domain of the options: the box of ``--box``, else the ball of ``--radius`` around
    ``--center`` (default the origin), in ``d`` inputs."""
    import jax.numpy as jnp

    import jaxcompress as jc

    box = getattr(args, "box", None)
    if box is not None:
        if getattr(args, "center", None) is not None:
            raise ValueError(f"{where}: --center is the centre of the ball of --radius; a box "
                             "(--box) gives its corners instead: give one or the other")
        lo, hi = _box(args, d, where)
        return jc.Box(jnp.asarray(lo), jnp.asarray(hi))
    if not 0 < args.radius < float("inf"):
        raise ValueError(f"{where}: --radius must be finite and > 0, got {args.radius}")
    center = None if getattr(args, "center", None) is None else _floats(args.center,
                                                                         "--center", where)
    if center is not None and len(center) != d:
        raise ValueError(f"{where}: --center has {len(center)} entries; the network takes "
                         f"inputs of size {d}")
    return jc.Ball(d, args.radius, center=None if center is None else jnp.asarray(center))


def _domain_record(args: argparse.Namespace, d: int) -> dict:
    """The domain of the options as the saved metadata records it."""
    if getattr(args, "box", None) is not None:
        return {"kind": "box", "dim": d, "lo": list(args.box[:d]), "hi": list(args.box[d:])}
    record = {"kind": "ball", "dim": d, "radius": args.radius}
    if getattr(args, "center", None) is not None:
        record["center"] = _floats(args.center, "--center", "compress")
    return record


def _where(args: argparse.Namespace) -> str:
    """The domain of the options in a few words, for the summary line."""
    if getattr(args, "box", None) is not None:
        d = len(args.box) // 2
        return f"box {list(args.box[:d])} to {list(args.box[d:])}"
    around = "" if getattr(args, "center", None) is None else f" around ({args.center})"
    return f"radius {args.radius}{around}"


def _write_json(path: str | None, record) -> None:
    """``record.to_dict()`` written to ``path`` (``--json``), if one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(record.to_dict(), f, indent=2)
        print(f"# wrote {path}")


def _verify_cmd(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # never lose the bits of a float64 input
    import jaxcompress as jc

    if args.eps is not None and not args.eps > 0:
        raise ValueError(f"verify: --eps must be positive, got {args.eps}")
    nets = [_load_model(path, None, "verify") for path in (args.teacher, args.small)]
    dims = [jc.layer_sizes(net)[0] for net in nets]
    if dims[0] != dims[1]:
        raise ValueError(f"verify: {args.teacher!r} takes inputs of size {dims[0]} and "
                         f"{args.small!r} of size {dims[1]}; expected two networks of one input")
    domain = _domain(args, dims[0], "verify")
    res = jc.verify(nets[0], nets[1], domain=domain, eps=args.eps, tol=args.tol,
                    max_seconds=args.max_seconds, progress=args.progress)
    print(res)
    _write_json(args.json, res)
    if args.plot:
        res.plot(args.plot)
        print(f"# wrote {args.plot}")
    # the exit status says what was proven: 0 the bound (certified, or a bracket converged to
    # --tol when no --eps was asked), 1 not (refuted, out of time, converged above --eps)
    proven = res.status == "certified" if args.eps is not None else res.status == "converged"
    return 0 if proven else 1


def _floats(text: str, option: str, where: str) -> list[float]:
    """Comma-separated finite numbers, or a ValueError naming the option and the bad entry."""
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{where}: {option} must be comma-separated numbers (e.g. 0.5,0), "
                             f"got {text!r} ({part.strip()!r} is not a number)") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: {option} must be finite numbers, got {text!r}")
        out.append(value)
    return out


def _plot(rows, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.semilogy([r["width"] for r in rows], [max(r["sup_error"], 1e-17) for r in rows], "o-")
    for r in rows:
        ax.annotate(f"k={r['k']}", (r["width"], max(r["sup_error"], 1e-17)), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("hidden width after compression (= D_k)")
    ax.set_ylabel("sup error on the ball")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: The environment variable that moves the compilation cache (or, ``off``, disables it).
CACHE_ENV = "JAXCOMPRESS_CACHE_DIR"


def cache_dir() -> str | None:
    """The folder of the command line's persistent compilation cache, or ``None`` when it is
    turned off (see the module docstring)."""
    path = os.environ.get(CACHE_ENV)
    if path is not None:
        return None if path.strip().lower() in ("", "off", "0", "none", "false") else path
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxcompress", "xla")


@contextlib.contextmanager
def _use_cache(enabled: bool):
    """Keep compiled programs between processes while a command runs (every program, however
    fast it compiled: the command line compiles many small ones); JAX's settings are put back
    afterwards, so that calling :func:`main` in a process leaves that process's cache as it
    was."""
    path = cache_dir() if enabled else None
    if path is None:
        yield
        return
    import jax

    settings = {"jax_compilation_cache_dir": path,
                "jax_persistent_cache_min_compile_time_secs": 0.0,
                "jax_persistent_cache_min_entry_size_bytes": 0}
    before = {name: getattr(jax.config, name) for name in settings}
    try:
        for name, value in settings.items():
            jax.config.update(name, value)
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)


#: What the exit status says, for every command (the end of ``jaxcompress --help``).
EXIT_STATUS = (
    "exit status: 0 done as asked (proven: verify's bound certified, or its bracket converged; "
    "certified; a search that met its target); 1 not proven (verify: refuted, out of time, or "
    "converged above --eps; a search stopped before its target, its best network written all "
    "the same); 2 an error (a bad or unreadable file, bad arguments, a program the library "
    "cannot read), with a one-line message on stderr and no traceback "
    "(JAXCOMPRESS_TRACEBACK=1 prints it).")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Help(argparse.HelpFormatter):
    """Every option's default said once: ``(default: X)`` appended to its help, unless the
    help already says what the default is, or there is none to say (no value, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or "default" in text or action.default is None
                or action.default is argparse.SUPPRESS or isinstance(action.default, bool)):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def _domain_args(p: argparse.ArgumentParser) -> None:
    """``--radius`` / ``--center`` (a ball) or ``--box`` (a box): the domain of a command."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("--radius", type=float, default=1.0,
                       help="radius R of the input ball (around --center)")
    group.add_argument("--box", type=float, nargs="+", metavar="X",
                       help="the input box instead of a ball: its lower corner then its upper "
                       "corner, LO_1 .. LO_d HI_1 .. HI_d (e.g. --box -1 -1 1 1)")
    p.add_argument("--center", help="centre of the ball, comma separated (default: the origin)")


def _demo_parser(sub, fmt) -> None:
    """The ``demo`` command's arguments."""
    demo = sub.add_parser("demo", help="compress the paper's random Fig. 2 network for k = 0..10",
                          formatter_class=fmt, epilog=EXIT_STATUS)
    demo.add_argument("--activation", default="sigmoid", help="activation of every hidden layer")
    demo.add_argument("--radius", type=float, default=1.0, help="radius of the input ball")
    demo.add_argument("--width", type=int, default=1024, help="width of every hidden layer")
    demo.add_argument("--depth", type=int, default=4, help="number of hidden layers")
    demo.add_argument("--kmin", type=int, default=0, help="smallest order k")
    demo.add_argument("--kmax", type=int, default=10, help="largest order k")
    demo.add_argument("--seed", type=int, default=0, help="seed of the random network")
    demo.add_argument("--samples", type=int, default=8192, help="uniform samples for sup error")
    demo.add_argument("--dtype", choices=("float32", "float64"), default="float64",
                      help="dtype of the network and of the compression")
    demo.add_argument("--out", default="demo_output", help="folder for the JSON and PNG")
    demo.set_defaults(func=_demo)


def _parser() -> argparse.ArgumentParser:
    """The command line's arguments, one sub-parser per command (building it imports no JAX)."""
    parser = _Parser(
        prog="jaxcompress",
        description="Width-independent compression of analytic MLPs by derivative matching.",
        epilog=EXIT_STATUS,
    )
    parser.add_argument("--no-cache", action="store_true",
                        help=f"do not keep compiled programs between runs (default: kept in "
                        f"${CACHE_ENV} or ~/.cache/jaxcompress/xla)")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = _Help
    _demo_parser(sub, fmt)
    comp = sub.add_parser(
        "compress", help="compress a saved network (jaxcompress.save file or .npz)",
        formatter_class=fmt, epilog=EXIT_STATUS,
        description="Compress a network file (any network jaxcompress.save wrote: a params "
        "list, a traced function or module; or an .npz of kernel_0, bias_0, kernel_1, ..., see "
        "jaxcompress.io.load_npz) and write the result with jaxcompress.save.")
    comp.add_argument("input", help="a file from jaxcompress.save, or an .npz of the params")
    comp.add_argument("-o", "--output", required=True, help="where to write the result")
    comp.add_argument("--activation", help="activation (required for an .npz without one; "
                      "must match a stored one)")
    _domain_args(comp)
    comp.add_argument("--order", type=int, help="Taylor order k")
    comp.add_argument("--eps", type=float, help="target sup error (picks the smallest k)")
    comp.add_argument("--method", choices=METHODS, default="best",
                      help="derivative: the paper's derivative matching at the centre; "
                      "collocation: selection and re-fit on Sobol points of the ball, forward "
                      "order (better on trained networks); best: both, keeping the one with the "
                      "smaller error on fixed Sobol points of the ball")
    comp.add_argument("--max-order", type=int, default=12, help="largest k tried with --eps")
    comp.add_argument("--max-seconds", type=float, default=None,
                      help="time budget of the --eps search in seconds: spent, or the error "
                      "stalled, the closest order is written and the exit status is 1")
    comp.add_argument("--samples", type=int, default=8192,
                      help="uniform samples of the sup-error measurement")
    comp.add_argument("--seed", type=int, default=0, help="PRNG seed of the measurement")
    comp.set_defaults(func=_compress_cmd)
    shr = sub.add_parser(
        "shrink", help="the smallest network within an error budget (orders, then widths)",
        formatter_class=fmt, epilog=EXIT_STATUS,
        description="Search for the smallest network whose error stays within --eps: the "
        "method at orders k = 0, 1, ... (polished with --polish) until one meets it, then "
        "narrower hidden layers while it still does (jc.compress_to_tolerance with "
        "jc.Measured). Writes the network (jaxcompress.save), every candidate measured "
        "(JSON) and the size-against-error plot (PNG).")
    shr.add_argument("input", help="a file from jaxcompress.save, or an .npz of the params")
    shr.add_argument("-o", "--output", required=True, help="where to write the network")
    shr.add_argument("--eps", type=float, required=True, default=argparse.SUPPRESS,
                     help="the error budget (required)")
    shr.add_argument("--metric", choices=("sup", "rel_l2", "psnr"), default="sup",
                     help="sup: sup error against the teacher on the ball; rel_l2: relative "
                     "L2 distance on fixed Sobol points of the ball; psnr: PSNR against the "
                     "teacher on those points in dB, the peak its range there (--eps is then "
                     "the least PSNR, e.g. 40)")
    shr.add_argument("--max-seconds", type=float, default=None,
                     help="time budget of the search in seconds: spent, or the error stalled, "
                     "the best network found, the JSON and the plot are written, and the exit "
                     "status is 1 if the target was not reached")
    shr.add_argument("--polish", action="store_true",
                     help="distil every candidate towards the teacher (jc.polish) before "
                     "measuring it: far smaller networks, minutes instead of seconds")
    shr.add_argument("--method", choices=("collocation", "derivative"), default="collocation")
    shr.add_argument("--activation", help="activation (required for an .npz without one)")
    _domain_args(shr)
    shr.add_argument("--max-order", type=int, default=12, help="largest order k tried")
    shr.add_argument("--samples", type=int, default=4096,
                     help="uniform samples of the sup-error measurement")
    shr.add_argument("--seed", type=int, default=0, help="PRNG seed of the measurement")
    shr.add_argument("--plot", help="the PNG (default: OUTPUT's name + _frontier.png)")
    shr.add_argument("--json", help="the JSON (default: OUTPUT's name + _frontier.json)")
    shr.set_defaults(func=_shrink_cmd)
    cert = sub.add_parser(
        "certify", help="print the compression certificate of a saved network",
        formatter_class=fmt, epilog=EXIT_STATUS,
        description="Print the certificate (jaxcompress.certify) of a network on the ball of "
        "radius --radius: the paper's quantities as written (W_max Eq. 6, V_max Eq. 7, rho Eq. "
        "8, Assumption 4, M_g Eq. 17, C0 and lambda Eq. 20, k* Eq. 21, k_cert Eq. 72, Lambda "
        "Lemma 15, Lambda-bar Lemma 19, the budget Eq. 62, width and parameter bounds Eqs. "
        "68-69, non-vacuity Eq. 75, the Appendix G diagnostics Eqs. 100-101) next to our "
        "sharper bounds, each row naming its source. PARAMS_FILE is an .npz with kernel_0, "
        "bias_0, kernel_1, ... (Flax Dense layout, optional 'activation' entry; see "
        "jaxcompress.io.save_npz) or a jaxcompress.save file.")
    cert.add_argument("input", metavar="PARAMS_FILE", help="an .npz of the params (or a .jcz)")
    cert.add_argument("--activation", help="activation (required for .npz without one)")
    _domain_args(cert)
    cert.add_argument("--eps", type=float, required=True, default=argparse.SUPPRESS,
                      help="target sup error (required)")
    cert.add_argument("--rho0", type=float, help="working radius in (R, rho) (default: chosen)")
    cert.add_argument("--delta", type=float, default=1e-2, help="maxvol tolerance of Lemma 10")
    cert.add_argument("--samples", type=int, default=512,
                      help="complex-sphere samples of the q-hat diagnostics (Eq. 101)")
    cert.add_argument("--seed", type=int, default=0, help="seed of those samples")
    cert.add_argument("--json", help="also write the report's to_dict() to this file")
    cert.set_defaults(func=_certify_cmd)
    _verify_parser(sub, fmt)
    _check_parser(sub, fmt)
    return parser


def _verify_parser(sub, fmt) -> None:
    """The ``verify`` command's arguments."""
    ver = sub.add_parser(
        "verify", help="prove the sup error between two saved networks (jc.verify)",
        formatter_class=fmt, epilog=EXIT_STATUS,
        description="A proven bracket lower <= sup |F_a - F_b| <= upper over the ball of "
        "radius --radius, or the box of --box (jc.verify: Taylor models of the difference, "
        "branch and bound over the domain; rigorous up to floating point), of any two networks "
        "jaxcompress.save wrote (params lists, traced functions and modules) or .npz files. "
        "With --eps it stops once it decides upper <= eps (exit status 0) or lower > eps "
        "(exit status 1, with the point); without, the exit status is 0 when the bracket "
        "converged to --tol.")
    ver.add_argument("teacher", help="a jaxcompress.save file (or .npz) of the first network")
    ver.add_argument("small", help="the second network (e.g. its compression)")
    ver.add_argument("--eps", type=float, help="the error to certify or refute")
    _domain_args(ver)
    ver.add_argument("--tol", type=float, default=0.01,
                     help="relative width at which the bracket counts as converged")
    ver.add_argument("--max-seconds", type=float, default=60.0,
                     help="time budget in seconds (compilation included)")
    ver.add_argument("--progress", action="store_true", help="print the bracket as it narrows")
    ver.add_argument("--json", help="also write the result's to_dict() to this file")
    ver.add_argument("--plot", help="also write the bracket over time to this PNG")
    ver.set_defaults(func=_verify_cmd)


def _check_cmd(args: argparse.Namespace) -> int:
    from jaxcompress.checker import check

    report = check(args.certificate, max_depth=args.max_depth, workers=args.workers,
                   progress=args.progress)
    print(report)
    return 0 if report.confirmed else 1


def _check_parser(sub, fmt) -> None:
    """The ``check`` command's arguments."""
    chk = sub.add_parser(
        "check", help="re-prove a verification certificate in ball arithmetic (jc.check)",
        formatter_class=fmt, epilog="exit status: 0 confirmed; 1 rejected (the first node "
        "that fails is named); 2 an error (a missing, truncated, foreign or damaged file).",
        description="Re-prove a certificate written by Verification.save (jc.verify's "
        "programs, domain, boxes and bracket) in Arb ball arithmetic (python-flint), without "
        "jaxcompress's verifier, JAX or the platform's libm: confirm lower <= sup |F_a - F_b| "
        "<= upper, or name the first node that fails.")
    chk.add_argument("certificate", help="the certificate (.npz) Verification.save wrote")
    chk.add_argument("--max-depth", type=int, default=24,
                     help="how many times a box may be bisected further where the checker's "
                     "bound is looser than the claimed one")
    chk.add_argument("--workers", type=int, default=None,
                     help="processes that share the leaves (default: one per core this "
                     "process may use, for at least 256 leaves each; 1: this process alone)")
    chk.add_argument("--progress", action="store_true",
                     help="print the leaves proven and the time left every 5 s (with several "
                     "processes: the first one's share)")
    chk.set_defaults(func=_check_cmd)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status
    (see :data:`EXIT_STATUS`). ``--help`` and a usage error exit as argparse does
    (``SystemExit`` with status 0, or 2 after a one-line message)."""
    args = _parser().parse_args(argv)
    from jaxcompress._stored import keep_programs

    path = cache_dir() if not args.no_cache else None
    try:
        with _use_cache(not args.no_cache), \
                keep_programs(None if path is None else os.path.join(path, "programs")):
            return args.func(args)
    except Exception as e:   # noqa: BLE001 - every error is exit status 2 and one line
        if os.environ.get("JAXCOMPRESS_TRACEBACK", "").strip() not in ("", "0"):
            raise
        print(f"jaxcompress: error: {_one_line(e)}", file=sys.stderr)
        return 2


def _one_line(e: BaseException) -> str:
    """An exception as one line: its message with its line breaks as spaces, its type named
    unless it is one of the ordinary errors of bad input (ValueError, FileNotFoundError,
    TypeError)."""
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, (ValueError, FileNotFoundError, TypeError)):
        return text
    return f"{type(e).__name__}: {text}"


if __name__ == "__main__":
    sys.exit(main())
