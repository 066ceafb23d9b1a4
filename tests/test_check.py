"""``jaxcompress.check``: a verification's certificate re-proven in Arb ball arithmetic.

What is checked: certificates of tanh pairs on a box and on a ball, of a ReLU pair, of an input
skip and of a residual add are confirmed (by the function and by ``jaxcompress check``, exit
0); tampered ones are rejected naming what failed (a leaf removed, a claim lowered below the
difference, a weight changed, ``upper`` lowered, ``lower`` raised, a box claimed to miss the
domain; exit 1); truncated, foreign and damaged files are clear errors (exit 2); a program
outside the op language is refused by ``save`` naming the primitive; the proof tree covers the
search; the checker imports neither the verifier nor JAX.

The networks are ``[2, 16, 16, 1]`` like ``tests/test_verify.py``'s, verified at order 2 to 2%
(the checks take a few seconds each).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress.checker import CertificateError, check, fileformat
from jaxcompress.cli import main
from jaxcompress.verification.proof import UnsupportedForCertificate

pytest.importorskip("flint")  # the check's ball arithmetic (jaxcompress[check], in dev)

BOX2 = jc.Box(jnp.array([-1.0, -1.0]), jnp.array([1.0, 1.0]))
RNG = np.random.default_rng(0)
W1, B1 = RNG.uniform(-0.7, 0.7, (2, 16)), RNG.uniform(-0.7, 0.7, 16)
W2, B2 = RNG.uniform(-0.25, 0.25, (16, 16)), RNG.uniform(-0.25, 0.25, 16)
W3 = RNG.uniform(-0.25, 0.25, (16, 1))


def tanh_net(scale):
    def f(x):
        h = jnp.tanh(x @ (W1 * scale) + B1[None])
        return jnp.tanh(h @ W2 + B2[None]) @ W3

    return f


def verify(a, b, domain=BOX2, **kw):
    """Order 2 to a 2% bracket: the verifier's leaves are small enough that the checker's
    third-order forms prove most without splitting them."""
    return jc.verify(a, b, domain=domain, order=2, tol=0.02, max_seconds=math.inf, **kw)


@pytest.fixture(scope="module")
def tanh_box(tmp_path_factory):
    res = verify(tanh_net(1.0), tanh_net(1.01))
    path = res.save(tmp_path_factory.mktemp("cert") / "tanh_box.npz")
    return res, path


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    """``F`` against ``F + 10^-3``: the programs begin alike and end in different biases (a
    certificate the check confirms on its root box)."""
    f = tanh_net(1.0)
    return verify(f, lambda x: f(x) + 1e-3).save(tmp_path_factory.mktemp("cert") / "shift.npz")


def rewrite(path: Path, out: Path, edit) -> Path:
    """A copy of a certificate with ``edit(meta, arrays)`` applied (and a valid checksum: the
    check must reject it for what it claims, not for its checksum)."""
    meta, arrays = fileformat.read(path)
    edit(meta, arrays)
    return fileformat.write(out, meta, arrays)


# ------------------------------------------------------------------------------------------
# confirmed


def test_tanh_box_is_confirmed(tanh_box):
    res, path = tanh_box
    report = check(path)
    assert report.confirmed, report.reason
    assert (report.upper, report.lower) == (res.upper, res.lower)
    assert report.leaves > 0 and report.boxes >= sum(
        np.isfinite(fileformat.read(path)[1]["tree_bound"]))


def test_the_command_line_confirms(shifted):
    assert main(["check", str(shifted)]) == 0
    assert main(["check", str(shifted), "--workers", "1", "--progress"]) == 0
    assert main(["check", str(shifted), "--workers", "0"]) == 2  # workers must be >= 1


def test_tanh_ball_is_confirmed(tmp_path):
    res = verify(tanh_net(1.0), tanh_net(1.01), domain=jc.Ball(2, 1.0))
    tree = fileformat.read(res.save(tmp_path / "c.npz"))[1]
    assert np.any(tree["tree_bound"] == -np.inf)  # boxes outside the ball, proven outside
    report = check(tmp_path / "c.npz")
    assert report.confirmed, report.reason


def test_relu_pair_is_confirmed(tmp_path):
    """ReLU (``max(u, 0)``): the mean-value form with the derivative ``[0, 1]`` at a kink."""
    w1, b1, w2 = RNG.normal(size=(1, 16)), RNG.normal(size=16) * 0.5, RNG.normal(size=(16, 1))

    def net(s):
        return lambda x: jax.nn.relu(x @ (w1 * s) + b1[None]) @ w2

    res = verify(net(1.0), net(1.01), domain=jc.Box(jnp.array([-1.0]), jnp.array([1.0])))
    report = check(res.save(tmp_path / "relu.npz"))
    assert report.confirmed, report.reason


@pytest.mark.slow
def test_a_2d_relu_claim_at_a_kink_is_confirmed(tmp_path):
    """A 2-D ReLU pair bracketed to ``1e-6`` (the maximum of ``|D|`` sits on kinks): the
    linear relaxations of the kinks prove it with a few extra boxes (a mean-value form with
    slopes failed at ``max_depth``). The fast twin: :func:`test_relu_pair_is_confirmed`."""
    def net(s):
        return lambda x: jax.nn.relu(x @ (W1 * s) + B1[None]) @ W3

    res = jc.verify(net(1.0), net(1.002), domain=BOX2, order=2, tol=1e-6, max_seconds=math.inf)
    assert res.upper <= res.lower * (1 + 1e-6)
    report = check(res.save(tmp_path / "relu2.npz"))
    assert report.confirmed, report.reason


def test_a_loop_is_certified_as_its_iterations(tmp_path):
    """A ``fori_loop`` (a scan: a static trip count) is lowered as the verifier reads it,
    iteration by iteration; its certificate against the unrolled steps is confirmed."""
    w, b = RNG.uniform(-0.8, 0.8, (2, 2)), RNG.uniform(-0.3, 0.3, 2)
    v = RNG.uniform(-1, 1, (2, 1))

    def step(_, h):
        return jnp.tanh(h @ w + b[None])

    def looped(x):
        return jax.lax.fori_loop(0, 3, step, x) @ v

    def unrolled(x):
        return step(2, step(1, step(0, x))) @ v * 1.01

    report = check(verify(looped, unrolled).save(tmp_path / "loop.npz"))
    assert report.confirmed, report.reason


W2S = RNG.uniform(-0.25, 0.25, (18, 1))


def skip(s):
    """``y = [tanh(x W1 + b1), x] W2``: an input skip (a concatenation with the input)."""
    return lambda x: jnp.concatenate([jnp.tanh(x @ W1 + B1[None] * s), x], axis=1) @ W2S


def residual(s):
    """``y = (h + sigmoid(h W2 + b2)) W3`` with ``h = tanh(x W1 + b1)``: a residual add."""
    def f(x):
        h = jnp.tanh(x @ W1 + B1[None])
        return (h + jax.nn.sigmoid(h @ (W2 * s) + B2[None])) @ W3

    return f


@pytest.mark.parametrize("net", [
    skip, pytest.param(residual, marks=pytest.mark.slow)], ids=["skip", "residual"])
def test_skip_and_residual_are_confirmed(tmp_path, net):
    res = verify(net(1.0), net(1.02))
    report = check(res.save(tmp_path / "c.npz"))
    assert report.confirmed, report.reason


# ------------------------------------------------------------------------------------------
# rejected


def _leaf(arrays, which="max", at=None):
    """A leaf that meets the domain: the last one, or (``at``) one whose box holds a point."""
    bound, c, h = arrays["tree_bound"], arrays["tree_c"], arrays["tree_h"]
    finite = np.nonzero(np.isfinite(bound))[0]
    if at is not None:
        finite = finite[np.all(np.abs(c[finite] - at) <= h[finite], axis=1)]
    return int(finite[np.argmax(bound[finite])] if which == "max" else finite[-1])


def test_a_removed_leaf_is_rejected(tanh_box, tmp_path):
    def edit(meta, arrays):
        drop = _leaf(arrays, "last")
        keep = np.arange(len(arrays["tree_bound"])) != drop
        parent = arrays["tree_parent"]
        arrays["tree_parent"] = np.where(parent > drop, parent - 1, parent)
        for k in ("c", "h", "parent", "kind", "bound"):
            arrays[f"tree_{k}"] = arrays[f"tree_{k}"][keep]

    report = check(rewrite(tanh_box[1], tmp_path / "t.npz", edit))
    assert not report.confirmed and "leaf" in report.reason and report.node is not None
    assert main(["check", str(tmp_path / "t.npz")]) == 1


def test_a_claim_below_the_difference_is_rejected(tanh_box, tmp_path):
    res, path = tanh_box
    meta, arrays = fileformat.read(path)
    assert np.all(arrays["tree_bound"][np.isfinite(arrays["tree_bound"])] == res.upper)
    i = _leaf(arrays, at=np.asarray(res.argmax))  # the difference there is res.lower

    def edit(meta, arrays):
        arrays["tree_bound"][i] = 0.5 * res.lower

    report = check(rewrite(path, tmp_path / "t.npz", edit))
    assert not report.confirmed and report.node == i
    assert f"leaf {i}" in report.reason


def test_processes_sharing_the_claims_give_one_process_report(tanh_box, tmp_path):
    """``workers=2``: each process checks the covering and its share of the leaves (every
    other one); merged, the report is one process's, a lowered claim rejected at its leaf."""
    res, path = tanh_box
    one, two = check(path, workers=1), check(path, workers=2, progress=True)
    assert two.confirmed and (two.leaves, two.boxes, two.depth, two.upper, two.lower) == (
        one.leaves, one.boxes, one.depth, one.upper, one.lower)
    meta, arrays = fileformat.read(path)
    assert np.isfinite(arrays["tree_bound"]).sum() >= 2 * 64  # two shares of a batch at least
    i = _leaf(arrays, at=np.asarray(res.argmax))

    def edit(meta, arrays):
        arrays["tree_bound"][i] = 0.5 * res.lower

    report = check(rewrite(path, tmp_path / "t.npz", edit), workers=2)
    assert not report.confirmed and report.node == i and f"leaf {i}" in report.reason
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        check(path, workers=0)


