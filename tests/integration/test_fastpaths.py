"""With any one of h2's or hpack's internals gone or changed, the proxy still forwards.

A release may rename a private attribute throughout its own code, and the library
keeps working; h2ping's fast paths, which use the old name, must then step aside.
``rename`` does that to the installed h2/hpack for one test: every function of
the given modules that mentions the name is compiled again with the new one.
Then real traffic goes through a running proxy (aiohttp client, TLS, hypercorn),
and the responses, the one warning line and ``/metrics`` are checked.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import textwrap
import types
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import h2.windows
import pytest

from h2ping.http2.engine import fastpaths, manifest, probes
from h2ping.http2.engine.manifest import FAST_PATHS
from h2ping.process.metrics import Snapshot
from h2ping.stats import Stats

from ..conftest import TLSFiles, running_proxy, scrape_metrics
from ..h2fake import forget_to_count_plain_data


@pytest.fixture(autouse=True)
def probe_afresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test probes anew, and the next test (libraries restored) too."""
    fastpaths.forget()
    yield
    fastpaths.forget()


def _rewrite(func: Any, owner: Any, pattern: re.Pattern[str], new: str) -> Any:
    """``func`` compiled again with the name replaced, or None if it does not use it."""
    home = owner.__name__ if isinstance(owner, types.ModuleType) else owner.__module__
    if not isinstance(func, types.FunctionType) or func.__module__ != home:
        return None
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None
    if not pattern.search(source):
        return None
    lines = source.splitlines()
    while lines[0].lstrip().startswith("@"):  # decorators are re-applied by the caller
        lines.pop(0)
    source = pattern.sub(new, "\n".join(lines))
    if isinstance(owner, type):  # no __class__ cell outside the class body
        source = source.replace("super()", f"super({owner.__name__}, self)")
    namespace: dict[str, Any] = {}
    module = importlib.import_module(func.__module__)
    exec(compile(source, module.__file__ or "", "exec"), module.__dict__, namespace)
    return namespace[pattern.sub(new, func.__name__)]


def rename(monkeypatch: pytest.MonkeyPatch, modules: tuple[str, ...], old: str) -> None:
    """Rename ``old`` to ``_moved`` + ``old`` throughout ``modules``, as a release might."""
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    new = "_moved" + old
    changed = 0
    for name in modules:
        module = importlib.import_module(name)
        owners: list[Any] = [module]
        owners += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]
        for owner in owners:
            for attr, value in list(vars(owner).items()):
                if isinstance(value, property):
                    parts = [_rewrite(f, owner, pattern, new) for f in (value.fget, value.fset)]
                    if not any(parts):
                        continue
                    replaced: Any = property(
                        parts[0] or value.fget, parts[1] or value.fset, value.fdel, value.__doc__
                    )
                elif isinstance(value, staticmethod | classmethod):
                    inner = _rewrite(value.__func__, owner, pattern, new)
                    if inner is None:
                        continue
                    replaced = type(value)(inner)
                else:
                    replaced = _rewrite(value, owner, pattern, new)
                    if replaced is None:
                        if attr != old:
                            continue
                        replaced = value  # a plain attribute of that name
                target = pattern.sub(new, attr)
                if target != attr:
                    monkeypatch.delattr(owner, attr)
                monkeypatch.setattr(owner, target, replaced, raising=False)
                changed += 1
    assert changed, f"{old} not found in {modules}"


def quarter_window_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    """h2 behaving differently: a WINDOW_UPDATE once a quarter of a window is
    processed, not half (a choice any release may make)."""

    def _maybe_update_window(self: h2.windows.WindowManager) -> int | None:
        if not self._bytes_processed:
            return None
        if self._bytes_processed < self.max_window_size // 4 and self.current_window_size:
            return None
        increment = min(self._bytes_processed, self.max_window_size - self.current_window_size)
        self.current_window_size += increment
        self._bytes_processed = 0
        return increment

    monkeypatch.setattr(h2.windows.WindowManager, "_maybe_update_window", _maybe_update_window)


#: The manifest's rows that a release could rename, each renamed in the modules it names.
RENAMABLE = [reach for reach in manifest.MANIFEST if reach.renamed_in]


