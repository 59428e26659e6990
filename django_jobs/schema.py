"""A JSON Schema for a kind's input serializer, for the kinds manifest."""

from __future__ import annotations

from typing import Any

_TYPES = {
    "BooleanField": "boolean",
    "IntegerField": "integer",
    "FloatField": "number",
    "DecimalField": "string",
    "ListField": "array",
    "DictField": "object",
    "JSONField": None,
    "ChoiceField": "string",
    "MultipleChoiceField": "array",
}


def serializer_json_schema(serializer_class: type | None) -> dict[str, Any] | None:
    """Describe a DRF serializer's fields as a JSON Schema object (None without one)."""
    if serializer_class is None:
        return None
    serializer = serializer_class()
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in serializer.fields.items():
        if getattr(field, "read_only", False):
            continue
        prop: dict[str, Any] = {}
        json_type: str | None = "string"
        for klass in type(field).__mro__:
            if klass.__name__ in _TYPES:
                json_type = _TYPES[klass.__name__]
                break
        if json_type:
            prop["type"] = json_type
        choices = getattr(field, "choices", None)
        if choices:
            prop["enum"] = list(choices)
        for attr, key in (
            ("min_value", "minimum"),
            ("max_value", "maximum"),
            ("max_length", "maxLength"),
            ("min_length", "minLength"),
        ):
            value = getattr(field, attr, None)
            if value is not None:
                prop[key] = value
        if field.help_text:
            prop["description"] = str(field.help_text)
        if field.required:
            required.append(name)
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema
