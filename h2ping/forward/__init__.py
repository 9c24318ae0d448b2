"""Where the two sides meet: one request end to end (:mod:`.exchange`), when it is
replayed (:mod:`.replay`), what it leaves in the counters and the access log
(:mod:`.accounting`), the choice of upstream connection (:mod:`.pool`), request
bodies kept for replay (:mod:`.retry`) and the HTTP/1.1 to HTTP/2 header mapping
(:mod:`.headers`)."""
