"""The link scenario: h2ping and the Go binary across a long link, side by side.

    python bench/link.py [--rtts 30,80] [--rounds 3] [--peers go,h2ping]

The code is in bench/scenarios/link.py; bench/README.md says more.
"""

from scenarios.link import main

if __name__ == "__main__":
    main()
