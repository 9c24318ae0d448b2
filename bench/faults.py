"""Fault scenarios, h2ping and the Go sidecar side by side, in one command.

    python bench/faults.py [--quick] [--peers h2ping,go] [--out FILE] [--keep-tmp]

The code is in bench/scenarios/faults.py; bench/README.md says more.
"""

import sys

from scenarios.faults import main

if __name__ == "__main__":
    sys.exit(main())
