"""The OpenAPI schema: ``GET schema/`` and the hooks that say what the views do beyond what
drf-spectacular reads from them.

``SchemaView`` builds the schema of this API only (``JobsSchemaGenerator``), once per process
and language; its ``POSTPROCESSING_HOOKS`` are the functions below, named by dotted path.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404
from django.utils import translation
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from ... import __version__
from ...attempt_history import ATTEMPT_KEYS, MEMBER_ATTEMPT_KEYS
from ...engine.schedules.cron import zone_names
from ...serialize import JOB_FIELDS, OPERATORS_ONLY
from ..errors import NotFoundError, exception_handler
from ..openapi import extend_schema, schema_language


class JobsSchemaGenerator(SchemaGenerator):
    """The schema of this API only, whatever else the project's URLconf serves."""

    def _initialise_endpoints(self) -> None:
        super()._initialise_endpoints()

        def ours(endpoint: Any) -> bool:
            # drf-spectacular's endpoints are (path, regex, method, view); the stubs type DRF's.
            view = getattr(endpoint[3], "cls", None)
            return (
                getattr(view, "__module__", "").startswith("django_jobs.")
                and view is not SchemaView
            )

        self.endpoints = [endpoint for endpoint in self.endpoints or () if ours(endpoint)]


#: The request bodies the API reads; each refuses fields it does not name (KnownFieldsOnly).
CLOSED_REQUEST_BODIES = (
    "CancelRequest",
    "SubmitRequest",
    "RetryRequest",
    "ScheduleRequest",
    "PatchedScheduleRequest",
    "PauseRequest",
    "ResumeRequest",
)


#: The operations whose body is required: JSON even when empty (``{}``), as every write.
REQUIRED_BODIES = (
    "jobs_cancel",
    "jobs_retry",
    "schedules_update",
    "queues_pause",
    "queues_resume",
)
ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
#: A body without fields (cancel's): ``{}``.
NO_FIELDS = {
    "application/json": {
        "schema": {"type": "object", "additionalProperties": False, "description": "Send {}."}
    }
}
#: The answers every operation may give, whatever it does.
EVERY_OPERATION = {
    "405": {
        "description": "The path does not serve this method (the Allow header names those "
        "it does), whatever the body.",
        "content": ERROR_CONTENT,
    },
    "429": {
        "description": "Throttled: a member's submits, retries and schedule creations past "
        'JOBS["MEMBER_RATE"], or refused credentials from this address past '
        'JOBS["AUTH_FAILURE_RATE"] (then every request carrying credentials). Send it again '
        "after Retry-After seconds.",
        "headers": {
            "Retry-After": {
                "schema": {"type": "integer", "minimum": 1},
                "description": "Whole seconds to wait.",
            }
        },
        "content": ERROR_CONTENT,
    },
}


