"""What the queue looks like from outside: counts per state, throughput and stale leases
(``stats``), and the same numbers in the Prometheus text format (``metrics``)."""

from __future__ import annotations
