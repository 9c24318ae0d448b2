"""Where the two sides meet: one request end to end (:mod:`.exchange`), the choice
of upstream connection (:mod:`.pool`), request bodies kept for replay
(:mod:`.retry`) and the HTTP/1.1 to HTTP/2 header mapping (:mod:`.headers`)."""
