"""save / load: bit-exact round trips, metadata, and clear errors on bad files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcompress as jc
from jaxcompress import cli


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_save_load_bit_exact(tmp_path, dtype):
    teacher = jc.init_mlp(jax.random.PRNGKey(0), [2, 40, 40, 1], dtype=dtype)
    small, info = jc.compress(teacher, activation="sigmoid", order=3, radius=0.7)
    x = jc.Ball(2, 0.7).sample(jax.random.PRNGKey(1), 64, dtype)
    path = tmp_path / "model.jcz"
    jc.save(path, small, activation="sigmoid", info=info,
            metadata={"domain": {"kind": "ball", "radius": 0.7}, "sup_error": jnp.float32(1e-5)})
    loaded = jc.load(path)
    params, act, meta = loaded
    assert act == "sigmoid" and loaded.sizes == [2, 10, 10, 1]
    for a, b in zip(params, small, strict=True):
        assert a["kernel"].dtype == dtype
        np.testing.assert_array_equal(a["kernel"], b["kernel"])
        np.testing.assert_array_equal(a["bias"], b["bias"])
    np.testing.assert_array_equal(jc.apply(params, x, activation=act),
                                  jc.apply(small, x, activation="sigmoid"))
    assert meta["domain"]["radius"] == 0.7
    comp = meta["compression"]
    assert [li["order"] for li in comp["layers"]] == [3, 3]
    assert comp["layers"][0]["kept"] == np.asarray(info.layers[0].kept).tolist()


def test_bad_files(tmp_path):
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 5, 1])
    good = tmp_path / "good.jcz"
    jc.save(good, params, activation="tanh")
    blob = good.read_bytes()
    cases = {
        "truncated.jcz": blob[: len(blob) // 2],
        "empty.jcz": b"",
        "png.jcz": b"\x89PNG\r\n\x1a\n" + bytes(100),
        "json.jcz": json.dumps({"hello": 1}).encode(),
    }
    # flip one byte inside the last kernel's data: the checksum must catch it
    corrupt = bytearray(blob)
    corrupt[len(blob) - 120] ^= 0x01
    cases["corrupt.jcz"] = bytes(corrupt)
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(ValueError, match="not a valid jaxcompress model file"):
            jc.load(p)
    from flax import serialization

    other = tmp_path / "other.msgpack"
    other.write_bytes(serialization.msgpack_serialize({"weights": np.ones(3)}))
    with pytest.raises(ValueError, match="not written by jaxcompress"):
        jc.load(other)
    with pytest.raises(FileNotFoundError):
        jc.load(tmp_path / "missing.jcz")


def test_npz_format(tmp_path):
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 6, 1])
    jc.io.save_npz(tmp_path / "p.npz", params, activation="gelu")
    loaded = jc.load(tmp_path / "p.npz")
    assert loaded.activation == "gelu" and loaded.sizes == [2, 6, 1]
    np.savez(tmp_path / "bad.npz", w0=np.ones((2, 3)))
    with pytest.raises(ValueError, match="expected keys kernel_0"):
        jc.io.load_npz(tmp_path / "bad.npz", activation="gelu")
    jc.io.save_npz(tmp_path / "noact.npz", params)
    with pytest.raises(ValueError, match="pass activation"):
        jc.io.load_npz(tmp_path / "noact.npz")


def _cli(argv) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's usage errors
        return e.code


def test_cli_compress_on_a_saved_file(tmp_path, capsys):
    # in-process (the `python -m jaxcompress.cli` entry point runs in tests/test_cli.py's slow
    # twin); a subprocess would pay JAX's start-up and every compilation again
    teacher = jc.init_mlp(jax.random.PRNGKey(3), [2, 64, 64, 1])
    src = tmp_path / "teacher.jcz"
    jc.save(src, teacher, activation="sigmoid")
    out = tmp_path / "small.jcz"
    assert _cli(["compress", str(src), "-o", str(out), "--order", "4", "--samples", "1024"]) == 0
    stdout = capsys.readouterr().out
    assert "before" in stdout and "after" in stdout
    loaded = jc.load(out)
    assert loaded.sizes == [2, 15, 15, 1]
    assert loaded.metadata["measured_sup_error"] < 1e-4
    assert _cli(["compress", str(src), "-o", str(out)]) == 2
    assert "--order" in capsys.readouterr().err


def _siren(p, x):
    h = x
    for layer in p[:-1]:
        h = jnp.sin(3.0 * (h @ layer["kernel"] + layer["bias"][None, :]))
    return h @ p[-1]["kernel"] + p[-1]["bias"][None, :]


def test_a_saved_traced_network_keeps_its_program_as_a_jaxpr(tmp_path):
    """The file of a traced network holds its jaxpr beside the exported program: rebuilt on
    load, it computes what the exported program computes at any batch size, traces to the same
    neuron groups, and survives a second save; damaged or missing, it is said so."""
    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1], dtype=jnp.float32)
    net = jc.trace(_siren, params, jnp.zeros((4, 2), jnp.float32))
    jc.save(tmp_path / "s.jcz", net)
    loaded = jc.load(tmp_path / "s.jcz")
    assert loaded.chain is None and loaded.program is not None and loaded.program_why == ""
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (7, 2), jnp.float32))
    for n in (1, 7):
        np.testing.assert_allclose(loaded.program(loaded.params, x[:n]), loaded(x[:n]),
                                   rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="has dtype float32, got float64"):
        loaded.program(loaded.params, x.astype(np.float64))   # no silent cast
    again = loaded.as_network()
    assert again.chain and again.layer_sizes() == net.layer_sizes()
    assert [g.width for g in again.compressible] == [16, 16]
    small, _ = jc.compress(loaded, jc.derivative_matching(2), domain=jc.Ball(2, 1.0))
    jc.save(tmp_path / "small.jcz", small)
    twice = jc.load(tmp_path / "small.jcz")
    assert list(twice.params) == list(loaded.params)     # the paths of the first file
    assert twice.layer_sizes() == [2, 6, 6, 1] and twice.program is not None
    np.testing.assert_allclose(twice(x), small(x), rtol=1e-6, atol=1e-6)

    from flax import serialization

    doc = serialization.msgpack_restore((tmp_path / "s.jcz").read_bytes())
    damaged = dict(doc, jaxpr=bytes(doc["jaxpr"])[:-1] + b"\x00")
    (tmp_path / "damaged.jcz").write_bytes(serialization.msgpack_serialize(damaged))
    with pytest.raises(ValueError, match="stored jaxpr does not match its checksum"):
        jc.load(tmp_path / "damaged.jcz")
    old = {k: v for k, v in doc.items() if k not in ("jaxpr", "jaxpr_sha256")}
    (tmp_path / "old.jcz").write_bytes(serialization.msgpack_serialize(old))
    old = jc.load(tmp_path / "old.jcz")
    np.testing.assert_array_equal(old(x), loaded(x))    # it still runs
    assert old.program is None and "did not store the program as a jaxpr" in old.program_why
    with pytest.raises(ValueError, match="holds its program only exported"):
        jc.compress(old, jc.collocation(2), domain=jc.Ball(2, 1.0))
    from jaxcompress.verification.interpret import UnsupportedPrimitiveError

    with pytest.raises(UnsupportedPrimitiveError, match="save the network again with jc.save"):
        jc.verify(old, loaded, domain=jc.Ball(2, 1.0), eps=1.0)


def _with_numbers(p, x):
    """A PINN package's convention: dimensions and a frequency kept in the params tree."""
    # cast: jc.trace passes the numbers as arrays (int64 / float64), and the tests' dtype
    # promotion is strict
    h = x * jnp.asarray(p["omega"] / (15 * p["d_in"]), x.dtype)
    for layer in p["layers"][:-1]:
        h = jnp.tanh(jnp.asarray(p["scale"], x.dtype) * (h @ layer["kernel"]
                                                           + layer["bias"][None, :]))
    return h @ p["layers"][-1]["kernel"] + p["layers"][-1]["bias"][None, :]


