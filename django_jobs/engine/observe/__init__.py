"""What the engine tells about itself, on the floor below everything else in it.

records.py    the running job's fields on every log record made in its thread
running.py    which job this thread runs now (log fields, traces, ``ctx``)
tracing.py    OpenTelemetry spans on the engine's seams; a no-op without a provider
spans.py      each seam's span: send, process, step, and the context stored on a row
providers.py  the OpenTelemetry API, imported once; the tracer and meter of the provider
"""
