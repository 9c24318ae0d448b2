"""Test tools for h2ping and for projects that run it in their own tests.

- :class:`ScriptedUpstream`: a real HTTP/2 server whose behaviour a test scripts
  (GOAWAY, REFUSED_STREAM, held PING ACKs, silent or slow answers).
- :class:`IdleCutRelay`: a TCP relay that resets a flow after N seconds without
  application bytes, like AWS Global Accelerator (keepalive probes do not count).
- :class:`BlackholeRelay`: a relay that, once triggered, stops forwarding while
  keeping both sockets open: a peer that vanished without FIN or RST.

Both relays take ``throttle`` (bytes per second from upstream to client).

- :class:`DelayLink`: a relay that delays each direction by half a round trip (and
  caps its rate, if asked): a link tens of milliseconds long, on loopback.

- :class:`RawUpstream`: writes whatever frames a test scripts, valid or not, for
  protocol violations and floods that the ``h2`` library refuses to produce.
"""

from .link import DelayLink
from .raw import RawPeer, RawUpstream
from .relays import BlackholeRelay, IdleCutRelay, Relay
from .upstream import (
    Handler,
    ScriptedConnection,
    ScriptedRequest,
    ScriptedUpstream,
    StreamClosed,
    echo_handler,
)

__all__ = [
    "BlackholeRelay",
    "DelayLink",
    "Handler",
    "IdleCutRelay",
    "RawPeer",
    "RawUpstream",
    "Relay",
    "ScriptedConnection",
    "ScriptedRequest",
    "ScriptedUpstream",
    "StreamClosed",
    "echo_handler",
]
