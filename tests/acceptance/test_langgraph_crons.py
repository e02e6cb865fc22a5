"""``langgraph_sdk``'s crons against a running ``stageline serve``: create, search, count,
update, delete, a schedule that fires (its run names it), a thread's schedule, and refusals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from server_fixtures import Server


def sdk(server: Server, scope: str = "decide") -> LangGraphClient:
    return get_client(url=server.url, api_key=server.tokens[scope])


async def refused(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as error:
        await call
    return error.value.response.status_code


async def fired_threads(client: LangGraphClient, cron_id: str) -> list[dict[str, Any]]:
    for _ in range(300):  # a hang guard, not a timing: the server looks every two seconds
        found = await client.threads.search(metadata={"cron_id": cron_id})
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"schedule {cron_id} never fired")


async def test_schedules_over_the_sdk(serve_project: Callable[..., Server]) -> None:
    server = serve_project()
    async with sdk(server) as client, sdk(server, "admin") as admin, sdk(server, "read") as reader:
        assert await refused(client.crons.create("blog_post", schedule="often")) == 422
        assert await refused(client.crons.create("nope", schedule="* * * * *")) == 404
        bad_input = client.crons.create("blog_post", schedule="0 9 * * *", input={"nope": 1})
        assert await refused(bad_input) == 422
        assert await refused(reader.crons.create("blog_post", schedule="0 9 * * *")) == 403

        daily = await client.crons.create(
            "blog_post",
            schedule="0 9 * * *",
            timezone="Europe/Paris",
            input={"topic": "owls"},
            metadata={"team": "docs"},
            end_time=datetime.now(UTC) + timedelta(days=30),
        )
        assert daily["assistant_id"] == "blog_post" and daily["thread_id"] is None
        assert daily["schedule"] == "0 9 * * *" and daily["enabled"] is True
        assert daily["payload"]["input"] == {"topic": "owls"}
        assert daily["metadata"] == {"team": "docs"} and daily["next_run_date"]
        assert daily["end_time"] and daily["user_id"]

        often = await client.crons.create(
            "blog_post", schedule="* * * * * *", input={"topic": "tides"}, metadata={"n": 2}
        )
        [thread] = await fired_threads(client, often["cron_id"])
        off = await client.crons.update(often["cron_id"], enabled=False)
        assert off["enabled"] is False and off["next_run_date"] is None
        tid = thread["thread_id"]
        assert thread["metadata"]["cron_id"] == often["cron_id"] and thread["metadata"]["n"] == 2
        runs = await client.runs.list(tid)
        assert runs and runs[-1]["metadata"]["cron_id"] == often["cron_id"]
        shown = json.loads(server.cli("show", tid, "--json").stdout)
        assert shown["lineage"]["cron_id"] == often["cron_id"]

        found = await reader.crons.search(assistant_id="blog_post")
        assert {c["cron_id"] for c in found} == {daily["cron_id"], often["cron_id"]}
        assert [c["cron_id"] for c in await reader.crons.search(metadata={"team": "docs"})] == [
            daily["cron_id"]
        ]
        assert [c["cron_id"] for c in await reader.crons.search(enabled=False)] == [
            often["cron_id"]
        ]
        picked = await reader.crons.search(
            sort_by="created_at", sort_order="asc", select=["cron_id"], limit=1
        )
        assert picked == [{"cron_id": daily["cron_id"]}]
        assert await reader.crons.count() == 2
        assert await reader.crons.count(metadata={"n": 2}) == 1

        hourly = await client.crons.update(daily["cron_id"], schedule="0 * * * *", end_time=None)
        assert hourly["schedule"] == "0 * * * *" and hourly["end_time"] is None
        assert await refused(client.crons.update(daily["cron_id"], schedule="soon")) == 422
        assert await refused(client.crons.update("no-such-cron", enabled=True)) == 404

        empty = await client.threads.create()
        mine = await client.crons.create_for_thread(
            empty["thread_id"], "blog_post", schedule="0 9 * * *", input={"topic": "kelp"}
        )
        assert mine["thread_id"] == empty["thread_id"]
        assert await reader.crons.count(thread_id=empty["thread_id"]) == 1
        started = client.crons.create_for_thread(tid, "blog_post", schedule="0 9 * * *")
        assert await refused(started) == 409
        missing = client.crons.create_for_thread("no-thread", "blog_post", schedule="0 9 * * *")
        assert await refused(missing) == 404

        assert await refused(client.crons.delete(daily["cron_id"])) == 403
        for cron in (daily, often, mine):
            await admin.crons.delete(cron["cron_id"])
        assert await refused(admin.crons.delete(daily["cron_id"])) == 404
        assert await reader.crons.count() == 0