def test_python_numbers_in_the_params_round_trip(tmp_path):
    """Python numbers among a traced network's params (ints, a float, a bool) come back from
    ``jc.load`` as the same Python values and types; the loaded network computes what was
    saved, and its file is still checksummed (a changed type is an error)."""
    from flax import serialization

    params = {"layers": jc.init_mlp(jax.random.PRNGKey(0), [2, 16, 16, 1], dtype=jnp.float32),
              "omega": 30, "d_in": 2, "scale": 1.0, "periodic": False}
    net = jc.trace(_with_numbers, params, jnp.zeros((4, 2), jnp.float32))
    small, _ = jc.compress(net, jc.collocation(2), domain=jc.Ball(2, 1.0))
    jc.save(tmp_path / "n.jcz", small)
    loaded = jc.load(tmp_path / "n.jcz")
    for key in ("omega", "d_in", "scale", "periodic"):
        got = loaded.params[f"['{key}']"]
        assert type(got) is type(params[key]) and got == params[key], (key, got)
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (5, 2), jnp.float32))
    np.testing.assert_allclose(loaded(x), small(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(loaded.program(loaded.params, x), small(x), rtol=1e-6, atol=1e-6)
    doc = serialization.msgpack_restore((tmp_path / "n.jcz").read_bytes())
    assert doc["python_leaves"] == {"['omega']": "int", "['d_in']": "int", "['scale']": "float",
                                    "['periodic']": "bool"}
    doc["python_leaves"]["['omega']"] = "float"
    (tmp_path / "bad.jcz").write_bytes(serialization.msgpack_serialize(doc))
    with pytest.raises(ValueError, match="do not match the stored checksum"):
        jc.load(tmp_path / "bad.jcz")


def test_a_stored_chain_is_checksummed(tmp_path):
    """The chain of dense layers a traced network's file keeps (what compress and certify read)
    is covered by a checksum: a flipped bit is an error, not another network."""
    from flax import serialization

    params = jc.init_mlp(jax.random.PRNGKey(0), [2, 8, 1], dtype=jnp.float32)
    jc.save(tmp_path / "t.jcz", jc.trace(lambda p, x: jc.apply(p, x, activation="tanh"),
                                         params, jnp.zeros((4, 2), jnp.float32)))
    doc = serialization.msgpack_restore((tmp_path / "t.jcz").read_bytes())
    assert doc["chain"]["activation"] == "tanh"
    first = doc["chain"]["params"][0]
    first["kernel"] = np.array(first["kernel"])
    first["kernel"].view(np.uint32)[0, 0] ^= 1
    (tmp_path / "bad.jcz").write_bytes(serialization.msgpack_serialize(doc))
    with pytest.raises(ValueError, match="stored chain does not match its checksum"):
        jc.load(tmp_path / "bad.jcz")


def test_jaxpr_documents_rebuild_the_program():
    """A jaxpr stored as plain values (_jaxpr_io) rebuilds the same program: calls (jit,
    custom_jvp: softplus), loops (scan over stacked layers, fori_loop), cond, literals and
    constants, a symbolic batch; the verifier's known calls are still recognised by their
    jaxpr; what cannot be found again by name is refused, named."""
    import msgpack

    from jaxcompress import _jaxpr_io

    shift = np.linspace(-0.5, 0.5, 8).astype(np.float32)    # a closed-over constant

    def fn(p, x):
        h = jnp.tanh(x @ p["w0"] + shift[None, :])
        def body(h, w):
            return jax.nn.softplus(h @ w), None
        h, _ = jax.lax.scan(body, h, p["ws"])
        h = jax.lax.cond(h.shape[0] > 0, lambda h: 2.0 * h, lambda h: h, h)
        h = jax.lax.fori_loop(0, 2, lambda i, h: h + 0.1 * jnp.sin(h), h)
        return h @ p["wo"]

    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    p = {"w0": jax.random.normal(keys[0], (2, 8), jnp.float32),
         "ws": jax.random.normal(keys[1], (3, 8, 8), jnp.float32) / 3,
         "wo": jax.random.normal(keys[2], (8, 1), jnp.float32)}
    leaves, tree = jax.tree.flatten(p)
    (b,) = jax.export.symbolic_shape("b")
    closed = jax.make_jaxpr(lambda ls, x: fn(jax.tree.unflatten(tree, ls), x))(
        [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in leaves],
        jax.ShapeDtypeStruct((b, 2), jnp.float32))
    program = _jaxpr_io.rebuild(msgpack.unpackb(msgpack.packb(_jaxpr_io.to_doc(closed))))
    x = jax.random.normal(jax.random.PRNGKey(1), (7, 2), jnp.float32)
    for n in (1, 7):
        np.testing.assert_array_equal(program(*leaves, x[:n])[0], fn(p, x[:n]))

    def softplus_net(w, x):
        return jax.nn.softplus(x @ w)

    def calls(jaxpr):   # the custom_jvp_call's body, as the verifier compares it
        eqn = jaxpr.eqns[1].params["jaxpr"].jaxpr.eqns[0]
        return eqn.primitive.name, str(eqn.params["call_jaxpr"])

    spec = jax.ShapeDtypeStruct((1, 2), jnp.float32)
    ref = jax.make_jaxpr(softplus_net)(p["w0"], spec)
    back = _jaxpr_io.rebuild(_jaxpr_io.to_doc(ref))
    assert calls(jax.make_jaxpr(lambda w, x: back(w, x)[0])(p["w0"], spec).jaxpr) == \
        calls(ref.jaxpr)

    # a parameter naming a class this jax lacks: refused when the document is read
    doc = _jaxpr_io.to_doc(ref)
    dot = doc["eqns"][0]["a"]
    dot["precision"] = {"t": "enum", "cls": "jax._src.lax.lax:NoSuchEnum", "v": "HIGHEST"}
    with pytest.raises(ValueError, match="names NoSuchEnum of jax._src.lax.lax, which this jax"):
        _jaxpr_io.rebuild(doc)

    mine = jax.extend.core.Primitive("my_sin")
    mine.def_impl(jnp.sin)
    mine.def_abstract_eval(lambda a: a)
    with pytest.raises(_jaxpr_io.Unstorable, match="primitive 'my_sin' is not one of JAX's"):
        _jaxpr_io.to_doc(jax.make_jaxpr(mine.bind)(spec))
