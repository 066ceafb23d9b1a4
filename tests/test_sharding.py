"""Compression with the neurons sharded over devices (four forced CPU devices, see conftest)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxcompress as jc
from jaxcompress.driver import run_jit
from jaxcompress.graph import Network
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
    # slow: the sharded maxvol and forward collocation (OMP) selections keep the one-device
    # neurons, kernels and biases in test_kept_neurons_do_not_depend_on_the_device_count below
    # (so the same error too); the replicated result is this test's derivative case
    pytest.param("maxvol", jc.derivative_matching(4, selector=jc.MaxVol()),
                 marks=pytest.mark.slow),
    pytest.param("collocation", jc.collocation(3), marks=pytest.mark.slow),
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
        if method.selector.device_independent:  # every selector here: the same pivot order
            np.testing.assert_array_equal(l4.kept, l1.kept)
            assert int(l4.swaps) == int(l1.swaps)


class _Tournament(jc.PivotedQR):
    """Pivoted QR whose sharded form is the default tournament (the reference for the test
    below: the test must be able to fail)."""

    device_independent = False

    def distributed_select(self, z, m, *, axis, out_kernel, target, layer=0):
        return jc.select.Selector.distributed_select(self, z, m, axis=axis, out_kernel=out_kernel,
                                              target=target, layer=layer)


@pytest.mark.parametrize("name,method", [
    ("pivoted_qr", jc.derivative_matching(5)),
    # greedy_gs runs the same distributed pivoting as pivoted_qr (one function for both)
    ("maxvol", jc.derivative_matching(5, selector=jc.MaxVol())),
    ("weight_norm", jc.derivative_matching(5, selector="weight_norm")),
    ("collocation/omp", jc.collocation(4)),
])
def test_kept_neurons_do_not_depend_on_the_device_count(name, method):
    # on 2 devices, 64 neurons per device > 2 x width 21 (k = 5): not every neuron is a
    # tournament candidate, so only a selection over every device's columns is exact
    teacher = jc.init_mlp(jax.random.PRNGKey(6), [2, 128, 128, 1])
    one, info1 = jc.compress(teacher, method, activation="sigmoid")
    assert method.selector.device_independent
    for n_dev in (2, 4):
        mesh = Mesh(np.array(jax.devices()[:n_dev]), ("neurons",))
        many, info = jc.compress(jc.shard(teacher, mesh), method, activation="sigmoid")
        for l1, ln in zip(info1.layers, info.layers, strict=True):
            np.testing.assert_array_equal(ln.kept, l1.kept, err_msg=f"{name}, {n_dev} devices")
            assert (int(ln.rank), int(ln.swaps)) == (int(l1.rank), int(l1.swaps))
            np.testing.assert_allclose(float(ln.max_coef), float(l1.max_coef), rtol=1e-8)
        for a, b in zip(one, many, strict=True):
            scale = float(np.max(np.abs(a["kernel"])))
            np.testing.assert_allclose(b["kernel"], a["kernel"], rtol=0, atol=1e-9 * scale)
            np.testing.assert_array_equal(b["bias"], a["bias"])
    if name == "pivoted_qr":  # the tournament on the same teacher keeps other neurons
        mesh = Mesh(np.array(jax.devices()[:2]), ("neurons",))
        _, tour = jc.compress(jc.shard(teacher, mesh), jc.derivative_matching(
            5, selector=_Tournament()), activation="sigmoid")
        assert any(not np.array_equal(t.kept, l1.kept)
                   for t, l1 in zip(tour.layers, info1.layers, strict=True))


def test_distributed_pivoting_takes_the_global_best_column_and_the_smallest_index_on_ties():
    # duplicated columns: the largest norm appears on devices 1 and 3, the second on 0 and 2
    mesh = Mesh(np.array(jax.devices()[:4]), ("neurons",))
    rng = np.random.default_rng(0)
    base = rng.standard_normal((6, 8))
    base[:, 5] *= 10.0   # global column 8 + 5 = 13 (device 1), again as 29 (device 3)
    base[:, 2] *= 5.0
    z = np.concatenate([base[:, [0, 1, 3, 4, 6, 7, 2, 2]], base, base[:, [0, 1, 3, 4, 6, 7, 2, 2]],
                        base], axis=1)
    want = jc.select.select_columns(jnp.asarray(z), 6, "greedy_gs")

    def local(zl):
        sel = jc.PivotedQR().distributed_select(zl, 6, axis="neurons", out_kernel=None,
                                                target=None)
        return sel.kept, sel.rank

    kept, rank = jax.shard_map(local, mesh=mesh, in_specs=P(None, "neurons"),
                               out_specs=(P(), P()), check_vma=False)(jnp.asarray(z))
    assert int(kept[0]) == 13 and int(rank) == 6
    np.testing.assert_array_equal(kept, want.perm[:6])


def test_sharding_divides_the_memory_per_device(mesh):
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 2048, 2048, 1])
    sharded = jc.shard(teacher, mesh)
    method, domain = jc.derivative_matching(5), jc.Ball(2, 1.0)
    plan = Network.from_params(teacher, "sigmoid").plan()
    one = run_jit.lower(jax.tree.leaves(teacher), method, domain, plan=plan,
                        placement=None).compile().memory_analysis()
    four = run_jit.lower(jax.tree.leaves(sharded), method, domain, plan=plan,
                         placement=params_placement(sharded)).compile().memory_analysis()
    assert one.argument_size_in_bytes / four.argument_size_in_bytes > 3.99
    live1 = one.argument_size_in_bytes + one.temp_size_in_bytes
    live4 = four.argument_size_in_bytes + four.temp_size_in_bytes
    # measured: 4.4x for derivative matching on [2, 2048 x 3, 1] at k = 6, 3.2x for collocation
    assert live1 / live4 > 3.5, (live1, live4)


def test_random_selection_has_no_sharded_form(mesh):
    teacher = jc.shard(jc.init_mlp(jax.random.PRNGKey(4), [2, 16, 1]), mesh)
    with pytest.raises(ValueError, match="random baseline has no sharded form"):
        jc.compress(teacher,
                    jc.collocation(2, selector=jc.select.RandomChoice(jax.random.PRNGKey(0))),
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
