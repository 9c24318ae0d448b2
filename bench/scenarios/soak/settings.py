"""The soak's settings: the proxy's timers, the faults' rates, when a request
counts as hung, and the mix of traffic."""

import random

PING_INTERVAL = 1.0
PING_TIMEOUT = 2.0
IDLE_CUT = 3.0
MAX_CONN_AGE = 20.0
MAX_STREAMS = 100
REFUSE_RATE = 0.01
#: A request with neither an answer nor a cut after this long is hung.
HANG_AFTER = 60.0
#: The longest silence a "silent" request keeps on the wire, well past IDLE_CUT.
SILENT_DELAY = (4.0, 8.0)
RSS_TOLERANCE_MIB = 64.0
BLOB = random.Random(0).randbytes(4 * 1024 * 1024)  # download and upload payloads

#: Request kinds and how often each is chosen.
KINDS = {
    "small": 40,
    "upload": 8,
    "download": 8,
    "stream": 12,
    "silent": 12,
    "abort": 10,
    "abort_upload": 4,
}