async def forward_some(url: str, session: aiohttp.ClientSession) -> None:
    """GETs, and uploads echoed back in many DATA frames, on one connection."""
    for i in range(3):
        async with session.get(f"{url}/get/{i}", headers={"x-n": str(i)}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-seen-x-n"] == str(i)
            assert await resp.read() == b""
    body = bytes(range(256)) * 4096  # 1 MiB: responses of 64 DATA frames or more
    for _ in range(2):
        async with session.post(f"{url}/echo", data=body) as resp:
            assert resp.status == 200, await resp.text()
            assert await resp.read() == body


def warning_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "fast paths off" in r.getMessage()]


#: Forwards through a proxy and checks that exactly the given fast paths are off.
FallbackCheck = Callable[[set[str]], Awaitable[None]]


@pytest.fixture
def forwards_with_paths_off(
    caplog: pytest.LogCaptureFixture,
    tls: TLSFiles,
    hypercorn_echo: str,
    session: aiohttp.ClientSession,
) -> FallbackCheck:
    """:func:`check_fallback` on a proxy before hypercorn's echo, with the proxy's
    WARNINGs captured from the test's start (the warning line is checked)."""
    caplog.set_level(logging.WARNING, logger="h2ping")

    async def check(off: set[str]) -> None:
        await check_fallback(caplog, tls, hypercorn_echo, session, off)

    return check


@pytest.mark.parametrize("reach", RENAMABLE, ids=[reach.qualname for reach in RENAMABLE])
async def test_the_proxy_forwards_with_an_internal_renamed(
    monkeypatch: pytest.MonkeyPatch, forwards_with_paths_off: FallbackCheck, reach: manifest.Reach
) -> None:
    """Renamed, the name is missing: exactly the paths of its row are off."""
    rename(monkeypatch, reach.renamed_in, reach.name)
    assert manifest.missing() == [reach]
    await forwards_with_paths_off(set(reach.paths))


@pytest.mark.parametrize("reach", RENAMABLE, ids=[reach.qualname for reach in RENAMABLE])
def test_the_probes_alone_see_each_rename(
    monkeypatch: pytest.MonkeyPatch, reach: manifest.Reach
) -> None:
    """The probes do not rely on the manifest's check: with it blind, they still
    turn off at least one path of each renamed name's row (and no other)."""
    rename(monkeypatch, reach.renamed_in, reach.name)
    monkeypatch.setattr(manifest, "missing", lambda: [])
    off = set(fastpaths.check())
    assert off and off <= reach.paths


async def test_the_proxy_forwards_when_h2_updates_windows_otherwise(
    monkeypatch: pytest.MonkeyPatch, forwards_with_paths_off: FallbackCheck
) -> None:
    quarter_window_updates(monkeypatch)
    await forwards_with_paths_off({"data"})


async def test_the_proxy_forwards_with_every_fast_path_off(
    monkeypatch: pytest.MonkeyPatch, forwards_with_paths_off: FallbackCheck
) -> None:
    monkeypatch.setattr(fastpaths, "PROBES", dict.fromkeys(FAST_PATHS, lambda: "changed"))
    await forwards_with_paths_off(set(FAST_PATHS))


async def check_fallback(
    caplog: pytest.LogCaptureFixture,
    tls: TLSFiles,
    upstream: str,
    session: aiohttp.ClientSession,
    off: set[str],
) -> None:
    async with running_proxy(upstream, tls, admin_listen="127.0.0.1:0") as proxy:
        await forward_some(proxy.url, session)
        await forward_some(proxy.url, session)
        assert proxy.admin is not None
        metrics = await scrape_metrics(session, f"http://127.0.0.1:{proxy.admin.port}/metrics")
    (line,) = warning_lines(caplog)  # once, however many connections and requests
    for path in FAST_PATHS:
        assert metrics[("h2ping_fast_path", f"path={path}")] == (path not in off), path
    assert set(re.findall(r"(?:\(slower\): |; )([a-z_]+): ", line)) == off, line
    assert fastpaths.versions() in line
    assert proxy.stats.completed == 10 and proxy.stats.failed == 0


