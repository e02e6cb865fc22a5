"""A project's ``langgraph.json`` graphs (``tests/fixtures/langgraph_project``: written as
LangGraph's documentation writes them, no stageline imports) through the real CLI and a real
``stageline serve`` driven by ``langgraph_sdk``, on SQLite and Postgres, their ``interrupt()``
answered with ``stageline respond``, ``POST /v1/runs/{id}/respond`` and a ``command`` resume,
records checked; and a run of one killed with SIGKILL mid-run, then resumed, with no
completed node run again."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _procs
import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from server_fixtures import Server, make_project

CORPUS = Path(__file__).parents[1] / "fixtures" / "langgraph_project"
WEATHER = json.dumps([{"role": "user", "content": "What is the weather in Paris?"}])

RUNS: dict[str, tuple[list[str], list[str]]] = {
    "agent": (["-i", f"messages={WEATHER}"], ["agent", "tools", "agent"]),
    "react": (["-i", f"messages={WEATHER}"], ["agent", "tools", "agent"]),
    "map_reduce": (
        ["-i", "topic=pets"],
        ["generate_topics", "generate_joke", "generate_joke", "generate_joke", "best_joke"],
    ),
    "command_retry": (["-i", "value=1"], ["decide", "flaky", "flaky"]),  # a try, then another
    "factory": (["-i", "text=three small words"], ["count"]),
    "greeter": ([], ["greet", "audience"]),
}
"""Graph -> (its inputs on the command line, the nodes its records name, in order)."""


def _url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 'home' / 'stageline.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _url(request, tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(CORPUS, root)
    return root


def cli(project: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = _procs.cli_env(project.parent / "home", url)
    done = _procs.cli(list(args), project, env)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def shown(project: Path, url: str, run_id: str) -> dict[str, Any]:
    done = cli(project, url, "show", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_each_graph_runs_from_the_command_line(project: Path, database: str) -> None:
    listed = cli(project, database, "templates").stdout
    assert all(f"{name}" in listed for name in RUNS) and "langgraph.json" in listed
    drawn = cli(project, database, "graph", "map_reduce").stdout
    assert "generate_joke" in drawn and "best_joke" in drawn
    for name, (inputs, expected) in RUNS.items():
        done = cli(project, database, "run", name, *inputs, "--run-id", f"cli-{name}")
        assert done.returncode == 0, (name, done.stdout, done.stderr)
        run = shown(project, database, f"cli-{name}")
        assert run["run"]["status"] == "succeeded"
        records = run["records"]
        assert sorted(r["node"] for r in records) == sorted(expected), name
        assert [r["status"] for r in records].count("failed") == (name == "command_retry")
    agent = shown(project, database, "cli-agent")["records"]
    assert [r["metrics"].get("output_tokens") for r in agent] == [5, None, 7]
    jokes = [r for r in shown(project, database, "cli-map_reduce")["records"]]
    assert len({r["task_id"] for r in jokes}) == 5
    assert shown(project, database, "cli-greeter")["state"]["message"] == "Hello, world!"


def test_interrupting_graphs_wait_then_are_answered_from_the_command_line(
    project: Path, database: str
) -> None:
    asked = cli(project, database, "run", "ask_name", "--run-id", "asks")
    assert asked.returncode == 3, asked.stdout + asked.stderr  # waiting for a person
    run = shown(project, database, "asks")
    assert run["run"]["status"] == "waiting"
    assert [(r["node"], r["status"]) for r in run["records"]] == [
        ("prepare", "succeeded"),
        ("asker", "waiting"),
        ("asker/ask", "waiting"),
    ]
    [wait] = run["interrupts"]
    assert (wait["name"], wait["value"], wait["status"]) == (
        "asker/ask",
        "What is your name?",
        "pending",
    )
    inbox = cli(project, database, "run", "inbox", "-i", "email=hello", "--run-id", "inbox")
    assert inbox.returncode == 3, inbox.stdout + inbox.stderr
    assert "allows: accept, edit, response, ignore" in inbox.stdout

    named = cli(
        project, database, "respond", "asks", "--wait", wait["wait_id"], "-t", "Ann", "--as", "ann"
    )
    assert named.returncode == 0, named.stdout + named.stderr  # resumed inside the subgraph
    edit = {"type": "edit", "args": {"action": "send_email", "args": {"reply": "Edited"}}}
    sent = cli(project, database, "respond", "inbox", "-v", json.dumps(edit), "--as", "bo")
    assert sent.returncode == 0, sent.stdout + sent.stderr

    run = shown(project, database, "asks")
    assert run["run"]["status"] == "succeeded"
    assert run["state"] == {"name": "Ann", "greeting": "Hello, Ann"}
    assert [(r["node"], r["status"]) for r in run["records"]] == [
        ("prepare", "succeeded"),
        ("asker", "succeeded"),
        ("asker/ask", "succeeded"),
        ("greet", "succeeded"),
    ]
    assert [(w["answer"], w["actor"], w["status"]) for w in run["interrupts"]] == [
        ("Ann", "ann", "applied")
    ]
    run = shown(project, database, "inbox")
    assert run["run"]["status"] == "succeeded" and run["state"]["reply"] == "Edited"
    assert [(r["node"], r["status"]) for r in run["records"]] == [
        ("draft", "succeeded"),
        ("review", "succeeded"),
    ]
    assert [(w["answer"], w["actor"], w["status"]) for w in run["interrupts"]] == [
        ([edit], "bo", "applied")
    ]


def test_a_worker_finds_the_graphs(project: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'home' / 'stageline.db'}"
    queued = cli(
        project, url, "run", "map_reduce", "-i", "topic=owls", "--detach", "--run-id", "bg"
    )
    assert queued.returncode == 0, queued.stdout + queued.stderr
    followed = cli(project, url, "logs", "bg", "--follow", "--json")
    kinds = [json.loads(line)["kind"] for line in followed.stdout.splitlines()]
    assert kinds[0] == "run.queued" and kinds[-1] == "run.succeeded", followed.stdout
    run = shown(project, url, "bg")
    assert run["state"]["best_selected_joke"] == "a joke about owls: cats"
    assert Counter(r["node"] for r in run["records"])["generate_joke"] == 3


def test_a_changed_graph_is_refused_until_forced(project: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'home' / 'stageline.db'}"
    flag = project / "ok.flag"
    (project / "graphs" / "strict.py").write_text(
        "from pathlib import Path\n"
        "from typing import TypedDict\n"
        "from langgraph.graph import START, StateGraph\n\n\n"
        "class State(TypedDict, total=False):\n    n: int\n\n\n"
        "def check(state: State) -> dict:\n"
        f"    if not Path({str(flag)!r}).exists():\n"
        "        raise RuntimeError('no flag yet')\n"
        "    return {'n': 1}\n\n\n"
        "builder = StateGraph(State)\n"
        "builder.add_node('check', check)\n"
        "builder.add_edge(START, 'check')\n"
        "graph = builder.compile()\n"
    )
    listing = json.loads((project / "langgraph.json").read_text())
    listing["graphs"]["strict"] = "./graphs/strict.py:graph"
    (project / "langgraph.json").write_text(json.dumps(listing))
    failed = cli(project, url, "run", "strict", "--run-id", "strict")
    assert failed.returncode != 0 and shown(project, url, "strict")["run"]["status"] == "failed"
    source = project / "graphs" / "strict.py"
    source.write_text(
        source.read_text().replace(
            "builder.add_edge(START, 'check')",
            "builder.add_node('more', lambda s: {})\n"
            "builder.add_edge(START, 'more')\nbuilder.add_edge('more', 'check')",
        )
    )
    flag.touch()
    refused = cli(project, url, "retry", "strict")
    assert refused.returncode != 0 and "pass --force" in refused.stderr
    forced = cli(project, url, "retry", "strict", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert shown(project, url, "strict")["run"]["status"] == "succeeded"


def _wait_for(trail: Path, line: str, proc: subprocess.Popen[str], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trail.exists() and line in trail.read_text().splitlines():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run exited early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"never saw {line!r} in the trail")


def test_sigkill_mid_run_then_resume_runs_no_completed_node_again(
    project: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'home' / 'stageline.db'}"
    trail = tmp_path / "trail.txt"
    env = _procs.cli_env(tmp_path / "home", url)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stageline.cli",
            "run",
            "trail",
            "-i",
            f"trail={trail}",
            "--run-id",
            "victim",
        ],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(trail, "two:start", proc)
    second = cli(project, url, "resume", "victim")  # one advancer per run: the lease is held
    assert second.returncode != 0 and "error:" in second.stderr, second.stdout + second.stderr
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    Path(f"{trail}.go").touch()
    resumed = cli(project, url, "resume", "victim")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    ran = Counter(trail.read_text().splitlines())
    assert ran == {"one": 1, "two:start": 2, "two": 1, "three": 1}
    run = shown(project, url, "victim")
    assert run["run"]["status"] == "succeeded"
    assert run["state"]["steps"] == ["one", "two", "three"]
    succeeded = Counter(r["node"] for r in run["records"] if r["status"] == "succeeded")
    assert succeeded == {"one": 1, "two": 1, "three": 1}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """One ``stageline serve`` over a copy of the corpus per database, shared by the tests of
    this module (each makes its own threads and runs)."""
    url = request.getfixturevalue("postgres_module_url") if request.param == "postgres" else None
    server = make_project(tmp_path_factory.mktemp(f"served-{request.param}"), database_url=url)
    shutil.copytree(CORPUS, server.project, dirs_exist_ok=True)
    try:
        yield server.start()
    finally:
        server.kill()


async def test_each_graph_runs_on_stageline_serve_through_langgraph_sdk(served: Server) -> None:
    inputs: dict[str, dict[str, Any]] = {
        "agent": {"messages": json.loads(WEATHER)},
        "react": {"messages": json.loads(WEATHER)},
        "map_reduce": {"topic": "pets"},
        "command_retry": {"value": 1},
        "factory": {"text": "three small words"},
        "greeter": {},
    }
    with served.client("read") as http:  # what the dashboard reads
        drawn_api = http.get("/v1/templates/agent/graph")
        assert drawn_api.status_code == 200, drawn_api.text
        assert {"agent", "tools"} <= {n["id"] for n in drawn_api.json()["nodes"]}
        async with get_client(url=served.url, api_key=served.tokens["decide"]) as client:
            found = {a["assistant_id"]: a for a in await client.assistants.search(limit=100)}
            for name in (*inputs, "ask_name", "inbox"):
                assert found[name]["metadata"]["origin"] == "langgraph.json"
            drawn = await client.assistants.get_graph("map_reduce")
            assert {"generate_topics", "generate_joke", "best_joke"} <= {
                n["id"] for n in drawn["nodes"]
            }
            for name, given in inputs.items():
                thread = (await client.threads.create())["thread_id"]
                result = await client.runs.wait(thread, name, input=given)
                assert isinstance(result, dict), (name, result)
                run = http.get(f"/v1/runs/{thread}").json()
                assert run["run"]["status"] == "succeeded", name
                assert sorted(r["node"] for r in run["records"]) == sorted(RUNS[name][1]), name
                if name == "agent":
                    assert result["messages"][-1]["content"] == "It is sunny in Paris."
                    assert sum(r["metrics"].get("input_tokens", 0) for r in run["records"]) == 32
            # The context a client gives a run is what the graph's runtime.context reads.
            schemas = await client.assistants.get_schemas("greeter")
            assert set(schemas["context_schema"]["properties"]) == {"greeting", "audience"}
            context = {"greeting": "Hey", "audience": "team"}
            greeted = await client.runs.wait(None, "greeter", input={}, context=context)
            assert greeted == {"message": "Hey, team!", "audience": "team"}
            streamed = [
                part.data
                async for part in client.runs.stream(
                    None, "greeter", input={"name": "Ada"}, context={"greeting": "Howdy"}
                )
                if part.event == "values"
            ]
            assert streamed[-1] == {"name": "Ada", "message": "Howdy, Ada!", "audience": "world"}
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await client.runs.wait(None, "greeter", input={}, context={"greting": "Hi"})
            assert refused.value.response.status_code == 422
            assert "unknown context key 'greting'" in refused.value.response.text
            kept = (await client.threads.create())["thread_id"]
            await client.runs.wait(kept, "ask_name", input={}, context=None)
            with pytest.raises(httpx.HTTPStatusError) as changed:  # a thread's context holds
                await client.runs.wait(
                    kept, "ask_name", command={"resume": "Ada"}, context={"x": 1}
                )
            assert changed.value.response.status_code == 409
            assert "keeps the context its first run was given" in changed.value.response.text
            answered = await client.runs.wait(kept, "ask_name", command={"resume": "Ada"})
            assert answered["greeting"] == "Hello, Ada"
            waiting = (await client.threads.create())["thread_id"]
            await client.runs.wait(waiting, "ask_name", input={})
            run = http.get(f"/v1/runs/{waiting}").json()
            assert run["run"]["status"] == "waiting"
            assert [r["node"] for r in run["records"]] == ["prepare", "asker", "asker/ask"]


ASKED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "ask_name": ({}, ["prepare", "asker", "asker/ask", "greet"]),
    "inbox": ({"email": "hello"}, ["draft", "review"]),
}
"""Interrupting graph -> (its inputs, the nodes its records name once answered, in order)."""


def _records(detail: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["node"], r["status"]) for r in detail["records"]]


def _answered(detail: dict[str, Any], name: str) -> list[tuple[Any, str, str]]:
    assert detail["run"]["status"] == "succeeded", detail["run"]
    assert _records(detail) == [(node, "succeeded") for node in ASKED[name][1]]
    return [(w["answer"], w["actor"], w["status"]) for w in detail["interrupts"]]


def _respond_twice(http: httpx.Client, name: str, value: Any) -> dict[str, Any]:
    """Start ``name`` over ``POST /v1/runs``, answer its interrupt with ``POST .../respond``,
    then again (409); the run's detail."""
    made = http.post("/v1/runs", json={"template": name, "inputs": ASKED[name][0], "wait": True})
    assert made.status_code == 201, made.text
    run_id, [wait] = made.json()["run"]["run_id"], made.json()["waiting"]
    assert made.json()["run"]["status"] == "waiting" and wait["kind"] == "interrupt"
    url = f"/v1/runs/{run_id}/respond"
    answered = http.post(url, json={"value": value, "wait_id": wait["wait_id"]})
    assert answered.status_code == 200, answered.text
    again = http.post(url, json={"value": value, "wait_id": wait["wait_id"]})
    assert again.status_code == 409 and "already answered by decider" in again.text, again.text
    return dict(http.get(f"/v1/runs/{run_id}").json())


