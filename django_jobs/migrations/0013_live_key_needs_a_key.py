"""The idempotency index holds only the live jobs that carry a key (why: the constraint's
comment in ``django_jobs/models.py``). On PostgreSQL the index is dropped and built again,
which reads the whole job table once with writes to it blocked: on a large table, run this
migration when the workers are stopped."""

import django.db.models.functions.comparison
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0012_staged_events"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="job",
            name="django_jobs_live_key_uniq",
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                models.F("kind"),
                django.db.models.functions.comparison.Coalesce(models.F("owner"), models.Value(0)),
                models.F("idempotency_key"),
                condition=models.Q(
                    ("idempotency_key__isnull", False),
                    ("state__in", ("queued", "running", "waiting", "blocked", "unknown")),
                ),
                name="django_jobs_live_key_uniq",
            ),
        ),
    ]
