"""Running one job: from a claimed row to its outcome.

runner.py     one due job in the calling thread (testing, ``jobs drain``, the worker)
executor.py   one job as named stages: start, run, classify, record -> ``Outcome``
calling.py    the runner called within its soft and hard time limits, plain or ``async def``
outcome.py    what an attempt came to as an ``Outcome``; the error text stored with it
context.py    ``ctx``: payload, progress, live state, steps
inline.py     ``handle(payload)``: the function called now, with an inline ``ctx``
limits.py     concurrency caps per tenant, queue and kind at claim time
loops.py      the event loop and connections of the executor threads
deadlines.py  soft and hard time limits: ``JobTimeout`` raised in the runner's thread
"""
