"""The REST API of django_jobs (Django REST framework).

Mounted with ``path("api/jobs/", include("django_jobs.urls"))``.

``views`` holds the viewsets, ``permissions`` the deny-by-default rules, ``serializers`` the
request and response shapes (which the OpenAPI schema is built from), ``errors`` the JSON error
bodies, ``parsers`` the body-size limit.
"""

from __future__ import annotations
