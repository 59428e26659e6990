"""Jobs of the demo: a video rendered in steps, a greeting, and a workflow of renders."""

from __future__ import annotations

import os
import time

from rest_framework import serializers

from django_jobs import Retry, job


class RenderInput(serializers.Serializer):
    video = serializers.CharField(max_length=100)
    frames = serializers.IntegerField(min_value=1, max_value=1000, default=20)


@job(
    "demo.render",
    idempotency_key="payload",
    label="Render a video",
    group="Demo",
    member_safe=True,
    input=RenderInput,
    retry=Retry(attempts=3, delay="2s"),
)
def render(ctx):
    video, frames = ctx.payload["video"], ctx.payload["frames"]
    # Two durable steps, so the admin's job page has a steps trace to show: a retried job
    # replays them from storage instead of running them again.
    source = ctx.step.run("probe", lambda: {"video": video, "frames": frames})
    ctx.log(f"rendering {video} ({source['frames']} frames)")
    for frame in range(1, frames + 1):
        ctx.check_cancelled()
        time.sleep(float(os.environ.get("DEMO_FRAME_SECONDS", "0.15")))
        ctx.progress("encoding", round(100 * frame / frames))
    url = ctx.step.run("publish", lambda: f"/media/{video}.mp4")
    ctx.log("done")
    return {"url": url, "frames": frames}


@job("demo.hello", idempotency_key="payload", label="Say hello", group="Demo", member_safe=True)
def hello(ctx):
    ctx.log(f"hello {ctx.payload or 'world'}")
    ctx.progress("done", 100)
    return {"greeting": f"hello {ctx.payload or 'world'}"}


class PublishInput(serializers.Serializer):
    video = serializers.CharField(max_length=100)
    sizes = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=1000),
        min_length=1,
        max_length=10,
        default=[5, 10, 20],
    )


@job(
    "demo.publish",
    idempotency_key="payload",
    label="Publish a video (renders in several sizes)",
    group="Demo",
    input=PublishInput,
    retry=Retry(attempts=3, delay="2s"),
)
def publish(ctx):
    """A workflow: one ``demo.render`` child per size, gathered, then announced."""
    video = ctx.payload["video"]
    sizes = ctx.payload.get("sizes") or [5, 10, 20]
    ids = ctx.step.spawn(
        "renders", render, [{"video": f"{video}-{frames}", "frames": frames} for frames in sizes]
    )
    # In a step: the runner runs again from the top when the gather resumes it, and a line
    # logged outside any step would be logged once more.
    ctx.step.run(
        "log-renders",
        lambda: ctx.log(
            f"rendering {video} in {len(ids)} sizes: jobs {', '.join(f'#{i}' for i in ids)}"
        ),
    )
    results = ctx.step.gather("rendered", ids)  # waiting, holding no slot, until all end
    urls = ctx.step.run("announce", lambda: [r["url"] for r in results])
    ctx.log(f"published {video}")
    return {"video": video, "urls": urls}
