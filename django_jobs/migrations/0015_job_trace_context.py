"""The trace context a job was enqueued under (docs/observability.md): one nullable column,
added without a default, so PostgreSQL does not rewrite the table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0014_worker_queuepause"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
