"""The staging table of ``job.created`` rows enqueued inside the caller's transaction, and
the trigger that stores them when it commits (PostgreSQL only; why and how:
``django_jobs/store/staged_events.py``). The names and numbers are written out: a migration
keeps the text it was applied with. 3562623836858 is the events' write lock
(``store/event_rows.py``), ``django_jobs_events`` their NOTIFY channel."""

from django.db import migrations

CREATE = [
    "CREATE UNLOGGED TABLE django_jobs_stagedevent ("
    "job_id bigint PRIMARY KEY, tx xid8 NOT NULL DEFAULT pg_current_xact_id(), "
    "type varchar(32) NOT NULL, owner varchar(64) NULL, "
    "data text NOT NULL, created_at timestamptz NOT NULL)",
    "CREATE INDEX django_jobs_stagedevent_tx ON django_jobs_stagedevent (tx)",
    """CREATE FUNCTION django_jobs_store_staged_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Moved already, with the other rows of this transaction, by an earlier firing.
    PERFORM 1 FROM django_jobs_stagedevent WHERE job_id = NEW.job_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The ids are drawn under the events' write lock, and the commit follows. This
    -- transaction's rows are found by the index on tx (pg_current_xact_id() is the
    -- top-level transaction's, inside a savepoint too): the table's pages hold the dead
    -- rows of earlier transactions until it is vacuumed.
    PERFORM pg_advisory_xact_lock(3562623836858);
    WITH moved AS (
        DELETE FROM django_jobs_stagedevent WHERE tx = pg_current_xact_id()
        RETURNING type, job_id, owner, data, created_at
    )
    INSERT INTO django_jobs_jobeventrecord (type, job_id, owner, data, created_at)
    SELECT type, job_id, owner, data, created_at FROM moved ORDER BY job_id;
    PERFORM pg_notify('django_jobs_events', '');
    RETURN NULL;
END
$$""",
    "CREATE CONSTRAINT TRIGGER django_jobs_stagedevent_store "
    "AFTER INSERT ON django_jobs_stagedevent DEFERRABLE INITIALLY DEFERRED "
    "FOR EACH ROW EXECUTE FUNCTION django_jobs_store_staged_events()",
]

DROP = [
    "DROP TABLE IF EXISTS django_jobs_stagedevent",
    "DROP FUNCTION IF EXISTS django_jobs_store_staged_events()",
]


def run(statements):
    def operation(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for statement in statements:
                schema_editor.execute(statement, params=None)

    return operation


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0011_throttles"),
    ]

    operations = [migrations.RunPython(run(CREATE), run(DROP), elidable=False)]