def every_operations_refusals(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what every view does: 405 for a method a path does not serve, 429
    past a throttle (refused credentials apply to every operation); and that cancel, retry
    and PATCH read a required JSON body."""
    for path in result.get("paths", {}).values():
        for operation in path.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for code, answer in EVERY_OPERATION.items():
                operation["responses"].setdefault(code, answer)
            operation["responses"]["429"].setdefault("headers", EVERY_OPERATION["429"]["headers"])
            if operation.get("operationId") not in REQUIRED_BODIES:
                continue
            body = operation.setdefault("requestBody", {"content": NO_FIELDS})
            body["required"] = True
    return result


def closed_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what the serializers do: an unknown body field is a 400."""
    schemas = result.get("components", {}).get("schemas", {})
    for name in CLOSED_REQUEST_BODIES:
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    return result


def described_refusals(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what the serializers refuse beyond the fields' types: a schedule's
    ``tz`` is one of the zone names ``engine.schedules.cron`` knows (``"0"`` is a 400), and a submit
    sends ``run_at`` or ``delay``, not both."""
    schemas = result.get("components", {}).get("schemas", {})
    zones = sorted(zone_names())
    for name in ("ScheduleRequest", "PatchedScheduleRequest"):
        tz = schemas.get(name, {}).get("properties", {}).get("tz")
        if tz is not None:
            tz["enum"] = zones
    if "SubmitRequest" in schemas:
        schemas["SubmitRequest"]["not"] = {"required": ["run_at", "delay"]}
    return result


def operators_only_fields(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say in the schema what the member's view does: a job's operators-only keys
    (``serialize.OPERATORS_ONLY``, e.g. ``worker``) are not required, since members never get
    them (drf-spectacular lists every read-only field as required in an answer)."""
    job_keys = {field.name for field in JOB_FIELDS}
    attempt_only = set(ATTEMPT_KEYS) - set(MEMBER_ATTEMPT_KEYS)
    for schema in result.get("components", {}).get("schemas", {}).values():
        if "required" not in schema:
            continue
        properties = set(schema.get("properties", {}))
        if job_keys <= properties:
            schema["required"] = [n for n in schema["required"] if n not in OPERATORS_ONLY]
        elif properties == set(ATTEMPT_KEYS):
            # An attempt of the history: members get neither worker, pid nor traceback.
            schema["required"] = [n for n in schema["required"] if n not in attempt_only]
    return result


class SchemaView(SpectacularAPIView):
    """``GET schema/``: OpenAPI 3 for anyone. YAML by default; ``?format=json`` for JSON.

    The schema is built once per process and language (building it takes a good part of a
    second): ``built`` holds it until a setting changes. The languages are those of
    ``settings.LANGUAGES`` only (``openapi.schema_language``): ``?lang=`` names one, anything
    else is the default language. Refusals are the API's JSON errors
    (``?format=xml`` is a 404 saying which formats there are).
    """

    generator_class = JobsSchemaGenerator
    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    custom_settings: dict[str, Any] = {
        "TITLE": "django_jobs API",
        "DESCRIPTION": (
            "Durable background jobs: submit, inspect, cancel and retry jobs; list kinds; "
            "queue statistics; cron schedules. Errors are JSON {code, message[, errors]}."
        ),
        "VERSION": __version__,
        "COMPONENT_SPLIT_REQUEST": True,
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "django_jobs.api.views.schema.closed_request_bodies",
            "django_jobs.api.views.schema.operators_only_fields",
            "django_jobs.api.views.schema.described_refusals",
            "django_jobs.api.views.schema.every_operations_refusals",
        ],
    }

    #: The built schema, by language (``clear_built_schemas`` empties it).
    built: ClassVar[dict[str, dict[str, Any]]] = {}

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # Not drf-spectacular's ``get``: it activates any ``?lang=`` it is sent.
        language = schema_language(request.query_params.get("lang"))
        with patched_settings(self.custom_settings), translation.override(language):
            return self._get_schema_response(request)

    def _get_schema_response(self, request: Request) -> Response:
        language = translation.get_language() or ""
        schema = self.built.get(language)
        if schema is None:
            generator = self.generator_class(urlconf=self.urlconf, patterns=self.patterns)
            schema = generator.get_schema(request=None, public=self.serve_public)
            self.built[language] = schema
        suffix = self.perform_content_negotiation(request, force=True)[0].format
        return Response(
            data=schema,
            headers={"Content-Disposition": f'inline; filename="django_jobs API.{suffix}"'},
        )

    def get_exception_handler(self) -> Any:
        return exception_handler

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, Http404) and self.request.query_params.get("format"):
            exc = NotFoundError(
                "The schema comes as YAML (the default, or ?format=yaml) or JSON (?format=json)."
            )
        response = super().handle_exception(exc)
        # An error is JSON, whatever format the schema was asked in.
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return response


@receiver(setting_changed)
def clear_built_schemas(*, setting: str, **kwargs: Any) -> None:
    """A setting may change the schema (page sizes, drf-spectacular's): build it again."""
    SchemaView.built.clear()
