"""Protocol- and backend-neutral machinery: routing, waiting, groups, the command engine."""
