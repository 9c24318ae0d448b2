"""The seam: the only code that reaches past the documented API of h2, hpack and
hyperframe. :class:`H2Engine` is its one door (bytes in, calls out, and sends);
:mod:`.manifest` lists every name it uses beyond that API; :mod:`.fastpaths`
says which of its fast paths this process takes; :mod:`.frames` cuts the
inbound bytes at frame boundaries, before h2 sees them."""

from .facade import ConnectionFault, H2Engine, PeerEvents, StreamEvents, our_settings
from .frames import Goaway

__all__ = ["ConnectionFault", "Goaway", "H2Engine", "PeerEvents", "StreamEvents", "our_settings"]
