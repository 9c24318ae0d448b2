"""A request's way through h2ping's modules, read from the calls it makes.

Runs a proxy in this process in front of the scripted HTTP/2 upstream (in a
child process, so that its calls are not counted), sends one request through it
on a connection already open (so no dial is counted), and records every call
into h2ping's own code while that request is read, sent upstream, answered and
written back to its client (``sys.setprofile``). The engine
(``h2ping/http2/engine/``) counts as one module: it is one door.

It prints, for the way there (the client's bytes until the request's frames are
written upstream) and the way back (the upstream's bytes until the response is
written to the client):

- modules: the modules of h2ping entered;
- crossings: calls from one module into another;
- returns: calls into a module that is already on the call stack below a
  frame of another module (A calls B, which calls back into A): the request
  went back to a module it had left, a round trip through the calls;
- edges: which module called which (``(caller, callee)``);
- calls: every call of a function of h2ping's (the engine's included), a
  count of the Python work the request costs that no timer's noise moves.

Each return is listed with the stack of modules that made it. With
``--waiting``, two clients send at once to a proxy allowed one stream upstream
(one connection, one stream on it): the second waits for the first's slot, and
the way back includes the slot coming free and handed to the one waiting.
Usage::

    python tools/callpath.py [--body BYTES] [--waiting]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import h2ping
from h2ping.process.proxy import Proxy

PACKAGE = pathlib.Path(h2ping.__file__).parent
SKIP = (PACKAGE / "testing",)

UPSTREAM = """
import asyncio, sys
from h2ping.testing import ScriptedUpstream
async def main():
    async with ScriptedUpstream() as up:
        print(up.url, flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


def module_of(code: types.CodeType) -> str | None:
    """h2ping's module of ``code`` (the engine's count as one), None for others."""
    path = pathlib.Path(code.co_filename)
    if not path.is_relative_to(PACKAGE) or any(path.is_relative_to(s) for s in SKIP):
        return None
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[:2] == ("http2", "engine"):
        return "http2/engine"
    return "/".join(parts)


class Recorder:
    """The calls of one leg of the way, as a stack of h2ping modules."""

    def __init__(self) -> None:
        self.legs: dict[str, dict[str, Any]] = {}
        self.leg = ""
        self._stack: list[tuple[types.FrameType, str | None]] = []

    def start(self, leg: str) -> None:
        self.leg = leg
        self.legs.setdefault(
            leg, {"modules": set(), "crossings": 0, "returns": [], "calls": 0, "edges": set()}
        )

    def __call__(self, frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call":
            module = module_of(frame.f_code)
            if module is not None and self.leg:
                self._count(module, frame)
            self._stack.append((frame, module))
        elif event == "return" and self._stack and self._stack[-1][0] is frame:
            self._stack.pop()  # (frames entered before the recording began are not there)

    def _count(self, module: str, frame: types.FrameType) -> None:
        leg = self.legs[self.leg]
        leg["calls"] += 1
        leg["modules"].add(module)
        ours = [m for _, m in self._stack if m is not None]
        if ours and ours[-1] != module:
            leg["crossings"] += 1
            leg["edges"].add((ours[-1], module))
            if module in ours:
                path = [ours[0]]
                for m in ours[1:]:
                    if m != path[-1]:
                        path.append(m)
                leg["returns"].append(" > ".join([*path, f"{module}.{frame.f_code.co_name}"]))


async def trace(body: int, waiting: bool = False) -> Recorder:
    """Trace one request (``waiting``: two at once, the second waiting for the
    first's stream slot) of a ``body``-byte POST on an open connection."""
    child = subprocess.Popen([sys.executable, "-c", UPSTREAM], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        one_slot = {"max_streams_per_conn": 1, "max_upstream_conns": 1} if waiting else {}
        proxy = Proxy(upstream=url, listen="127.0.0.1:0", ping_interval=0, **one_slot)
        await proxy.start()
        try:
            return await _requests(proxy, body, 2 if waiting else 1)
        finally:
            await proxy.stop(grace=0)
    finally:
        child.terminate()
        child.wait()


async def _requests(proxy: Proxy, body: int, clients: int) -> Recorder:
    """One request from each of ``clients`` client connections at once, traced."""
    payload = b"x" * body
    head = (f"POST /way HTTP/1.1\r\nHost: x\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
    connections = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(clients)]

    async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(head + payload)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(payload))

    for connection in connections:  # the connection upstream is dialled and open now
        await exchange(*connection)
    recorder = Recorder()
    _watch_legs(proxy, recorder)
    sys.setprofile(recorder)
    try:
        await asyncio.gather(*(exchange(*connection) for connection in connections))
    finally:
        sys.setprofile(None)
    for _, writer in connections:
        writer.close()
    return recorder


def _watch_legs(proxy: Proxy, recorder: Recorder) -> None:
    """Start the way there at the client's bytes and the way back at the upstream's."""
    import h2ping.http1.listener as listener
    import h2ping.http2.upstream as upstream

    def wrap(cls: type, name: str, leg: str) -> None:
        original: Callable[..., Any] = getattr(cls, name)

        def entered(self: object, *args: object) -> object:
            recorder.start(leg)
            return original(self, *args)

        setattr(cls, name, entered)

    wrap(listener.ClientConnection, "buffer_updated", "there")
    wrap(upstream.UpstreamConnection, "buffer_updated", "back")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--body", type=int, default=16, help="request body bytes (default 16)")
    parser.add_argument(
        "--waiting", action="store_true", help="a second request waits for the first's slot"
    )
    args = parser.parse_args()
    recorder = asyncio.run(trace(args.body, args.waiting))
    total_modules: set[str] = set()
    total_returns = 0
    for leg, seen in recorder.legs.items():
        total_modules |= seen["modules"]
        total_returns += len(seen["returns"])
        print(
            f"{leg}: {len(seen['modules'])} modules, {seen['crossings']} crossings, "
            f"{len(seen['returns'])} returns, {seen['calls']} calls"
        )
        print("  modules: " + " ".join(sorted(seen["modules"])))
        for way in seen["returns"]:
            print(f"  return: {way}")
    print(f"both ways: {len(total_modules)} modules, {total_returns} returns")


if __name__ == "__main__":
    main()
