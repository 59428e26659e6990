"""Schedule names are unique per owner; a schedule can say why it paused itself; stored JSON
is read through ``ReadableJSONDecoder``.

The decoder changes how values are read, not how they are stored: its ``AlterField``s touch
the migration state only (on SQLite a real ``AlterField`` would copy every job row).
"""

from __future__ import annotations

from django.conf import settings
from django.db import migrations, models

import django_jobs.validation

_JSON_FIELDS = [
    ("event", "data", {"null": True}),
    ("job", "captured", {"null": True}),
    ("job", "log", {"default": list}),
    ("job", "payload", {"null": True}),
    ("job", "progress", {"null": True}),
    ("job", "result", {"null": True}),
    ("jobstep", "value", {"null": True}),
    ("schedule", "payload", {"null": True}),
]


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0007_pruned_count"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="paused_reason",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model,
                    name=name,
                    field=models.JSONField(
                        blank=True, decoder=django_jobs.validation.ReadableJSONDecoder, **extra
                    ),
                )
                for model, name, extra in _JSON_FIELDS
            ]
        ),
        migrations.AlterField(
            model_name="schedule",
            name="name",
            field=models.CharField(max_length=200),
        ),
        migrations.AddConstraint(
            model_name="schedule",
            constraint=models.UniqueConstraint(
                fields=("owner", "name"), name="django_jobs_schedule_owner_name_uniq"
            ),
        ),
        migrations.AddConstraint(
            model_name="schedule",
            constraint=models.UniqueConstraint(
                condition=models.Q(("owner__isnull", True)),
                fields=("name",),
                name="django_jobs_schedule_name_uniq",
            ),
        ),
    ]
