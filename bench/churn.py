"""GOAWAY churn under load: does any response get lost when the upstream ends a connection?

    python bench/churn.py [--runs 10] [--requests 3000] [--peers h2ping,h2ping-asyncio,go]

The code is in bench/scenarios/churn.py; bench/README.md says more.
"""

import sys

from scenarios.churn import main

if __name__ == "__main__":
    sys.exit(main())
