"""Django's Tasks framework with its database backend (``django_tasks_db``), as documented:
``task.enqueue()`` and ``manage.py db_worker``, on a database of its own.

``python tasks_db_loops.py FIGURE --url URL [--jobs N]``, FIGURE one of ``enqueue`` (one
``enqueue()`` per transaction, in autocommit) and ``drain`` (jobs enqueued, then
``db_worker --batch`` -- one process, one task at a time, it has no concurrency option --
until the queue is empty: jobs / the worker's run).
"""

from __future__ import annotations

import os
import time

from common import emit, parser, rate


def main() -> None:
    args = parser(__doc__.split("\n")[0]).parse_args()
    os.environ["TASKS_DB_URL"] = args.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tasks_db_settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django_tasks_db.models import DBTaskResult
    from tasks_db_jobs import noop

    call_command("migrate", verbosity=0)
    table = DBTaskResult._meta.db_table

    def reset() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {table}")
            cursor.execute(f"VACUUM ANALYZE {table}")

    reset()
    n = args.jobs

    def enqueue() -> None:
        for i in range(n):
            noop.enqueue(n=i)

    if args.figure == "enqueue":
        emit({"tasks-db: enqueue": rate(n, enqueue)})
    elif args.figure == "drain":
        enqueue()
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {table}")
        started = time.perf_counter()
        call_command("db_worker", batch=True, interval=0, startup_delay=False, verbosity=0)
        figure = n / (time.perf_counter() - started)
        done = DBTaskResult.objects.filter(status="SUCCESSFUL").count()
        if done != n:
            raise SystemExit(f"db_worker ran {done} tasks of {n}.")
        emit({"tasks-db: drain c=1": figure})
    else:
        raise SystemExit(f"Unknown figure {args.figure!r}.")
    reset()


if __name__ == "__main__":
    main()
