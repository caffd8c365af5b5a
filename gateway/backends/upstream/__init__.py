"""Upstream backends (``type = "upstream"``): a real server of one of the five protocols as the
gateway's storage, spoken to through that protocol's codec in its client role."""
