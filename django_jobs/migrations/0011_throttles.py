from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0010_schedule_every_expires"),
    ]

    operations = [
        migrations.CreateModel(
            name="Throttle",
            fields=[
                ("key", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("until", models.DateTimeField()),
            ],
        ),
    ]
