"""The scale scenario: N long requests in flight at once.

    python bench/scale.py --n 18000 --peer go --peer h2ping
    python bench/scale.py --n 36000 --workers 2

The code is in bench/scenarios/scale.py; bench/README.md says more.
"""

from scenarios.scale import main

if __name__ == "__main__":
    main()
