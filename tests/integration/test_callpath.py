"""A request's way through the modules (``tools/callpath.py``), read from the calls
of a real request through the proxy to the scripted upstream: the stream table
lives with its streams and tells the connection nothing on a request's way."""

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
