"""``client.store`` of the official ``langgraph_sdk`` against a running ``stageline serve``, on
SQLite and on Postgres: the same store the stages read and write (``ctx.store``), whether the
run is started through the server or by the CLI in the same project."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from langgraph_sdk import get_client

from server_fixtures import Server


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, serve_project: Callable[..., Server]) -> Server:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    return serve_project(database_url=url, templates=["store_notes.py"])


def status_of(error: pytest.ExceptionInfo[httpx.HTTPStatusError]) -> int:
    return error.value.response.status_code


async def test_the_sdk_store_is_the_stages_store(server: Server) -> None:
    async with (
        get_client(url=server.url, api_key=server.tokens["decide"]) as client,
        get_client(url=server.url, api_key=server.tokens["read"]) as reader,
    ):
        await client.store.put_item(["prefs", "ada"], "greeting", {"text": "ahoy", "n": 1})
        got = await reader.store.get_item(["prefs", "ada"], "greeting")
        assert got["namespace"] == ["prefs", "ada"] and got["key"] == "greeting"
        assert got["value"] == {"text": "ahoy", "n": 1} and got["created_at"] and got["updated_at"]
        assert await reader.store.get_item(["prefs", "ada"], "nothing") is None  # as LangGraph

        # A run started through the server reads the item and writes a note beside it.
        thread = await client.threads.create()
        done = await client.runs.wait(thread["thread_id"], "store_notes", input={"user": "ada"})
        assert done["greeting"] == "ahoy"
        note = await reader.store.get_item(["notes", "ada"], thread["thread_id"])
        assert note["value"] == {"greeting": "ahoy"}

        # A run of the CLI in the same project writes to the same store.
        server.cli("run", "store_notes", "-i", "user=bob", "--run-id", "bob1")
        found = await reader.store.search_items(["notes"])
        assert {(tuple(i["namespace"]), i["key"]) for i in found["items"]} == {
            (("notes", "ada"), thread["thread_id"]),
            (("notes", "bob"), "bob1"),
        }
        only_ahoy = await reader.store.search_items(["notes"], filter={"greeting": "ahoy"})
        assert [i["key"] for i in only_ahoy["items"]] == [thread["thread_id"]]
        assert len((await reader.store.search_items([], limit=1, offset=1))["items"]) == 1
        spaces = await reader.store.list_namespaces(prefix=["notes"])
        assert sorted(spaces["namespaces"]) == [["notes", "ada"], ["notes", "bob"]]
        shallow = await reader.store.list_namespaces(max_depth=1)
        assert sorted(shallow["namespaces"]) == [["notes"], ["prefs"]]

        await client.store.delete_item(["prefs", "ada"], "greeting")
        assert await reader.store.get_item(["prefs", "ada"], "greeting") is None
        await client.store.delete_item(["prefs", "ada"], "greeting")  # nothing there: fine

        # Scopes: a read token looks, it neither puts nor deletes.
        with pytest.raises(httpx.HTTPStatusError) as denied:
            await reader.store.put_item(["prefs", "ada"], "greeting", {"text": "no"})
        assert status_of(denied) == 403
        with pytest.raises(httpx.HTTPStatusError) as denied:
            await reader.store.delete_item(["notes", "bob"], "bob1")
        assert status_of(denied) == 403

    # Malformed requests are 422s with a JSON body (the SDK refuses some before sending).
    with server.client("decide") as http:
        for method, path, kwargs in [
            ("PUT", "/store/items", {"json": {"namespace": ["a.b"], "key": "k", "value": {}}}),
            ("PUT", "/store/items", {"json": {"namespace": [], "key": "k", "value": {}}}),
            ("PUT", "/store/items", {"json": {"namespace": ["a"], "key": "k", "value": [1]}}),
            (
                "PUT",
                "/store/items",
                {"json": {"namespace": ["langgraph"], "key": "k", "value": {}}},
            ),
            ("GET", "/store/items", {"params": {"namespace": "a"}}),
            ("GET", "/store/items", {"params": {"namespace": "a..b", "key": "k"}}),
            ("POST", "/store/items/search", {"json": {"namespace_prefix": [""]}}),
            ("POST", "/store/items/search", {"json": {"limit": 0}}),
            ("POST", "/store/items/search", {"json": {"filter": {"n": {"$near": 1}}}}),
            ("PUT", "/store/items", {"json": {"namespace": ["a"], "key": "k\u0000", "value": {}}}),
            (
                "PUT",
                "/store/items",
                {"json": {"namespace": ["a"], "key": "k", "value": {"n": 2**70}}},
            ),
            ("POST", "/store/namespaces", {"json": {"prefix": ["x.y"]}}),
        ]:
            answer = http.request(method, path, **kwargs)
            assert answer.status_code == 422, (method, path, kwargs, answer.text)
            assert answer.json()["detail"], answer.text
    with server.client(None) as anonymous:
        assert (
            anonymous.get("/store/items", params={"namespace": "a", "key": "k"}).status_code == 401
        )
