"""h2ping's own command, which writes its live objects by type when sent SIGUSR1.

    python -m peers.counted OUT.json [--asyncio] -listen ... -upstream ...

Each SIGUSR1 writes ``OUT.json``: ``{"objects": N, "by_type": {name: count}}``,
every object the cyclic collector tracks that start-up did not make (the proxy
freezes those once serving: ``gc.get_objects()`` leaves them out), garbage that
waits for the collector included, since that costs memory too. The counting
runs in the proxy's main thread between two of its callbacks, and the file
appears whole (written aside, then renamed). ``--asyncio`` runs the proxy on
asyncio's own loop instead of uvloop. The rest of the arguments are h2ping's.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import signal
import sys
from types import FrameType


def count_objects() -> dict[str, int]:
    """Live objects the collector tracks, by type (``module.Qualname``)."""
    counts = collections.Counter(
        f"{type(obj).__module__}.{type(obj).__qualname__}" for obj in gc.get_objects()
    )
    return dict(counts)


def main() -> int:
    out = sys.argv.pop(1)
    if len(sys.argv) > 1 and sys.argv[1] == "--asyncio":
        sys.argv.pop(1)
        sys.modules["uvloop"] = None  # type: ignore[assignment]  # h2ping then uses asyncio's

    def write(signum: int, frame: FrameType | None) -> None:
        by_type = count_objects()
        doc = {"objects": sum(by_type.values()), "by_type": by_type}
        with open(out + ".part", "w") as f:
            json.dump(doc, f)
        os.replace(out + ".part", out)

    signal.signal(signal.SIGUSR1, write)
    from h2ping.process.cli import main as h2ping

    return h2ping(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
