"""The HTTP/2 side: one upstream connection (:mod:`.upstream`), opened by
:mod:`.dial` over h2ping's own TLS layer (:mod:`.tlslayer`); its state and its age
and idle clocks (:mod:`.lifetime`); its streams, their slots and its stream table
(:mod:`.streams`); what the peer says to the connection itself
(:mod:`.peerevents`); whoever watches its life, and what is counted and logged of
it (:mod:`.observer`); when inbound frames are handled (:mod:`.inbound`) and what
is written when (:mod:`.outbound`); its clocks (:mod:`.clocks`: PING liveness,
:mod:`.liveness`, :mod:`.pingbackoff`). Everything that touches h2, hpack and
hyperframe beyond their documented API is in :mod:`.engine`, the seam, whose
:class:`~.engine.H2Engine` the connection talks to. It knows nothing of HTTP/1.1."""
