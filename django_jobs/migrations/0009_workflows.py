"""Workflows: a job's parent, and the counters of its children (pending, and in all).

A child's end decrements its parent's ``children_pending`` in the transaction recording that
end; the partial index on ``parent`` holds children only, so top-level jobs cost it nothing.
"""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0008_schedule_name_per_owner"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="children_pending",
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="children_total",
            field=models.IntegerField(default=0, db_default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="children",
                to="django_jobs.job",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)),
                fields=["parent", "id"],
                name="django_jobs_parent_idx",
            ),
        ),
    ]
