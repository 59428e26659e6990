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
