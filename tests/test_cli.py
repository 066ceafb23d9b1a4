"""The command line: `jaxcompress demo` (a small fast twin in the default run; the real one is
slow), every verb on every kind of saved network (a params list, a traced function, an nnx
module), its domains (--radius / --box), its exit status and its help."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, serialization

import jaxcompress as jc
from jaxcompress import cli

BOX = ["--box", "-1", "-1", "1", "1"]


def test_demo_small(tmp_path, capsys, monkeypatch):
    # the command line keeps its programs in its own cache folder while it runs, and puts
    # JAX's settings back: a caller's process keeps its own cache
    monkeypatch.setenv("JAXCOMPRESS_CACHE_DIR", str(tmp_path / "cache"))
    before = {name: getattr(jax.config, name) for name in (
        "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes")}
    rc = cli.main(["demo", "--width", "48", "--kmax", "3", "--samples", "1024",
                   "--out", str(tmp_path)])
    assert rc == 0
    assert {name: getattr(jax.config, name) for name in before} == before
    assert any((tmp_path / "cache").iterdir())
    out = capsys.readouterr().out
    assert "sup error" in out and "device" in out
    data = json.loads((tmp_path / "demo.json").read_text())
    errs = [r["sup_error"] for r in data["rows"]]
    assert [r["width"] for r in data["rows"]] == [1, 3, 6, 10]
    assert errs[-1] < errs[0] * 1e-2
    assert (tmp_path / "demo_error_vs_width.png").stat().st_size > 1000


def test_demo_bad_activation(capsys):
    assert cli.main(["demo", "--activation", "relu", "--width", "8", "--kmax", "1"]) == 2
    assert "not analytic" in capsys.readouterr().err


@pytest.mark.slow
def test_demo_default_command(tmp_path):
    # the README's first command, as a new user runs it (must finish in under 2 minutes)
    proc = subprocess.run([sys.executable, "-m", "jaxcompress.cli", "demo", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "demo.json").read_text())["rows"]
    assert rows[-1]["width"] == 66 and rows[-1]["sup_error"] < 1e-9


def test_compiled_programs_are_kept_between_runs(tmp_path, monkeypatch):
    """The command line keeps XLA's programs in a per-user folder (JAXCOMPRESS_CACHE_DIR moves
    it, "off" turns it off): a second process reads them instead of compiling."""
    monkeypatch.setenv(cli.CACHE_ENV, str(tmp_path / "xla"))
    assert cli.cache_dir() == str(tmp_path / "xla")
    for off in ("off", "0", ""):
        monkeypatch.setenv(cli.CACHE_ENV, off)
        assert cli.cache_dir() is None
    monkeypatch.delenv(cli.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    assert cli.cache_dir() == str(tmp_path / "home" / "jaxcompress" / "xla")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env[cli.CACHE_ENV] = str(tmp_path / "runs")
    # k = 0 only: the fewest programs that still run every stage (compress, measure, plot),
    # each compiled cold here
    cmd = [sys.executable, "-m", "jaxcompress.cli", "demo", "--width", "12", "--depth", "1",
           "--kmax", "0", "--samples", "256", "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "runs").iterdir())    # every program, however fast it compiled


def _cli(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = cli.main([str(a) for a in argv])
    except SystemExit as e:   # argparse's usage errors
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _siren(p, x):
    """A SIREN-like chain of ``sin(3 (h W + b))`` layers (omega_0 = 3: small enough for low
    orders to mean something on the unit box)."""
    h = x
    for layer in p[:-1]:
        h = jnp.sin(3.0 * (h @ layer["kernel"] + layer["bias"][None, :]))
    return h @ p[-1]["kernel"] + p[-1]["bias"][None, :]


class _SirenModule(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(2, 16, rngs=rngs)
        self.l2 = nnx.Linear(16, 16, rngs=rngs)
        self.l3 = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x):
        return self.l3(jnp.sin(3.0 * self.l2(jnp.sin(3.0 * self.l1(x)))))


@pytest.fixture(scope="module")
def siren_file(tmp_path_factory):
    """A SIREN traced from a plain function and saved: its activation, sin(3u), is no
    registered one, so the file holds no chain of dense layers, only its program."""
    folder = tmp_path_factory.mktemp("siren")
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1], dtype=jnp.float32)
    jc.save(folder / "teacher.jcz", jc.trace(_siren, params, jnp.zeros((4, 2), jnp.float32)))
    return folder / "teacher.jcz"


def test_every_verb_on_a_saved_siren(siren_file, tmp_path, capsys):
    """compress, verify and certify read a saved traced SIREN as the Python verbs read it
    (issue 62: verify crashed on the exported program, compress refused "not a chain")."""
    small = tmp_path / "small.jcz"
    rc, out, _ = _cli(["compress", siren_file, "-o", small, "--order", "2", "--samples", "256",
                       *BOX], capsys)
    assert rc == 0 and "box [-1.0, -1.0] to [1.0, 1.0]" in out
    loaded = jc.load(small)
    assert loaded.layer_sizes() == [2, 6, 6, 1] and loaded.program is not None
    assert loaded.metadata["domain"] == {"kind": "box", "dim": 2, "lo": [-1.0, -1.0],
                                         "hi": [1.0, 1.0]}
    box = jc.Box(jnp.array([-1.0, -1.0]), jnp.array([1.0, 1.0]))
    # the same compression in Python, of the same file
    ref, _ = jc.compress(jc.load(siren_file), jc.best_of(jc.derivative_matching(2),
                                                         jc.collocation(2)), domain=box)
    pts = np.asarray(jc.Ball(2, 1.0).sample(jax.random.PRNGKey(2), 32, jnp.float32))
    np.testing.assert_allclose(loaded(pts), jc.trim(ref)(pts), rtol=1e-5, atol=1e-6)

    # verify: 0 proven, 1 refuted; the bracket is the Python verb's on the loaded files
    rc, out, _ = _cli(["verify", siren_file, small, "--eps", "10", "--max-seconds", "600",
                       "--json", tmp_path / "v.json", *BOX], capsys)
    assert rc == 0 and "status certified" in out
    res = jc.verify(jc.load(siren_file), jc.load(small), domain=box, eps=10.0,
                    max_seconds=600)
    got = json.loads((tmp_path / "v.json").read_text())
    assert res.status == "certified" and (got["lower"], got["upper"]) == (res.lower, res.upper)
    rc, out, _ = _cli(["verify", siren_file, small, "--eps", "1e-9", "--max-seconds", "600",
                       *BOX], capsys)
    assert rc == 1 and "status refuted" in out

    # certify refuses sin(3u) (no certified bound rule) as Python does: one line, status 2
    with pytest.raises(ValueError, match="no certified bound rule") as py:
        jc.certify(jc.load(siren_file), domain=box, eps=1e-3)
    rc, _, err = _cli(["certify", siren_file, "--eps", "1e-3", *BOX], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(py.value).split("(")[0] in err


def test_compress_and_shrink_a_saved_module(tmp_path, capsys):
    """An nnx SIREN saved with jc.trace_module: compress and shrink write networks that load
    and run, read from the file alone."""
    model = _SirenModule(nnx.Rngs(0))
    x = jnp.zeros((4, 2), jnp.float32)
    jc.save(tmp_path / "module.jcz", jc.trace_module(model, x))
    rc, out, _ = _cli(["compress", tmp_path / "module.jcz", "-o", tmp_path / "small.jcz",
                       "--order", "2", "--samples", "256"], capsys)
    assert rc == 0 and "radius 1.0" in out
    small = jc.load(tmp_path / "small.jcz")
    assert small.layer_sizes() == [2, 6, 6, 1]
    err = small.metadata["measured_sup_error"]
    pts = np.asarray(jc.Ball(2, 1.0).sample(jax.random.PRNGKey(3), 64, jnp.float32))
    assert 0 < np.max(np.abs(small(pts) - model(pts))) <= err * (1 + 1e-6)
    rc, out, _ = _cli(["shrink", tmp_path / "module.jcz", "-o", tmp_path / "shrunk.jcz",
                       "--eps", "1.2", "--max-order", "2", "--samples", "256"], capsys)
    shrunk = jc.load(tmp_path / "shrunk.jcz")
    assert rc == 0 and shrunk.metadata["measured_sup_error"] <= 1.2
    assert shrunk.num_params() < small.num_params() and shrunk.program is not None
    assert np.max(np.abs(shrunk(pts) - model(pts))) <= 1.2


def test_a_box_on_a_params_list(tmp_path, capsys):
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 64, 64, 1])
    jc.save(tmp_path / "t.jcz", teacher, activation="tanh")
    box = ["--box", "-1", "-0.5", "1", "0.5"]
    rc, _, _ = _cli(["compress", tmp_path / "t.jcz", "-o", tmp_path / "s.jcz", "--order", "3",
                     "--samples", "256", *box], capsys)
    assert rc == 0
    small = jc.load(tmp_path / "s.jcz")
    assert small.metadata["domain"]["kind"] == "box" and small.activation == "tanh"
    # the certificate holds on the ball around the box (half-diagonal sqrt(1.25))
    rc, out, _ = _cli(["certify", tmp_path / "t.jcz", "--eps", "1e-3", *box], capsys)
    assert rc == 0 and "on the ball |x - c| <= 1.11803" in out


def test_errors_are_one_line_and_status_2(siren_file, tmp_path, capsys):
    """Bad arguments, bad files and a program the library cannot read: exit status 2, one line
    on stderr naming the problem, never a traceback."""
    out = tmp_path / "o.jcz"
    cases = {
        ("--box", "-1", "1", "1"): "even count",
        ("--box", "1", "-1", "-1", "1"): "coordinate 1 has LO 1 >= HI -1",
        ("--box", "-1", "-1", "-1", "1", "1", "1"): "inputs of size 2",
        ("--box", "-1", "-1", "1", "1", "--radius", "2"): "not allowed with argument",
        ("--box", "-1", "-1", "1", "1", "--center", "0,0"): "give one or the other",
        ("--radius", "-1"): "--radius must be finite and > 0",
        ("--activation", "tanh"): "leave out --activation",
    }
    for extra, want in cases.items():
        rc, _, err = _cli(["compress", siren_file, "-o", out, "--order", "1", *extra], capsys)
        assert rc == 2 and want in err and err.count("\n") == 1, (extra, err)
    rc, _, err = _cli(["verify", tmp_path / "missing.jcz", siren_file], capsys)
    assert rc == 2 and "no such file" in err and err.count("\n") == 1
    # a traced network saved before its program was stored as a jaxpr
    doc = serialization.msgpack_restore(siren_file.read_bytes())
    for field in ("jaxpr", "jaxpr_sha256"):
        doc.pop(field)
    old = tmp_path / "old.jcz"
    old.write_bytes(serialization.msgpack_serialize(doc))
    for argv in (["verify", old, siren_file], ["compress", old, "-o", out, "--order", "1"],
                 ["shrink", old, "-o", out, "--eps", "0.1"], ["certify", old, "--eps", "0.1"]):
        rc, _, err = _cli(argv, capsys)
        assert rc == 2 and err.count("\n") == 1, (argv, err)
        assert "holds its program only exported" in err and "save it again" in err


def test_help_says_each_default_once_and_imports_no_jax():
    code = """
import contextlib, io, json, sys
from jaxcompress import cli
texts = {}
for verb in ("", "demo", "compress", "shrink", "certify", "verify"):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            cli.main([verb, "--help"] if verb else ["--help"])
    except SystemExit as e:
        assert e.code == 0
    texts[verb] = buf.getvalue()
json.dump({"texts": texts, "jax": sorted(m for m in sys.modules if m.split(".")[0] in
                                         ("jax", "jaxlib"))}, sys.stdout)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["jax"] == []     # --help answers before JAX is imported
    for verb, text in got["texts"].items():
        flat = " ".join(text.split())
        assert not re.search(r"\(default: [^()]*\)\s*\(default:", flat), (verb, flat)
        assert "exit status: 0" in flat, verb
    demo = cli._parser()._subparsers._group_actions[0].choices["demo"]
    for action in demo._actions:
        if action.option_strings and action.dest != "help":
            assert "(default: %(default)s)" in cli._Help("demo")._get_help_string(action), \
                action.dest
