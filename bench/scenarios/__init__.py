"""The scenarios, one module per command in bench/: run (the peers compared in one run,
its scenarios in suite and streaming), faults, churn, link, scale and soak."""
