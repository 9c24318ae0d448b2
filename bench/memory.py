"""Memory over a long run: RSS and live objects while nginx rotates connections
every 50 streams and clients come and go, beside the Go sidecar's.

    python bench/memory.py                  # 140,000 requests, 200,000 clients per peer
    python bench/memory.py --quick          # 30,000 of each

The code is in bench/scenarios/memory.py; bench/README.md says more.
"""

import sys

from scenarios.memory import main

if __name__ == "__main__":
    sys.exit(main())
