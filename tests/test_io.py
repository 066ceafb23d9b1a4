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
