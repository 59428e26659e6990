"""Benchmarks of the PostgreSQL hot path: enqueue, drain and pickup latency.

Run ``python -m bench`` (or ``python bench/run.py``) from the repository root; see
``docs/performance.md``.
"""

from __future__ import annotations