def test_progress_lines_tell_the_leaves_proven_and_change_nothing(tanh_box, capsys,
                                                                  monkeypatch):
    """``progress=True``: a line on stderr every ``SAY_EVERY`` seconds (here every batch), the
    leaves proven of all and the time left; the report is the one without it."""
    from jaxcompress.checker import prove

    res, path = tanh_box
    quiet = check(path)
    monkeypatch.setattr(prove, "SAY_EVERY", 0.0)
    told = check(path, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert dataclasses.replace(told, seconds=0) == dataclasses.replace(quiet, seconds=0)
    total = int(np.isfinite(fileformat.read(path)[1]["tree_bound"]).sum())
    assert len(lines) >= -(-total // prove.BATCH), lines  # a line per batch at least
    first, last = prove.BATCH, (total - 1) % prove.BATCH + 1  # told before a batch is bounded
    assert lines[0].startswith(f"check: 0 of {total:,} leaves proven, {1 + first} boxes, ")
    assert lines[-1].startswith(f"check: {total - last:,} of {total:,} leaves proven, ")
    assert all(x.endswith(" s left") for x in lines[1:]), lines
    with pytest.raises(TypeError, match="progress must be a bool"):
        check(path, progress="yes")


def test_a_changed_weight_is_rejected(tanh_box, tmp_path):
    def edit(meta, arrays):
        last = [op for op in meta["programs"]["a"]["ops"] if op["op"] == "dot"][-1]
        arrays[last["in"][1]] = arrays[last["in"][1]] * 1.5

    report = check(rewrite(tanh_box[1], tmp_path / "t.npz", edit))
    assert not report.confirmed
    assert "claim" in report.reason or "lower" in report.reason


def test_a_shared_prefix_is_run_once_and_a_change_in_it_is_seen(shifted, tmp_path):
    """``F`` against ``F + 10^-3``: the programs begin alike (their operations and constants
    equal), which the check runs once, and end in affine operations of what they share, read
    as one exact map (the shared remainders cancel: the root box proves every leaf); a weight
    changed in program a's part of that prefix is a different program, and the check rejects
    it."""
    path = shifted
    report = check(path)
    assert report.confirmed, report.reason
    assert report.boxes == 1 and report.leaves > 1

    def edit(meta, arrays):
        first = meta["programs"]["a"]["ops"][0]
        arrays[first["in"][1]] = arrays[first["in"][1]] * 1.01

    assert not check(rewrite(path, tmp_path / "t.npz", edit)).confirmed


@pytest.mark.parametrize("what", ["upper", "lower", "empty"])
def test_a_false_bracket_is_rejected(tanh_box, tmp_path, what):
    res, path = tanh_box

    def edit(meta, arrays):
        if what == "upper":
            arrays["claim"][0] = 0.5 * (res.lower + res.upper) if res.upper > res.lower * 1.001 \
                else res.lower
            arrays["claim"][0] = min(arrays["claim"][0], float(np.nanmax(arrays["tree_bound"]))
                                     * (1 - 1e-6))
        elif what == "lower":
            arrays["claim"][1] = 2 * res.lower
            arrays["claim"][0] = 3 * res.upper
        else:
            arrays["tree_bound"][_leaf(arrays)] = -np.inf

    report = check(rewrite(path, tmp_path / "t.npz", edit))
    assert not report.confirmed
    expect = {"upper": "> upper", "lower": "not attained", "empty": "miss the domain"}[what]
    assert expect in report.reason


# ------------------------------------------------------------------------------------------
# errors


def test_truncated_foreign_and_damaged_files_are_errors(tanh_box, tmp_path):
    data = Path(tanh_box[1]).read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(CertificateError, match="truncated"):
        check(tmp_path / "cut.npz")
    assert main(["check", str(tmp_path / "cut.npz")]) == 2
    np.savez(tmp_path / "other.npz", kernel_0=np.ones((2, 2)))
    with pytest.raises(CertificateError, match="not a jaxcompress certificate"):
        check(tmp_path / "other.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(CertificateError, match="cannot read"):
        check(tmp_path / "text.npz")
    with pytest.raises(CertificateError, match="no certificate"):
        check(tmp_path / "missing.npz")
    meta, arrays = fileformat.read(tanh_box[1])
    arrays["tree_bound"] = arrays["tree_bound"] * 0.5
    np.savez(tmp_path / "damaged.npz", **{"meta.json": np.frombuffer(
        __import__("json").dumps(meta).encode(), np.uint8)}, **arrays)
    with pytest.raises(CertificateError, match="damaged"):
        check(tmp_path / "damaged.npz")


def test_sums_are_read_and_a_product_of_two_values_is_refused(tmp_path):
    def summed(s):  # a row's sum, one entry repeated: products with ones
        def f(x):
            total = jnp.tanh(x @ W1[:, :3] * s).sum(axis=1, keepdims=True)
            return jnp.broadcast_to(total, (x.shape[0], 2)) @ W3[:2]

        return f

    res = verify(summed(1.0), summed(1.01))
    assert check(res.save(tmp_path / "sum.npz")).confirmed

    def inner(s):  # h . h: a dot_general of two values
        return lambda x: jnp.einsum("bi,bi->b", jnp.tanh(x @ W1[:, :3] * s),
                                    jnp.tanh(x @ W1[:, :3]))[:, None]

    res = verify(inner(1.0), inner(1.01))
    with pytest.raises(UnsupportedForCertificate, match="dot_general"):
        res.save(tmp_path / "c.npz")
    bare = jc.Verification(lower=0.0, upper=1.0, status="converged", argmax=np.zeros(2),
                           eps=None, tol=0.01, domain=BOX2, boxes=0, seconds=0.0, history=(),
                           order=2)
    with pytest.raises(ValueError, match="carries no proof"):
        bare.save(tmp_path / "c.npz")


# ------------------------------------------------------------------------------------------
# the proof tree, and the checker's independence


def test_the_tree_records_every_bounded_box(tanh_box):
    res, path = tanh_box
    arrays = fileformat.read(path)[1]
    kind, bound, parent = arrays["tree_kind"], arrays["tree_bound"], arrays["tree_parent"]
    assert int(np.sum(kind == 2)) == res.boxes  # every bounded child: one clipped node
    has_kids = np.zeros(len(kind), bool)
    has_kids[parent[1:]] = True
    assert np.all(np.isnan(bound[has_kids])) and not np.any(np.isnan(bound[~has_kids]))
    assert np.max(bound[~has_kids]) <= res.upper


def test_the_checker_imports_neither_the_verifier_nor_jax():
    allowed = {"__future__", "dataclasses", "fractions", "hashlib", "itertools", "json", "math",
               "pathlib", "time", "zipfile", "numpy", "flint", "jaxcompress.checker",
               "os", "concurrent.futures", "multiprocessing",  # the processes of workers=
               "sys"}  # progress lines on stderr
    folder = Path(jc.__file__).parent / "checker"
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name in allowed or name.startswith("jaxcompress.checker."), (path, name)


def test_the_series_match_arb_power_series():
    """``tanh``, the logistic and softplus by their differential equations, and integer powers
    by the binomial series, against Arb's power series of their closed forms, at a point and
    over a ball (every coefficient overlaps)."""
    flint = pytest.importorskip("flint")
    from jaxcompress.checker.prove import _series

    flint.ctx.prec = 64
    try:
        k = flint.arb("0.2")
        balls = (flint.arb("0.37"), flint.arb("-1.3", "1e-3"), flint.arb("2.1", "0.5"))
        v = np.empty(3, dtype=object)
        v[:] = balls
        for e, ball in enumerate(balls):  # one array of balls, each entry against its own
            x = flint.arb_series([ball, 1], prec=7)
            reference = {"tanh": 1 - 2 / (1 + (2 * x).exp()), "logistic": 1 / (1 + (-x).exp()),
                         "logaddexp": k + (1 + (x - k).exp()).log()}
            for name, series in reference.items():
                got = [c[e] for c in _series(flint, name, v, np.array([k] * 3), None, 7)]
                assert all(a.overlaps(b) for a, b in zip(got, series.coeffs(), strict=True)), name
            for y in (3, 2, -2):  # binomial series of an integer power, from the ball's ends
                want = (x * x * x if y == 3 else x * x if y == 2 else 1 / (x * x)).coeffs()
                got = [c[e] for c in _series(flint, "pow", v, None, y, 7)]
                assert all(a.overlaps(b) for a, b in zip(got, want + [0] * 7, strict=False)), y
        wide = np.empty(1, dtype=object)  # Arb's own tanh is NaN here; the ends enclose it
        wide[:] = [flint.arb(0, 1e6)]
        for name in ("tanh", "logistic", "logaddexp"):
            assert _series(flint, name, wide, np.array([k]), None, 3)[0][0].is_finite()
    finally:
        flint.ctx.prec = 53


def test_the_kink_relaxations_hold_every_value():
    """``max(v, k)``, ``min(v, k)`` and ``|v|`` lie in ``lam v + mu`` for sampled ``v`` of the
    ball they were relaxed over (the Taylor models of a ReLU network rest on it)."""
    flint = pytest.importorskip("flint")
    from jaxcompress.checker.prove import _RELAX

    rng = np.random.default_rng(7)
    for _ in range(200):
        lo, hi = np.sort(rng.normal(size=2))
        k = float(rng.uniform(lo - 0.5, hi + 0.5))
        ball = flint.arb(float(lo)).union(flint.arb(float(hi)))
        for name, f in (("max", max), ("min", min), ("abs", lambda u, _: abs(u))):
            kk = 0.0 if name == "abs" else k
            lam, mu = _RELAX[name](flint, ball, flint.arb(kk))
            for v in rng.uniform(lo, hi, 20):
                assert (lam * float(v) + mu).contains(flint.arb(float(f(v, kk)))), name


def test_the_taylor_models_enclose_the_programs():
    """Every operation of the op language on a box: the model's value at sampled ``t`` (in
    ball arithmetic) holds the program evaluated at ``x = c + h t`` (a model of width 0)."""
    flint = pytest.importorskip("flint")
    from jaxcompress.checker.prove import _Models, _parse

    rng = np.random.default_rng(3)
    arrays = {"w": rng.normal(size=(2, 3)), "b": rng.normal(size=3), "k": np.array([0.1]),
              "v": rng.normal(size=(5, 2)), "p": np.array([2.0])}
    ops = [{"op": "dot", "in": [0, "w"]}, {"op": "add", "in": [1, "b"]},
           {"op": "tanh", "in": [2]}, {"op": "logistic", "in": [2]},
           {"op": "mul", "in": [3, 4]}, {"op": "max", "in": [2, "k"]},
           {"op": "sin", "in": [5]}, {"op": "sub", "in": [7, 6]},
           {"op": "abs", "in": [8]}, {"op": "logaddexp", "in": [9, "k"]},
           {"op": "exp", "in": [10]}, {"op": "log", "in": [11]}, {"op": "erf", "in": [12]},
           {"op": "div", "in": [13, "p"]}, {"op": "pow", "in": [14], "y": 3},
           {"op": "min", "in": [15, "k"]}, {"op": "slice", "in": [16], "start": 1, "stop": 3},
           {"op": "concat", "in": [17, 0, "k"]}, {"op": "dot", "in": [18, "v"]},
           {"op": "neg", "in": [19]}, {"op": "sqrt", "in": [12]}]
    flint.ctx.prec = 64
    try:
        prog, _, _ = _parse("a", {"ops": ops, "out": len(ops)}, arrays, 2, flint)
        c, h = rng.uniform(-0.5, 0.5, (3, 2)), np.array([[0.9, 0.7], [0.05, 0.1], [0.0, 0.4]])
        for order in (1, 2, 4):
            models = _Models(flint, c, h, order)
            vals = models.run(prog, 2)[0]
            mono = sorted((e for e in itertools.product(range(order + 1), repeat=2)
                           if sum(e) <= order), key=lambda e: (sum(e), [-v for v in e]))
            for t in [*rng.uniform(-1, 1, (6, 2)), *itertools.product((-1.0, 1.0), repeat=2)]:
                x = c + h * t  # rounded: the model is read at the exact t of this x
                exact_t = [[(flint.arb(x[b, a]) - c[b, a]) / h[b, a] if h[b, a] else
                            flint.arb(0) for a in range(2)] for b in range(3)]
                point = _Models(flint, x, np.zeros_like(h), 1).run(prog, 2)[0]
                for value, exact in zip(vals, point, strict=True):
                    n = len(exact[0]) // 3
                    for i, v in enumerate(exact[0]):
                        tb = exact_t[i // n]
                        model = sum((row[i] * math.prod([tb[0]] * e[0] + [tb[1]] * e[1])
                                     for row, e in zip(value, mono, strict=True)), flint.arb(0))
                        assert model.overlaps(v), (order, i, str(model), str(v))
    finally:
        flint.ctx.prec = 53
