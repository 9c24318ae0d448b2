"""The engine's manifest: every name it uses beyond h2's and hpack's documented
API is listed, is there in the installed libraries, and turns its paths off when
it is gone."""

from __future__ import annotations

import ast
import logging

import h2.connection
import pytest

from h2ping.http2.engine import fastpaths, manifest
from h2ping.http2.engine.manifest import FAST_PATHS, MANIFEST, RESPONSE_HEADERS

from .test_layers import LIBRARY_PRIVATE, MODULES, SEAM


@pytest.fixture(autouse=True)
def check_afresh() -> None:
    fastpaths.forget()


def test_every_name_in_the_manifest_is_in_the_installed_libraries() -> None:
    assert [reach.qualname for reach in manifest.missing()] == []


def test_every_row_names_paths_that_exist_and_a_known_use() -> None:
    for reach in MANIFEST:
        assert reach.paths <= set(FAST_PATHS), reach
        assert reach.since.split()[0] in ("h2", "hpack"), reach
        assert manifest.resolve(reach.owner) is not None, reach
    assert len({reach.qualname for reach in MANIFEST}) == len(MANIFEST)


def private_names_used_by_the_engine() -> set[str]:
    """Every ``_name`` of the libraries' that the engine reads, writes, calls or overrides."""
    used: set[str] = set()
    for name, path in MODULES.items():
        if not name.startswith(SEAM):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                used |= {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
    return used & LIBRARY_PRIVATE


def test_the_manifest_lists_every_private_name_the_engine_uses() -> None:
    listed = {reach.name for reach in MANIFEST}
    assert private_names_used_by_the_engine() - listed == set()


def test_a_missing_name_turns_off_exactly_its_paths(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(h2.connection.H2Connection, "_terminate_connection")
    caplog.set_level(logging.WARNING, logger="h2ping")
    assert fastpaths.enabled() == set(FAST_PATHS) - {RESPONSE_HEADERS}
    (line,) = [r.getMessage() for r in caplog.records]
    assert "response_headers: h2.connection.H2Connection._terminate_connection is missing" in line


def test_lookup_of_a_gone_name_compares_equal_to_nothing() -> None:
    gone = manifest.lookup("h2.connection.ConnectionState.NO_SUCH_STATE")
    assert gone != h2.connection.ConnectionState.CLOSED and gone is not None
    assert manifest.lookup("h2.connection.ConnectionState.CLOSED") is (
        h2.connection.ConnectionState.CLOSED
    )


def test_the_command_says_whether_each_path_holds() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "h2ping.http2.engine"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()[:-1]] == list(FAST_PATHS)
    assert all(line.endswith(": taken") for line in done.stdout.splitlines()[:-1])
    assert done.stdout.splitlines()[-1].startswith("h2 ")