async def _resume_twice(
    client: LangGraphClient, http: httpx.Client, name: str, resume: Any, *, keyed: bool = False
) -> dict[str, Any]:
    """Start ``name`` on a thread with ``langgraph_sdk``, resume it with ``command`` (``keyed``:
    by interrupt id), then again (ignored, or 409 when strict); the run's detail."""
    thread = (await client.threads.create())["thread_id"]
    stopped = await client.runs.wait(thread, name, input=ASKED[name][0])
    assert isinstance(stopped, dict), stopped
    [asked] = stopped["__interrupt__"]
    assert [i["id"] for i in (await client.threads.get_state(thread))["interrupts"]] == [
        asked["id"]
    ]
    answer = {asked["id"]: resume} if keyed else resume
    resumed = await client.runs.create(thread, name, command={"resume": answer})
    await client.runs.join(thread, resumed["run_id"])
    assert (await client.threads.get(thread))["status"] == "idle"
    # A second resume: ignored, as on LangGraph's server (nothing waits; the first answer
    # stands), or 409 when the client asks for strict_resume; /respond refuses it (409).
    ignored = await client.runs.wait(thread, name, command={"resume": answer})
    assert isinstance(ignored, dict) and "__interrupt__" not in ignored, ignored
    strict = http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": name, "command": {"resume": answer}, "strict_resume": True},
    )
    assert strict.status_code == 409, strict.text
    again = http.post(f"/v1/runs/{thread}/respond", json={"value": resume})
    assert again.status_code == 409, again.text
    return dict(http.get(f"/v1/runs/{thread}").json())


async def test_interrupting_graphs_are_answered_over_the_api(served: Server) -> None:
    accept = [{"type": "accept", "args": None}]
    ignore = [{"type": "ignore", "args": None}]
    with served.client("decide") as http:
        async with get_client(url=served.url, api_key=served.tokens["decide"]) as client:
            named = await _resume_twice(client, http, "ask_name", "Bo", keyed=True)
            accepted = await _resume_twice(client, http, "inbox", accept)
        answered = _respond_twice(http, "ask_name", {"first": "Ann"})
        ignored = _respond_twice(http, "inbox", ignore)
    assert _answered(named, "ask_name") == [("Bo", "decider", "applied")]
    assert named["state"]["greeting"] == "Hello, Bo"
    assert _answered(accepted, "inbox") == [(accept, "decider", "applied")]
    assert accepted["state"]["reply"] == "Thanks for: hello"
    assert _answered(answered, "ask_name") == [({"first": "Ann"}, "decider", "applied")]
    assert answered["state"]["name"] == {"first": "Ann"}
    assert _answered(ignored, "inbox") == [(ignore, "decider", "applied")]
    assert ignored["state"]["reply"] == ""
