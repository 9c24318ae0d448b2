"""Soak: minutes of mixed traffic through h2ping while faults are injected.

    python bench/soak.py                 # 10 minutes
    python bench/soak.py --minutes 1     # a quick check
    python bench/soak.py --minutes 30 --clients 500 --tls --seed 7

Everything runs in one process, on one event loop (uvloop unless ``--loop asyncio``)::

    aiohttp --HTTP/1.1--> h2ping --h2c/TLS--> IdleCutRelay --> BlackholeRelay --> ScriptedUpstream
    --clients workers     ping 1 s,           resets a flow    can silence one    counts every
    (one request each     timeout 2 s,        after 3 s        flow: a vanished   x-request-id
    at a time)            max-conn-age 20 s   without bytes    peer

Traffic. Each worker loops: small echo POSTs, 256 KiB-1 MiB uploads (checked by
SHA-256), 1-4 MiB downloads, streamed (chunked) responses, long-silent requests
(4-8 s without a byte on the wire, past the relay's 3 s idle cut, so only PINGs
keep them alive), and client aborts (mid-response and mid-upload).

Faults, from the first seconds to the end:

- idle cuts: the relay resets any flow 3 s without application bytes (PINGs
  every 1 s of silence must keep every flow h2ping holds alive);
- GOAWAY churn: every 2-6 s a random server connection sends GOAWAY with a
  ``last_stream_id`` no lower than any stream it has processed (a third of them
  two-step: 2^31-1 first, the real id 0.5 s later);
- refused streams: 1 % of requests get REFUSED_STREAM on arrival;
- abrupt closes: every 15-35 s a random server connection is dropped (TCP reset);
- a vanished peer: every 30-60 s one flow is silenced in the BlackholeRelay, both
  sockets left open; it is reset 5 s later, after h2ping has declared it dead;
- max-conn-age rotation: h2ping retires each connection after 18-20 s.

What it prints: requests sent, succeeded, aborted by the client (deliberate),
replayed, failed (grouped by cause: the ``Proxy-Status`` of a 502, or h2ping's
own log line for a response cut after its headers), hung, processed twice and
corrupted, the faults injected, and open fds, sockets, asyncio tasks and RSS at
the start and the end.

"Processed" means the upstream handler reached the point of responding; a stream
refused with REFUSED_STREAM, or above the GOAWAY ``last_stream_id`` of its
connection when the handler got there, was not processed. Some failures are the
expected price of a fault (a request in flight on a connection that is reset or
vanishes gets a 502, or a truncated response once its headers went out); the
invariants are what must always hold. Exit status 1 if any fails:

- hung == 0 (no request without an answer or a cut within 60 s);
- processed twice == 0, corrupted == 0 (every 200 carries exactly its body);
- no live flow was cut by the idle relay (a flow is live while h2ping still
  holds its connection; cuts of flows it had left are counted apart);
- no exception from h2ping reached the event loop's exception handler, and no
  ERROR was logged (crashes of the scripted upstream, a test tool, are listed
  apart: they fail the requests on the connection they drop, but are not h2ping's);
- once traffic stops: no exchange, client connection, stream or kept body is
  left in h2ping and no stream in the upstream; after the pooled connections are
  retired, open fds, sockets and asyncio tasks equal the start's;
- RSS at the end within 64 MiB (or 25 %) of RSS after the warm-up minute.

The parts: settings (the figures above), upstream (the scripted upstream's handler),
faults, client (the workers, and what is logged), checks (the invariants and the
report) and run (all of it on one loop; ``main``).
"""
