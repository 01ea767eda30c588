"""Benchmarks: each prints p50/p95 per stage as a table and JSON (make bench-*)."""
