"""What the engine keeps of what the peer said, for a report (``H2Engine.heard``):
the settings as sent, the first bytes read, the fault."""

from __future__ import annotations

import pytest
from h2.settings import SettingCodes
from hyperframe.frame import SettingsFrame

from h2ping.http2.engine import ConnectionFault, H2Engine, new_engine


class Events:
    """The connection's side: only what these frames make the engine say."""

    def __init__(self) -> None:
        self.settings = 0

    def on_settings(self, max_concurrent_streams: int, initial_window_changed: bool) -> None:
        self.settings += 1


def engine() -> tuple[H2Engine, Events]:
    events = Events()
    h2 = new_engine(events, 65536)  # type: ignore[arg-type]
    h2.start(65535, 65535)
    return h2, events


def test_nothing_heard_before_the_first_bytes() -> None:
    h2, _ = engine()
    assert (h2.heard.opening, h2.heard.settings, h2.heard.fault) == (b"", None, None)


def test_settings_are_kept_as_sent_over_several_frames() -> None:
    h2, events = engine()
    first = SettingsFrame(0, settings={SettingCodes.MAX_CONCURRENT_STREAMS: 4}).serialize()
    h2.feed(first)
    h2.handle()
    assert h2.heard.settings == {SettingCodes.MAX_CONCURRENT_STREAMS: 4}
    assert h2.heard.opening == first
    h2.feed(SettingsFrame(0, settings={SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20}).serialize())
    h2.handle()
    assert h2.heard.settings == {
        SettingCodes.MAX_CONCURRENT_STREAMS: 4,
        SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20,
    }  # a setting never sent stays out, whatever its default
    assert h2.heard.opening == first
    assert events.settings == 2


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 400 Bad Request\r\n\r\n",  # a frame header of 4.7 MB
        b"\x00\x00\x02\x04\x00\x00\x00\x00\x00\x00\x01",  # SETTINGS of 2 bytes
    ],
)
def test_the_fault_that_ends_the_connection_is_kept(data: bytes) -> None:
    h2, _ = engine()
    h2.feed(data)
    with pytest.raises(ConnectionFault) as raised:
        h2.handle()
    assert h2.heard.fault == raised.value.detail
    assert h2.heard.opening == data


def test_the_plain_engine_keeps_a_capped_table_size_as_sent() -> None:
    """The plain engine lowers a large SETTINGS_HEADER_TABLE_SIZE before h2 reads
    it (its encoder's table stays small); the report still says what was sent."""
    from h2ping.http2.engine.fast import new_engine as engine_taking

    events = Events()
    h2 = engine_taking(events, 65536, fast=())  # type: ignore[arg-type]
    assert type(h2) is H2Engine
    h2.start(65535, 65535)
    sent = {SettingCodes.HEADER_TABLE_SIZE: 1 << 20, SettingCodes.MAX_CONCURRENT_STREAMS: 7}
    h2.feed(SettingsFrame(0, settings=sent).serialize())
    h2.handle()
    assert h2.heard.settings == sent
    assert events.settings == 1
