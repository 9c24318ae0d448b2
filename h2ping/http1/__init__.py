"""The HTTP/1.1 side: accepting clients (:mod:`.acceptor`), one connection each
(:mod:`.listener`), which reads requests (:mod:`.reader`) and writes responses
(:mod:`.output`), and the message rules (:mod:`.messages`). It knows nothing of
HTTP/2."""
