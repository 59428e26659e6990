"""The worker: ``manage.py runjobs``, one process or a supervisor and its children.

worker.py      ``Worker``: claim, execute, record, in one process; builds the services below
ledger.py      what the worker's services share: identity, settings, the jobs held
claiming.py    the claim loop, its target, the jobs handed back unstarted
executors.py   the executor threads, replaced when they die or hang
attempts.py    one job's attempt in its executor thread; hard time limits
recording.py   outcomes written in batches, live output flushed, events stored
keeper.py      the keeper thread: the recorder's batches, then its duties in turn
heartbeat.py   leases renewed, the worker's row, the count the supervisor keeps
listening.py   LISTEN/NOTIFY: wake-ups, cancels heard, paused queues read
retrying.py    store calls tried again while the database is away
supervisor.py  ``runjobs --processes N``: starts, watches and replaces the children
  slots.py, template_keeper.py, children.py, lost_attempts.py, fleet_row.py: its parts
child.py       the pipe between a child and its supervisor
template.py    a template process per generation, which forks the children
forking.py     the supervisor's side of the templates
interrupts.py  signals: stop, reload, stack dumps; held while a child starts
"""
