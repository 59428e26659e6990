"""``celery.utils``: the parts a task module imports (``log.get_task_logger``)."""
