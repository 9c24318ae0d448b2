"""Charts of the goals table: one run's, and how its ratios moved across recorded runs.

    python bench/charts.py latest  [--results bench/RESULTS.md] [--out FILE.svg] [--png]
    python bench/charts.py history [--results bench/RESULTS.md] [--out FILE.svg] [--png] [--all]
    python bench/charts.py json bench/results/latest.json [--out FILE.svg] [--png]

The code is in bench/report/charts.py; bench/README.md says more.
"""

import sys

from report.charts import main

if __name__ == "__main__":
    sys.exit(main())
