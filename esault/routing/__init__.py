"""Routing between SPUs: the interval table over key hashes (PAPER_NOTES section 3)."""

from esault.routing.interval_table import IntervalTable

__all__ = ["IntervalTable"]
