from __future__ import annotations

from django.db import models


class Execution(models.Model):
    """One run of a test job, written by the job itself: lets tests count executions."""

    job_id = models.BigIntegerField(db_index=True)
    label = models.CharField(max_length=100, default="")
    pid = models.IntegerField(default=0)
    attempt = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.label} job={self.job_id} pid={self.pid}"


# --- the models that the documentation's examples use (tests/docs runs them) ------------------


class Video(models.Model):
    """A video, as README.md's example enqueues a job for it."""

    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    """A shop's order, as docs/getting-started.md and docs/jobs.md invoice and charge it."""

    total = models.DecimalField(max_digits=10, decimal_places=2, default=0)
    paid = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"order {self.pk}"
