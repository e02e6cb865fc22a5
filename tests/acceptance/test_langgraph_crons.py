"""``langgraph_sdk``'s crons against a running ``stageline serve``: create, search, count,
update, delete, a schedule that fires (its run names it), a thread's schedule, and refusals;
and the dashboard's schedules page in a real Chromium. One server for the module."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from dashboard_browser import SignedIn
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)  # a hang guard: nothing here is timed


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


async def test_schedules_over_the_sdk(server: Server) -> None:
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


def test_the_schedules_page_lists_each_schedule_and_its_runs(
    server: Server, signed_in: SignedIn
) -> None:
    with server.client("decide") as client:
        made = client.post(
            "/runs/crons",
            json={
                "assistant_id": "blog_post",
                "schedule": "* * * * * *",
                "input": {"topic": "moss"},
                "metadata": {"owner": "web"},
            },
        )
        assert made.status_code == 200, made.text
        often = made.json()["cron_id"]
        fired: list[dict[str, object]] = []
        for _ in range(300):  # a hang guard: the server looks every two seconds
            fired = client.post("/threads/search", json={"metadata": {"cron_id": often}}).json()
            if fired:
                break
            time.sleep(0.1)
        assert fired, "the schedule never fired"
        assert client.patch(f"/runs/crons/{often}", json={"enabled": False}).status_code == 200
        later = client.post(
            "/runs/crons",
            json={"assistant_id": "ten_nodes", "schedule": "0 9 * * 1-5", "timezone": "Asia/Tokyo"},
        ).json()["cron_id"]
    page = signed_in(server, "read", start="/ui/schedules")
    assert page.url.endswith("/ui/schedules")
    assert page.locator("nav a.active").inner_text() == "Schedules"
    row = page.locator(f"tr[data-schedule='{often}']")
    assert "owner=web" in row.inner_text() and "disabled" in row.locator(".next").inner_text()
    first = row.locator("a.mono").first
    run_id = first.inner_text()
    assert run_id in {str(t["thread_id"]) for t in fired}
    other = page.locator(f"tr[data-schedule='{later}']")
    assert "0 9 * * 1-5" in other.inner_text() and "Asia/Tokyo" in other.inner_text()
    assert "none yet" in other.inner_text()
    first.click()
    page.wait_for_url(f"**/ui/runs/{run_id}")
    with server.client("admin") as client:
        for cron_id in (often, later):
            assert client.delete(f"/runs/crons/{cron_id}").status_code == 204
