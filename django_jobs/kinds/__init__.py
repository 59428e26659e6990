"""Kinds: what ``@job`` declares, on a floor below the engine.

    registry.py   ``@job`` and the kinds by name (``lookup``, ``get``, ``all_handles``)
    handle.py     ``JobHandle``: a kind's definition, ``enqueue`` and ``handle(payload)``
    signature.py  ``handle.s(...)``: a job not yet enqueued, for ``chain`` and ``group``
    retry.py      ``Retry``: the pure policy, attempt and exception -> decision
    hooks.py      ``on_success`` / ``on_failure`` / ``on_retry``
    doors.py      the engine's admission and inline run, installed by ``JobsConfig.ready()``

Nothing here imports the engine: the engine imports these declarations and runs what they
declare.
"""
