"""Soak: minutes of mixed traffic through h2ping while faults are injected.

    python bench/soak.py                 # 10 minutes
    python bench/soak.py --minutes 1     # a quick check

The code is in bench/scenarios/soak/; bench/README.md says more.
"""

import sys

from scenarios.soak.run import main

if __name__ == "__main__":
    sys.exit(main())
