"""The seam: the only code that reaches past the documented API of h2, hpack and
hyperframe. This package's own names are its one door, and no module outside
``h2ping.http2`` imports one of the modules below it (the layering test holds it):

- :func:`new_engine`: one upstream connection's h2 (an :class:`H2Engine`), bytes
  in, calls out (:class:`PeerEvents`, each stream's :class:`StreamEvents`), and
  sends; what the peer said that only a report wants, in :attr:`H2Engine.heard`
  (:class:`Heard`);
- :func:`fast_paths_taken` and :func:`fast_path_states`: which fast paths this
  process takes, their probes run on the first call;
- :class:`FrameSplitter` and what it hands out (:data:`GOAWAY` pieces, the
  :class:`FloodError` and :class:`FrameSizeError` it raises): GOAWAY frames
  taken out of the inbound bytes before h2 sees them, and what each frame costs
  charged to a flood budget (:mod:`.floodguard`), for the scripted test server
  too, which drives h2 as a server;
- :func:`not_http2` (:mod:`.opening`): the words for a peer whose first bytes
  are no HTTP/2 (HTTP/1.x, TLS, text), which its faults then say.

Inside, two layers. The plain engine (:mod:`.plain`, with :mod:`.frames`,
:mod:`.floodguard`, :mod:`.peerrules`, :mod:`.errortext` and :mod:`.opening`)
uses h2's, hpack's and hyperframe's documented API only: read it first. The
fast layer (:mod:`.fast` and the modules only it imports: :mod:`.fastconnection`,
:mod:`.fastpaths`, :mod:`.probes`, :mod:`.manifest`, :mod:`.hpackdecode`,
:mod:`.hpackencode`) is a subclass of the plain engine taking fast paths where
their probes passed, and is the only code that touches h2's and hpack's private
names. The one marked line below chooses the layer; the plain engine imports
nothing of the fast one, so the fast layer's modules can be deleted with that
line made to choose :mod:`.plain`, and the proxy still works.
"""

from . import fast as layer  # the fast layer; `from . import plain as layer`: plain h2 alone
from .floodguard import FloodError
from .frames import GOAWAY, FrameSizeError, FrameSplitter, Goaway
from .opening import TEXT_ANSWER, not_http2
from .plain import ConnectionFault, H2Engine, Heard, PeerEvents, StreamEvents

new_engine = layer.new_engine
fast_paths_taken = layer.fast_paths_taken
fast_path_states = layer.fast_path_states

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
    "new_engine",
    "not_http2",
]
