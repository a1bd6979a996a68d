"""The fingerprint of the code that makes a result, and the key of a run folder.

A verdict is evidence only for the code that produced it. Every run is therefore keyed by

- the config hash (:func:`~ntklab.experiments.config_hash`: experiment, scale, config), and
- the code fingerprint (:func:`code_fingerprint`): a SHA-256 over the content of every
  Python source file of the installed ``ntklab`` package (paths relative to the package, in
  sorted order), together with the versions of torch and numpy.

Any edit to ntklab's source, or another torch or numpy, gives another run key and so another
run folder: a stored result made by other code is never reused silently (the runner
recomputes and keeps the old folder; ``ntklab run --reuse-any`` may opt in to the old one,
and the result is then labelled as made by other code).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

__all__ = ["CodeFingerprint", "code_fingerprint", "run_key"]

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True)
class CodeFingerprint:
    """What a result was computed with.

    Attributes
    ----------
    source : str
        First 16 hex digits of the SHA-256 over the package's ``*.py`` files.
    torch, numpy : str
        The installed versions.
    files : int
        How many source files were hashed.
    """

    source: str
    torch: str
    numpy: str
    files: int

    @property
    def digest(self) -> str:
        """One 16-hex-digit string for the source and the versions together."""
        text = f"{self.source}|torch={self.torch}|numpy={self.numpy}"
        return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form, as written to ``result.json``."""
        return {
            "digest": self.digest,
            "source": self.source,
            "torch": self.torch,
            "numpy": self.numpy,
            "files": str(self.files),
        }


def source_digest(root: Path) -> tuple[str, int]:
    """SHA-256 (16 hex digits) over ``root``'s ``*.py`` files and their relative paths."""
    sha = hashlib.sha256()
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    for path in files:
        sha.update(path.relative_to(root).as_posix().encode("utf-8"))
        sha.update(b"\0")
        sha.update(path.read_bytes())
        sha.update(b"\0")
    return sha.hexdigest()[:16], len(files)


@cache
def code_fingerprint() -> CodeFingerprint:
    """The fingerprint of the ntklab package this process imported (computed once).

    Examples
    --------
    >>> fp = code_fingerprint()
    >>> len(fp.digest), fp.files > 10
    (16, True)
    """
    source, files = source_digest(_PACKAGE_ROOT)
    return CodeFingerprint(source, _dist_version("torch"), _dist_version("numpy"), files)


def run_key(config_digest: str, fingerprint: CodeFingerprint | None = None) -> str:
    """The 12-hex-digit key of a run folder: the config hash and the code fingerprint."""
    fp = code_fingerprint() if fingerprint is None else fingerprint
    text = f"{config_digest}|{fp.digest}"
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:12]
