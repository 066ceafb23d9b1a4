"""The `jaxcompress demo` command (a small fast twin in the default run; the real one is slow)."""

import json
import os
import subprocess
import sys

import pytest

from jaxcompress import cli


def test_demo_small(tmp_path, capsys):
    rc = cli.main(["demo", "--width", "48", "--kmax", "3", "--samples", "1024",
                   "--out", str(tmp_path)])
    assert rc == 0
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
    cmd = [sys.executable, "-m", "jaxcompress.cli", "demo", "--width", "12", "--depth", "1",
           "--kmax", "1", "--samples", "256", "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "runs").iterdir())    # every program, however fast it compiled
