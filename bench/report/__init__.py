"""What a run reports: its printed tables (tables), the goals it is judged against
(goals), the runs recorded in RESULTS.md (recorded) and the charts (charts)."""
