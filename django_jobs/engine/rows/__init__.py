"""Rows the engine writes for others to read: jobs admitted, events published, workers seen.

    admission.py  ``enqueue``: payload checks, idempotency, limits, then the job rows
    publish.py    event rows (``job.*``) and their batched writer; the live streams read them
    fleet.py      the worker rows: heartbeat, state, who is lost

Below the run and the durable steps, above ``observe``: nothing here runs a job.
"""
