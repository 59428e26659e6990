"""The engine: admit jobs, claim them, run them (steps, workflows), record and publish what
happened. docs/architecture.md follows a job through these modules."""

from __future__ import annotations
