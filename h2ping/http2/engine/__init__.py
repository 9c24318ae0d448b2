"""The seam: the only code that reaches past the documented API of h2, hpack and
hyperframe. This package's own names are its one door, and no module outside
``h2ping.http2`` imports one of the modules below it (the layering test holds it):

- :class:`H2Engine` (:mod:`.facade`): one upstream connection's h2, bytes in,
  calls out (:class:`PeerEvents`, :class:`StreamEvents`), and sends; what the
  peer said that only a report wants, in :attr:`H2Engine.heard` (:class:`Heard`);
- :func:`fast_paths_taken` and :func:`fast_path_states` (:mod:`.fastpaths`):
  which of its fast paths this process takes, their probes run on the first call;
- :class:`FrameSplitter` and what it hands out (:data:`GOAWAY` pieces, the
  :class:`FloodError` and :class:`FrameSizeError` it raises): GOAWAY frames
  taken out of the inbound bytes before h2 sees them, and what each frame costs
  charged to a flood budget (:mod:`.floodguard`), for the scripted test server
  too, which drives h2 as a server;
- :func:`not_http2` (:mod:`.opening`): the words for a peer whose first bytes
  are no HTTP/2 (HTTP/1.x, TLS, text), which its faults then say.

Inside, :mod:`.manifest` lists every name used beyond the libraries' API,
:mod:`.probes` tries each fast path against plain h2, and :mod:`.frames` cuts
the inbound bytes at frame boundaries."""

from .facade import ConnectionFault, H2Engine, Heard, PeerEvents, StreamEvents
from .fastpaths import enabled as fast_paths_taken
from .fastpaths import states as fast_path_states
from .floodguard import FloodError
from .frames import GOAWAY, FrameSizeError, FrameSplitter, Goaway
from .opening import TEXT_ANSWER, not_http2

__all__ = [
    "GOAWAY",
    "TEXT_ANSWER",
    "ConnectionFault",
    "FloodError",
    "FrameSizeError",
    "FrameSplitter",
    "Goaway",
    "H2Engine",
    "Heard",
    "PeerEvents",
    "StreamEvents",
    "fast_path_states",
    "fast_paths_taken",
    "not_http2",
]
