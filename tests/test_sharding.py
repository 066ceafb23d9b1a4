"""Compression with the neurons sharded over devices (four forced CPU devices, see conftest)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxcompress as jc
from jaxcompress.compression import _compress_jit
from jaxcompress.sharding import params_placement

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 (forced CPU) devices")


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()[:4]), ("neurons",))


def _err(teacher, small, act="sigmoid"):
    return float(jc.sup_error(teacher, small, activation=act, domain=jc.Ball(2, 1.0),
                              key=jax.random.PRNGKey(1), n_samples=2048))


def test_shard_places_every_hidden_neuron_and_no_device_holds_a_kernel(mesh):
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 16, 1])
    sharded = jc.shard(teacher, mesh)
    specs = [(layer["kernel"].sharding.spec, layer["bias"].sharding.spec) for layer in sharded]
    assert specs == [(P(None, "neurons"), P("neurons")), (P("neurons", None), P("neurons")),
                     (P("neurons", None), P())]
    for layer, full in zip(sharded, teacher, strict=True):
        shapes = {s.data.shape for s in layer["kernel"].addressable_shards}
        assert all(np.prod(s) == full["kernel"].size // 4 for s in shapes)
        np.testing.assert_array_equal(np.asarray(layer["kernel"]), full["kernel"])
    with pytest.raises(ValueError, match=r"divisible by the 4 devices.*layer\(s\) 1 \(width 30\)"):
        jc.shard(jc.init_mlp(jax.random.PRNGKey(0), [2, 30, 16, 1]), mesh)
    with pytest.raises(ValueError, match="no axis 'model'"):
        jc.shard(teacher, mesh, axis="model")


@pytest.mark.parametrize("name,method", [
    ("derivative", jc.derivative_matching(4)),
    ("maxvol", jc.derivative_matching(4, selector=jc.MaxVol())),
    ("collocation", jc.collocation(3)),
    ("collocation+omp/bwd", jc.collocation(3, layer_order="backward")),
])
def test_sharded_compression_agrees_with_one_device(mesh, name, method):
    teacher = jc.init_mlp(jax.random.PRNGKey(2), [2, 64, 64, 1])
    one, info1 = jc.compress(teacher, method, activation="sigmoid")
    many, info4 = jc.compress(jc.shard(teacher, mesh), method, activation="sigmoid")
    assert jc.layer_sizes(many) == jc.layer_sizes(one)
    for layer in many:  # the compressed network comes back replicated on the mesh
        assert layer["kernel"].sharding.is_fully_replicated
    e1, e4 = _err(teacher, one), _err(teacher, many)
    assert e4 <= 2 * e1 + 1e-12, (name, e1, e4)
    for l1, l4 in zip(info1.layers, info4.layers, strict=True):
        assert int(l4.rank) == int(l1.rank)
        if name == "derivative":
            # 16 neurons per device <= 2 x width: every column is a candidate, and pivoted QR
            # picks the same neurons as on one device
            assert set(np.asarray(l4.kept).tolist()) == set(np.asarray(l1.kept).tolist())


def test_sharding_divides_the_memory_per_device(mesh):
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 2048, 2048, 1])
    sharded = jc.shard(teacher, mesh)
    method, domain = jc.derivative_matching(5), jc.Ball(2, 1.0)
    one = _compress_jit.lower(teacher, method, domain, activation="sigmoid",
                              placement=None).compile().memory_analysis()
    four = _compress_jit.lower(sharded, method, domain, activation="sigmoid",
                               placement=params_placement(sharded)).compile().memory_analysis()
    assert one.argument_size_in_bytes / four.argument_size_in_bytes > 3.99
    live1 = one.argument_size_in_bytes + one.temp_size_in_bytes
    live4 = four.argument_size_in_bytes + four.temp_size_in_bytes
    # measured: 4.4x for derivative matching on [2, 2048 x 3, 1] at k = 6, 3.2x for collocation
    assert live1 / live4 > 3.5, (live1, live4)


def test_random_selection_has_no_sharded_form(mesh):
    teacher = jc.shard(jc.init_mlp(jax.random.PRNGKey(4), [2, 16, 1]), mesh)
    with pytest.raises(ValueError, match="random baseline has no sharded form"):
        jc.compress(teacher, jc.collocation(2, selector=jc.RandomChoice(jax.random.PRNGKey(0))),
                    activation="sigmoid")


def test_two_processes_give_the_single_process_result(mesh, tmp_path):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                                if "device_count" not in f)
    out = tmp_path / "two.npz"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "multihost_compress.py"), "--coordinator",
           f"localhost:{port}", "--num-processes", "2", "--local-devices", "2",
           "--sizes", "2,32,32,1", "--order", "3"]
    procs = [subprocess.Popen(cmd + ["--process-id", str(i)] + (["--out", str(out)] if i == 0
                                                                  else []),
                              env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    assert all("4 devices (2 local)" in log for log in logs), logs
    got = np.load(out)
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 32, 32, 1])
    want, info = jc.compress(jc.shard(teacher, mesh), jc.derivative_matching(3),
                             activation="sigmoid")
    for i, layer in enumerate(want):
        np.testing.assert_allclose(got[f"kernel_{i}"], layer["kernel"], rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(got[f"bias_{i}"], layer["bias"])
    for i, li in enumerate(info.layers):
        np.testing.assert_array_equal(got[f"kept_{i}"], li.kept)
    assert isinstance(want[0]["kernel"].sharding, NamedSharding)


def test_a_mesh_with_explicit_axes_works_too():
    # jax.make_mesh gives Explicit axes by default; the compression needs Auto ones
    explicit = jax.make_mesh((4,), ("neurons",))
    teacher = jc.init_mlp(jax.random.PRNGKey(5), [2, 32, 32, 1])
    small, _ = jc.compress(jc.shard(teacher, explicit), jc.derivative_matching(3),
                           activation="sigmoid")
    want, _ = jc.compress(teacher, jc.derivative_matching(3), activation="sigmoid")
    assert jc.layer_sizes(small) == jc.layer_sizes(want)
    assert _err(teacher, small) <= 2 * _err(teacher, want) + 1e-12
