"""``GET schema/?lang=`` reads only ``settings.LANGUAGES`` (SPEC §7, "And: ..."; docs/security.md).

Any other value is the default language, served from the same built schema: the built schemas,
and Django's translation objects, stay at most one per language, and memory stays flat however
many made-up codes are sent.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest
from django.test import Client
from django.utils.translation import trans_real

from django_jobs.api.views import SchemaView

SCHEMA = "/api/jobs/schema/"


def retained_bytes() -> int:
    """Python memory still held after a collection, as tracemalloc counts it.

    Not the resident size: in a full suite, memory freed by earlier tests and the allocator's
    arenas move the resident size by more than this test's budget, whatever the code does.
    """
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.django_db
def test_made_up_languages_are_the_default_one_and_memory_stays_flat(settings):
    settings.LANGUAGES = [("en", "English"), ("fr", "French"), ("de", "German")]
    SchemaView.built.clear()
    client = Client()
    default = client.get(SCHEMA, {"format": "json"})
    assert default.status_code == 200
    for n in range(10):  # a few first: today's code would build a schema for each
        made_up = client.get(SCHEMA, {"format": "json", "lang": f"x{n}"})
        assert made_up.status_code == 200
        assert made_up.content == default.content
    assert len(SchemaView.built) == 1
    assert client.get(SCHEMA, {"format": "json", "lang": "FR"}).status_code == 200
    assert sorted(SchemaView.built) == ["en", "fr"]

    translations = len(trans_real._translations)
    tracemalloc.start()
    try:
        before = retained_bytes()
        for n in range(500):
            lang = f"zz-{n}" if n % 2 else "a" * (n % 90 + 1)
            assert client.get(SCHEMA, {"format": "json", "lang": lang}).status_code == 200
        after = retained_bytes()
    finally:
        tracemalloc.stop()
    assert len(SchemaView.built) <= len(settings.LANGUAGES)
    assert len(trans_real._translations) <= translations
    # One schema kept per made-up code would hold over 100 MB here.
    assert after - before < 10 * 2**20, (before, after)


def test_the_language_is_one_of_languages_or_the_default(settings):
    from django_jobs.api.openapi import schema_language

    settings.LANGUAGES = [("en", "English"), ("pt-br", "Brazilian Portuguese")]
    settings.LANGUAGE_CODE = "en-us"
    assert schema_language("pt-BR") == "pt-br"
    assert schema_language("en") == "en"
    for asked in ("xx", "pt", "", "en-us\x00", "../../etc", "de"):
        assert schema_language(asked) == "en", asked
