"""Interval schedules and expiring jobs.

``Schedule.every`` (an interval schedule, ``cron`` then blank) and the enqueue options a
schedule applies to each fired job (``queue``, ``priority``, ``expires``); ``Job.expires_at``
with a partial index holding only the queued jobs that carry one.
"""

from __future__ import annotations

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0009_workflows"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="every",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="expires",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="priority",
            field=models.SmallIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="queue",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="cron",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("expires_at__isnull", False), ("state", "queued")),
                fields=["expires_at"],
                name="django_jobs_expiry_idx",
            ),
        ),
    ]
