"""The HTTP/1.1 side: client connections (:mod:`.listener`) and the message rules
(:mod:`.messages`). It knows nothing of HTTP/2."""
