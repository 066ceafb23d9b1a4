r"""The certificate file: an ``.npz`` of a JSON header ``meta.json`` (format, version, domain kind,
programs, status) and named float64 / integer arrays (weights, domain, proof tree, ``claim``,
``argmax``), with a SHA-256 checksum over both: against damage, no signature."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["FORMAT", "VERSION", "CertificateError", "read", "write"]

FORMAT = "jaxcompress verification certificate"
VERSION = 1
_META = "meta.json"


class CertificateError(ValueError):
    """A file that is not a readable certificate (truncated, foreign, damaged, malformed)."""


def checksum(meta: dict, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of the header (less its ``checksum``) and every array's name, dtype, shape, bytes."""
    head = {k: v for k, v in meta.items() if k != "checksum"}
    digest = hashlib.sha256(json.dumps(head, sort_keys=True).encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(f"\0{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def write(path, meta: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Write a certificate (``meta`` gets ``format``, ``version`` and ``checksum``)."""
    meta = {**meta, "format": FORMAT, "version": VERSION}
    meta["checksum"] = checksum(meta, arrays)
    header = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8)
    with open(path, "wb") as fh:  # a file object: savez would append ".npz" to a bare name
        np.savez_compressed(fh, **{_META: header}, **arrays)
    return Path(path)


def read(path) -> tuple[dict, dict[str, np.ndarray]]:
    """``(meta, arrays)`` of a certificate; :class:`CertificateError` naming what is wrong."""
    name = repr(str(path))
    if not Path(path).is_file():
        raise CertificateError(f"check: no certificate at {name} (not a file)")
    try:  # not a zip (a bare .npy array, text, a truncated file) is refused before NumPy reads it
        if not zipfile.is_zipfile(path):
            raise zipfile.BadZipFile("not a zip archive")
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: np.array(data[key]) for key in data.files}
        meta = json.loads(arrays.pop(_META).tobytes().decode()) if _META in arrays else None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise CertificateError(f"check: cannot read {name} as a certificate (a zip of NumPy "
                               f"arrays written by Verification.save): it is truncated or of "
                               f"another kind ({type(exc).__name__}: {exc})") from exc
    found = (meta.get("format"), meta.get("version")) if isinstance(meta, dict) else None
    if found != (FORMAT, VERSION):
        raise CertificateError(f"check: {name} is not a jaxcompress certificate of version "
                               f"{VERSION} (format, version: {found}; arrays {sorted(arrays)[:5]})")
    if meta.get("checksum") != checksum(meta, arrays):
        raise CertificateError(f"check: {name} is damaged: its SHA-256 checksum does not "
                               "match its contents")
    return meta, arrays
