"""Benchmark h2ping against its peers in one run.

    python bench/run.py [--quick] [--scenarios small_50,latency_1] [--out FILE] [--png]

The code is in bench/scenarios/run.py; bench/README.md says more.
"""

import sys

from scenarios.run import main

if __name__ == "__main__":
    sys.exit(main())
