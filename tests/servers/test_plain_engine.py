"""The plain engine alone is a working proxy: cases of ``test_servers.py`` again,
in front of each independently written server, with the fast layer switched off
as it is when no fast path's probe passes (``fastpaths.enabled``): every
upstream connection then runs ``h2ping.http2.engine.plain``, h2 on its
documented API alone. The churn case takes nginx's and Node's graceful GOAWAYs
every 50 streams, with the streams at or below the last id finished."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from h2ping.http2.engine import H2Engine

from ..h2fake import only_fast_paths
from .test_servers import (  # noqa: F401 -- collected here again, on the plain engine
    origin,
    test_16_mib_each_way,
    test_churn_post_echo,
    test_get_and_post_echo,
    test_streamed_response_arrives_in_pieces,
)

pytestmark = pytest.mark.servers


@pytest.fixture(autouse=True)
def plain_engine_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No fast path taken; and each engine the test made is the plain one."""
    made: list[type] = []
    init = H2Engine.__init__

    def recording(self: H2Engine, *args: Any, **kwargs: Any) -> None:
        made.append(type(self))
        init(self, *args, **kwargs)

    monkeypatch.setattr(H2Engine, "__init__", recording)
    with only_fast_paths(set()):
        yield
    assert made, "no upstream connection was made"
    assert set(made) == {H2Engine}, made
