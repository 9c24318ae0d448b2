"""A request's way through the modules (``tools/callpath.py``), read from the calls
of a real request through the proxy to the scripted upstream: it goes one way,
from the client's bytes to the upstream's socket and back, and never calls back
into a module it left; the stream table lives with its streams and tells the
connection nothing on a request's way."""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import sys
from types import ModuleType

TOOL = pathlib.Path(__file__).parents[2] / "tools" / "callpath.py"


def _callpath() -> ModuleType:
    spec = importlib.util.spec_from_file_location("callpath", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["callpath"] = module
    spec.loader.exec_module(module)
    return module


def test_a_request_never_returns_to_a_module_it_left() -> None:
    """Both ways, with a small body and with one that waits on the peer's windows
    and comes back in several turns: no call goes back into a module already on
    the stack below another module's frame."""
    for body in (16, 300_000):
        legs = asyncio.run(_callpath().trace(body)).legs
        assert set(legs) == {"there", "back"}
        assert legs["there"]["calls"] and legs["back"]["calls"]  # it was traced
        assert legs["there"]["returns"] == [], (body, legs["there"]["returns"])
        assert legs["back"]["returns"] == [], (body, legs["back"]["returns"])


def test_a_request_waiting_for_a_slot_is_handed_it_with_no_return() -> None:
    """Two requests at once on one upstream stream slot: the second waits, and the
    first's end frees the slot, which the pool hands over from the loop, not from
    within the stream table's call (the table is on the stack then)."""
    legs = asyncio.run(_callpath().trace(16, waiting=True)).legs
    edges = legs["there"]["edges"] | legs["back"]["edges"]
    assert ("forward/pool", "http2/streams") in edges  # a slot was handed over: traced
    assert legs["there"]["returns"] == [], legs["there"]["returns"]
    assert legs["back"]["returns"] == [], legs["back"]["returns"]


def test_a_request_goes_from_its_stream_to_the_connection_never() -> None:
    """Opening a stream on a slot, its response, its end and its slot coming free
    stay in streams.py (the slot, the stream and their table) and go on to the
    exchange and the pool: none of it calls back into upstream.py."""
    legs = asyncio.run(_callpath().trace(16)).legs
    assert set(legs) == {"there", "back"}
    assert "http2/streams" in legs["there"]["modules"] | legs["back"]["modules"]
    edges = legs["there"]["edges"] | legs["back"]["edges"]
    assert ("forward/exchange", "http2/streams") in edges  # it was traced
    assert ("http2/streams", "http2/upstream") not in edges, sorted(edges)
    returns = [way for leg in legs.values() for way in leg["returns"]]
    assert not [way for way in returns if "http2/streams > http2/upstream" in way], returns


def test_the_http1_side_hands_back_values_and_the_process_is_off_the_way() -> None:
    """The reader hands back what a read held and the listener acts on it; the
    response writer tells the listener whether the connection goes on, and turns
    the reading's switch at the reader: no call goes back into an HTTP/1.1
    module already on the stack. The listener makes its exchange with the
    forwarding side's factory: nothing of the process is on a request's way."""
    legs = asyncio.run(_callpath().trace(16)).legs
    edges = legs["there"]["edges"] | legs["back"]["edges"]
    assert ("http1/listener", "http1/reader") in edges  # it was traced
    assert ("http1/listener", "forward/exchange") in edges  # the listener acts itself
    assert ("http1/reader", "http1/listener") not in edges, sorted(edges)
    modules = legs["there"]["modules"] | legs["back"]["modules"]
    assert not [m for m in modules if m.startswith("process/")], sorted(modules)
    returns = [way for leg in legs.values() for way in leg["returns"]]
    assert not [way for way in returns if way.rsplit(" > ", 1)[1].startswith("http1/")], returns


def test_the_http2_side_makes_no_round_trip_on_a_requests_way() -> None:
    """Through the HTTP/2 side a request goes one way: nothing calls back into an
    ``http2/`` module it left. The inbound schedule gives the connection a budget
    and is told what was taken; a stream returns the credit its client took at
    once and the engine gives it back; a stream frames its own body and tells the
    writing what came of it; the pool is told a connection's state with its news;
    windows the peer opens amid a batch are pumped after it; a sink that sends on
    its stream hears that it may send again from the loop. With a body of a few
    hundred kilobytes too: the request body waits on the peer's windows, the
    response comes in several turns."""
    for body in (16, 300_000):
        legs = asyncio.run(_callpath().trace(body)).legs
        assert set(legs) == {"there", "back"}
        edges = legs["there"]["edges"] | legs["back"]["edges"]
        assert ("http2/upstream", "http2/inbound") in edges  # it was traced
        assert ("http2/engine", "http2/streams") in edges
        returns = [way for leg in legs.values() for way in leg["returns"]]
        assert not [way for way in returns if _through_http2(way)], (body, returns)


def _through_http2(way: str) -> bool:
    """Whether a return (``a > b > ... > module.function``) went back into a module
    through the HTTP/2 side: an ``http2/`` module called back into, or one between
    the module's frame on the stack and the call back into it."""
    *stack, last = way.split(" > ")
    module = last.rpartition(".")[0]
    if module.startswith("http2/"):
        return True
    left = len(stack) - 1 - stack[::-1].index(module)
    return any(m.startswith("http2/") for m in stack[left + 1 :])
