"""The Go sidecar, the bench's ``go`` peer: build (or find) it and print its path.

    python bench/gopeer.py

The code is in bench/peers/gopeer.py; bench/README.md says more.
"""

import sys

from peers.gopeer import main

if __name__ == "__main__":
    sys.exit(main())
