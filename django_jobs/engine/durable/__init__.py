"""Durable execution: what a job keeps across its attempts.

    steps.py        ``ctx.step.run/atomic/sleep/wait_for_event``: run once, replay by name
    workflows.py    ``ctx.step.spawn`` / ``gather``: children and the parent that waits
    emit.py         ``emit(event)``: the jobs an event starts and the waits it ends
    step_writer.py  step rows written in batches beside the runs
    suspend.py      ``Suspend``: a step that gives its slot back (sleep, wait, gather)

It never imports the worker, the run or maintenance: ``steps`` sees its job's context through
the ``StepHost`` protocol, which ``engine.run.context`` fulfils.
"""
