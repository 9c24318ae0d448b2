"""The HTTP/2 side: one upstream connection (:mod:`.upstream`), opened by
:mod:`.dial` over h2ping's own TLS layer (:mod:`.tlslayer`); its streams and
slots (:mod:`.streams`); when inbound frames are handled (:mod:`.inbound`) and
what is written when (:mod:`.outbound`); h2's connection with h2ping's two
changes (:mod:`.h2conn`); frame splitting (:mod:`.frames`); the field-caching
HPACK decoder (:mod:`.hpackcache`); PING liveness (:mod:`.liveness`); what h2's
errors are called (:mod:`.h2errors`). It knows nothing of HTTP/1.1."""
