"""Origins and load generators. Origins: nginx (origin), a scripted HTTP/2 origin for
the fault scenarios (fault_origin), a server-sent-event origin (sse_origin). Clients:
h2load and curl (generators), and processes of our own for what they cannot do
(h1client, inflight_client, sse_client)."""
