"""pytest fixtures for projects that put h2ping in front of a server in their tests.

Installing h2ping registers this module as a pytest plugin (entry point group
``pytest11``), so the fixtures need no import and no ``conftest.py``::

    from h2ping.testing import ScriptedUpstream

    async def test_through_h2ping(h2ping_proxy_factory):
        async with ScriptedUpstream() as upstream, h2ping_proxy_factory(upstream) as proxy:
            ...  # send HTTP/1.1 to proxy.url; proxy.stats says what happened

The fixture is synchronous and returns a factory of async context managers, so it
works with any asyncio test runner (pytest-asyncio, anyio on asyncio) and any
loop scope: each proxy lives exactly as long as its ``async with`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import pytest

from .process.proxy import Proxy


class _HasURL(Protocol):
    @property
    def url(self) -> str: ...


ProxyFactory = Callable[..., AbstractAsyncContextManager[Proxy]]


@contextlib.asynccontextmanager
async def running_proxy(upstream: str | _HasURL, **settings: Any) -> AsyncIterator[Proxy]:
    """Start a :class:`Proxy` to ``upstream`` (a URL, or anything with ``.url`` such as
    :class:`~h2ping.testing.ScriptedUpstream`) on a free loopback port; stop it on exit.

    ``settings`` are :class:`~h2ping.config.Config` fields (``ping_interval=0.3``,
    ``ca_file=...``) or ``ssl_context``. Unless given, ``listen`` is
    ``127.0.0.1:0`` and ``shutdown_grace`` is 0, so leaving the block never waits.
    """
    url = upstream if isinstance(upstream, str) else upstream.url
    settings.setdefault("listen", "127.0.0.1:0")
    settings.setdefault("shutdown_grace", 0.0)
    proxy = Proxy(upstream=url, **settings)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@pytest.fixture
def h2ping_proxy_factory() -> ProxyFactory:
    """``async with h2ping_proxy_factory(upstream, **settings) as proxy``: a running
    h2ping in front of ``upstream``; see :func:`running_proxy`."""
    return running_proxy
