"""Programs kept between processes (jaxcompress._stored): the stored program gives the same
bits as the process's own, a later process reads it instead of tracing, and a call whose key
would depend on something the store cannot vouch for (a user's function) runs as always."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from programs import TRACED, named_events

import jaxcompress as jc
from jaxcompress import _stored, cli, compiling

SIZES = [2, 12, 12, 1]


@pytest.fixture
def fresh(monkeypatch):
    """No store of an earlier test in this process (each ``keep_programs`` block below starts
    as a new process would)."""
    monkeypatch.setattr(_stored, "_STORES", {})
    return lambda: monkeypatch.setattr(_stored, "_STORES", {})


def _run(params):
    small, info = jc.compress(params, jc.derivative_matching(3), activation="tanh",
                              domain=jc.Ball(2, 1.0))
    err = jc.sup_error(params, small, activation="tanh", domain=jc.Ball(2, 1.0),
                       key=jax.random.PRNGKey(0), n_samples=256)
    return small, info, err


def _same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        assert jax.typeof(x) == jax.typeof(y)   # shape, dtype and weak type
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _traces(fn):
    """``fn()`` and the names of the functions JAX traced meanwhile."""
    return named_events(fn, TRACED)


def test_a_later_process_reads_the_programs_and_gets_the_same_bits(tmp_path, fresh):
    params = jc.init_mlp(jax.random.PRNGKey(3), SIZES)
    reference = _run(params)
    with _stored.keep_programs(tmp_path) as store:
        first = _run(params)
    assert store.counts["stored"] == 2 and store.counts["refused"] == 0, store.refusals
    assert len(list(tmp_path.glob("*.jxp"))) == 2
    _same(first, reference)
    fresh()
    with _stored.keep_programs(tmp_path) as store:
        again, traced = _traces(lambda: _run(params))
        other = _run(jc.init_mlp(jax.random.PRNGKey(4), SIZES))   # new values, same shapes
    assert store.counts == {"stored": 0, "read": 2, "reused": 2, "refused": 0}
    assert not {"_run_impl", "_sup_error"} & set(traced), traced
    _same(again, reference)
    _same(other, _run(jc.init_mlp(jax.random.PRNGKey(4), SIZES)))
    assert _stored.active() is None   # off again after the block


def test_a_new_shape_or_setting_is_a_new_program(tmp_path, fresh, monkeypatch):
    with _stored.keep_programs(tmp_path) as store:
        _run(jc.init_mlp(jax.random.PRNGKey(3), SIZES))
        _run(jc.init_mlp(jax.random.PRNGKey(3), [2, 12, 10, 1]))
        monkeypatch.setenv(compiling.ENV, "off")   # XLA's defaults: other compile options
        full = _run(jc.init_mlp(jax.random.PRNGKey(3), SIZES))
    assert store.counts["stored"] == 6
    monkeypatch.setenv(compiling.ENV, "off")
    _same(full, _run(jc.init_mlp(jax.random.PRNGKey(3), SIZES)))


def test_a_damaged_file_is_exported_again(tmp_path, fresh):
    params = jc.init_mlp(jax.random.PRNGKey(3), SIZES)
    with _stored.keep_programs(tmp_path):
        first = _run(params)
    for f in tmp_path.glob("*.jxp"):
        f.write_bytes(b"not a stored program")
    fresh()
    with _stored.keep_programs(tmp_path) as store:
        again = _run(params)
    assert store.counts["stored"] == 2 and store.counts["read"] == 0
    _same(again, first)


def _user_field(p, x):   # a user's function: its module is not pinned by the key
    return jnp.tanh(x @ p["w"]) @ p["v"]


def test_a_user_function_in_the_key_is_refused_and_runs_as_always(tmp_path, fresh):
    p = {"w": jax.random.normal(jax.random.PRNGKey(0), (2, 16), jnp.float64),
         "v": jax.random.normal(jax.random.PRNGKey(1), (16, 1), jnp.float64)}
    x = jnp.zeros((1, 2), jnp.float64)
    net = jc.trace(_user_field, p, x)
    reference = jc.compress(net, jc.derivative_matching(2), domain=jc.Ball(2, 1.0))
    with _stored.keep_programs(tmp_path) as store:
        small = jc.compress(net, jc.derivative_matching(2), domain=jc.Ball(2, 1.0))
    assert store.counts["refused"] >= 1
    assert any("_user_field" in why or "from module" in why for why in store.refusals)
    _same(small[0].params, reference[0].params)


def test_the_fingerprint_pins_library_functions_and_refuses_the_rest():
    from jaxcompress.activations import get_activation

    a, b = _stored.fingerprint(get_activation("tanh")), _stored.fingerprint(get_activation("tanh"))
    assert a == b and " at 0x" not in a
    assert a != _stored.fingerprint(get_activation("sigmoid"))
    # a closure enters with its cells: two partials of one function differ by their values
    assert (_stored.fingerprint(functools.partial(jnp.power, 2))
            != _stored.fingerprint(functools.partial(jnp.power, 3)))
    with pytest.raises(_stored._Refused, match="from module"):
        _stored.fingerprint(_user_field)
    with pytest.raises(_stored._Refused, match="no value-like"):
        _stored.fingerprint(object())
    with pytest.raises(_stored._Refused, match="a cycle"):
        loop = []
        loop.append(loop)
        _stored.fingerprint(loop)


def test_the_command_line_reads_its_programs_in_a_second_run(tmp_path, fresh, monkeypatch):
    teacher = tmp_path / "t.jcz"
    jc.save(str(teacher), jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1]),
            activation="tanh")
    monkeypatch.setenv(cli.CACHE_ENV, str(tmp_path / "cache"))
    argv = ["compress", str(teacher), "--eps", "1e-3", "--radius", "1", "--samples", "512",
            "-o"]
    assert cli.main([*argv, str(tmp_path / "a.jcz")]) == 0
    stored = sorted((tmp_path / "cache" / "programs").glob("*.jxp"))
    assert stored
    fresh()
    (rc, traced) = _traces(lambda: cli.main([*argv, str(tmp_path / "b.jcz")]))
    assert rc == 0
    assert not {"_masked_impl", "_run_impl", "_sup_error"} & set(traced), traced
    assert sorted((tmp_path / "cache" / "programs").glob("*.jxp")) == stored
    a, b = jc.load(str(tmp_path / "a.jcz")), jc.load(str(tmp_path / "b.jcz"))
    _same(a.params, b.params)
    assert a.metadata["measured_sup_error"] == b.metadata["measured_sup_error"]


def test_a_full_folder_drops_its_least_recently_used_files(tmp_path, fresh, monkeypatch):
    monkeypatch.setattr(_stored, "MAX_FILES", 4)
    for i in range(5):
        (tmp_path / f"old{i}.jxp").write_bytes(b"x")
    with _stored.keep_programs(tmp_path):
        first = _run(jc.init_mlp(jax.random.PRNGKey(3), SIZES))
    left = sorted(p.name for p in tmp_path.glob("*.jxp"))
    # the first write found 6 files and kept the newest 3 (itself and two old ones)
    assert len(left) == 4 and sum(name.startswith("old") for name in left) == 2, left
    fresh()
    with _stored.keep_programs(tmp_path) as store:   # the new ones were kept
        _same(_run(jc.init_mlp(jax.random.PRNGKey(3), SIZES)), first)
    assert store.counts["read"] == 2


def test_a_folder_that_cannot_be_written_still_serves_the_process(tmp_path, fresh,
                                                                   monkeypatch):
    def refuse(*_):
        raise OSError("read-only file system")

    monkeypatch.setattr(_stored.os, "replace", refuse)
    params = jc.init_mlp(jax.random.PRNGKey(3), SIZES)
    with _stored.keep_programs(tmp_path) as store:
        first, second = _run(params), _run(params)
    assert store.counts == {"stored": 0, "read": 0, "reused": 2, "refused": 0}
    assert any("read-only" in why for why in store.refusals)
    assert not list(tmp_path.glob("*"))   # no temporary file left behind
    _same(first, second)


def _twice(x, *, n):
    return n * x


def test_a_call_without_a_key_raises_as_the_jitted_function_does(tmp_path, fresh):
    f = compiling.FastOnSmallCPU(_twice, static_argnames=("n",))
    with _stored.keep_programs(tmp_path) as store:
        with pytest.raises(TypeError, match="unexpected keyword|got an unexpected"):
            f(jnp.ones(3), m=2)
        np.testing.assert_array_equal(f(jnp.ones(3), n=2), 2 * np.ones(3))   # runs as always
    assert store.counts["refused"] == 2 and store.counts["stored"] == 0
    assert store.refusals[0].startswith("no key: TypeError")
    assert "from module" in store.refusals[1]   # a test module's function is not pinned


def test_a_program_that_cannot_be_exported_is_tried_once(tmp_path, fresh, monkeypatch):
    tried = []

    def broken(*a, **k):
        tried.append(1)
        raise ValueError("not exportable")

    monkeypatch.setattr(_stored.jax.export, "export", broken)
    params = jc.init_mlp(jax.random.PRNGKey(3), SIZES)
    reference = _run(params)
    with _stored.keep_programs(tmp_path) as store:
        first, second = _run(params), _run(params)
    assert len(tried) == 2 and store.counts["refused"] == 4   # two programs, each tried once
    assert all(why.startswith("export failed: ValueError") for why in store.refusals)
    _same(first, reference)
    _same(second, reference)
