r"""The certificate file: one ``.npz`` (NumPy arrays, no pickles), the JSON header ``meta.json``
(``format``, ``version``, the domain's kind, the programs in the checker's op language, the
status) and named float64 / integer arrays (weights, domain, proof tree, ``claim``, ``argmax``,
read back bit for bit), with a SHA-256 checksum over both: against damage, no signature.
"""

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
    """SHA-256 of the header (without its ``checksum``, keys sorted) and of every array's
    name, dtype, shape and bytes (names sorted)."""
    digest = hashlib.sha256()
    head = {k: v for k, v in meta.items() if k != "checksum"}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        digest.update(f"\0{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def write(path, meta: dict, arrays: dict[str, np.ndarray]) -> Path:
    """Write a certificate (``meta`` gets ``format``, ``version`` and ``checksum``)."""
    path = Path(path)
    meta = {**meta, "format": FORMAT, "version": VERSION}
    meta["checksum"] = checksum(meta, arrays)
    payload = {_META: np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8)}
    with open(path, "wb") as fh:  # a file object: savez would append ".npz" to a bare name
        np.savez_compressed(fh, **payload, **arrays)
    return path


def read(path) -> tuple[dict, dict[str, np.ndarray]]:
    """``(meta, arrays)`` of a certificate; :class:`CertificateError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CertificateError(f"check: no certificate at {str(path)!r} (not a file)")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise CertificateError(f"check: {str(path)!r} is a bare NumPy array, not a "
                                       "certificate (.npz written by Verification.save)")
            arrays = {name: np.array(data[name]) for name in data.files}
    except CertificateError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise CertificateError(f"check: cannot read {str(path)!r} as a certificate (a zip of "
                               f"NumPy arrays written by Verification.save): it is truncated "
                               f"or of another kind ({type(exc).__name__}: {exc})") from exc
    if _META not in arrays:
        raise CertificateError(f"check: {str(path)!r} is a NumPy archive without {_META!r}: "
                               f"not a jaxcompress certificate (arrays: {sorted(arrays)[:5]})")
    try:
        meta = json.loads(arrays.pop(_META).tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CertificateError(f"check: {str(path)!r}: {_META} is not JSON ({exc})") from exc
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != FORMAT:
        raise CertificateError(f"check: {str(path)!r} is not a jaxcompress certificate "
                               f"(format {found!r}; expected {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise CertificateError(f"check: {str(path)!r} has certificate format version "
                               f"{meta.get('version')!r}; this checker reads version {VERSION}")
    if meta.get("checksum") != checksum(meta, arrays):
        raise CertificateError(f"check: {str(path)!r} is damaged: its SHA-256 checksum does not "
                               "match its contents")
    return meta, arrays
