from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0009_workflows"),
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