async def test_every_fast_path_is_taken_on_the_installed_libraries(
    caplog: pytest.LogCaptureFixture,
    tls: TLSFiles,
    hypercorn_echo: str,
    session: aiohttp.ClientSession,
) -> None:
    """The tested versions (both ends of the pinned range): no path off, no warning."""
    caplog.set_level(logging.WARNING, logger="h2ping")
    async with running_proxy(hypercorn_echo, tls, admin_listen="127.0.0.1:0") as proxy:
        await forward_some(proxy.url, session)
        assert proxy.admin is not None
        metrics = await scrape_metrics(session, f"http://127.0.0.1:{proxy.admin.port}/metrics")
    for path in FAST_PATHS:
        assert metrics[("h2ping_fast_path", f"path={path}")] == 1
    assert not warning_lines(caplog)


# ------------------------------------------------------------------ the probes alone


@pytest.mark.parametrize("path", FAST_PATHS)
def test_each_probe_passes_on_the_installed_libraries(path: str) -> None:
    assert fastpaths.PROBES[path]() is None


def test_probes_run_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    monkeypatch.setattr(fastpaths, "PROBES", {"data": lambda: runs.append(1)})
    assert fastpaths.enabled() == {"data"}
    assert fastpaths.enabled() == {"data"}
    assert fastpaths.states() == {"data": 1}
    assert runs == [1]


def test_a_probe_that_differs_or_raises_turns_its_path_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def raises() -> str | None:
        raise AttributeError("'H2Stream' object has no attribute '_x'")

    monkeypatch.setattr(
        fastpaths,
        "PROBES",
        {"receive": lambda: None, "data": lambda: "step 3: differs", "hpack": raises},
    )
    caplog.set_level(logging.WARNING, logger="h2ping")
    assert fastpaths.enabled() == {"receive"}
    assert fastpaths.states() == {"receive": 1, "data": 0, "hpack": 0}
    (line,) = warning_lines(caplog)
    assert "data: step 3: differs" in line
    assert "hpack: AttributeError: 'H2Stream' object has no attribute '_x'" in line
    assert "receive" not in line
    assert re.search(r"h2 \d+\.\d+\.\d+, hpack \d+\.\d+\.\d+, hyperframe \d+\.\d+\.\d+", line)


def test_the_data_probe_sees_a_miscounted_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast path that takes DATA but forgets to count it in the stream's window."""
    forget_to_count_plain_data(monkeypatch)
    assert "where plain h2 gives" in (probes.data() or "")


def test_the_stream_faults_probe_sees_a_fault_ending_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from h2ping.http2.engine.fastconnection import FastConnection

    monkeypatch.setattr(FastConnection, "_reset_faulty", lambda self, frame, event: [])
    assert "step 0" in (probes.stream_faults() or "")


def test_the_request_headers_probe_sees_a_request_method_left_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fast path that frames the request right but leaves the stream's method
    unset: a HEAD response's content-length would then be taken as a body promised."""
    from h2ping.http2.engine.fastconnection import FastConnection

    send = FastConnection._send_request_fast

    def forgetful(self: FastConnection, stream_id: int, headers: Any, end_stream: bool) -> bool:
        sent = send(self, stream_id, headers, end_stream)
        if sent:
            self.streams[stream_id].request_method = None
        return sent

    monkeypatch.setattr(FastConnection, "_send_request_fast", forgetful)
    assert "where plain h2 gives" in (probes.request_headers() or "")


def test_the_request_headers_probe_sees_the_path_not_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from h2ping.http2.engine.fastconnection import FastConnection

    monkeypatch.setattr(FastConnection, "_send_request_fast", lambda self, *args: False)
    assert probes.request_headers() == "the fast path was not taken"


def test_workers_report_the_least_of_each_path() -> None:
    def snapshot(paths: dict[str, int]) -> Snapshot:
        return Snapshot(Stats(), 0, {}, 0, None, paths)

    total = snapshot({"data": 1, "hpack": 1}) + snapshot({"data": 0, "hpack": 1}) + snapshot({})
    assert total.fast_paths == {"data": 0, "hpack": 1}
    assert Snapshot.from_json(total.to_json()).fast_paths == total.fast_paths
