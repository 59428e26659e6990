"""The demo's workflow parent (``demo.publish``) logs each line once, though its runner runs
again from the top when the gather resumes it."""

from __future__ import annotations

import pytest

from django_jobs.kinds.registry import lookup
from django_jobs.testing import run_until_idle


@pytest.mark.django_db
def test_the_publish_parent_logs_each_line_once_across_its_resume(monkeypatch) -> None:
    monkeypatch.setenv("DEMO_FRAME_SECONDS", "0")
    parent = lookup("demo.publish").enqueue({"video": "intro", "sizes": [1, 2]})
    ran = run_until_idle()
    parent.refresh_from_db()
    assert parent.state == "succeeded", parent.error
    assert [job.pk for job in ran].count(parent.pk) >= 2  # started, then resumed by the gather
    rendering = [line for line in parent.log if line.startswith("rendering intro")]
    assert len(rendering) == 1, parent.log
    assert parent.log[-1] == "published intro"
