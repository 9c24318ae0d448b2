"""What every part of the bench uses: child processes (procs) and the figures every
harness reports the same way (measure)."""
