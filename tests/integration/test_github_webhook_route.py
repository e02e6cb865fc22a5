"""``POST /v1/github/webhook`` in process, over a runner on SQLite: GitHub's signature first,
deliveries once, issue intake once per issue, CI events handed to the runner's CI waits."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from forge_fixtures import REPO, WEBHOOK_SECRET, GitRemote
from stageline.config import Settings, load_settings
from stageline.forge import GitHubSettings, RepoSettings, sign
from stageline.runner import ForgeAccess, Runner
from stageline.server._errors import install_error_handlers
from stageline.server.forge import ForgeRuntime, issue_run_id
from stageline.server.forge._webhook import router

FIXTURES = Path(__file__).parents[1] / "fixtures"


def forge_settings(checkout: Path, secret: str | None = WEBHOOK_SECRET) -> GitHubSettings:
    return GitHubSettings(
        api_url="http://127.0.0.1:9",
        token="t",
        webhook_secret=secret,
        intake_label="stageline",
        intake_template="forge_intake",
        repositories={REPO: RepoSettings(name=REPO, checkout=checkout)},
    )


class FakeCi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def on_webhook(self, event: str, payload: dict[str, Any]) -> list[str]:
        self.calls.append((event, payload))
        return ["r1"]

    async def aclose(self) -> None:
        return None


def project_settings(root: Path, url: str | None = None) -> Settings:
    """A project with the ``forge_intake`` template, over ``url`` (default: its SQLite file)."""
    (root / "templates").mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "forge_intake.py", root / "templates")
    home = root / ".stageline"
    env = {"STAGELINE_HOME": str(home), "STAGELINE_DATABASE_URL": url or f"sqlite:///{home}/s.db"}
    return load_settings(cwd=root, env=env)


@pytest.fixture
async def runner(tmp_path: Path) -> AsyncIterator[Runner]:
    async with Runner.open(project_settings(tmp_path), deliver=False) as opened:
        yield opened


def app_for(runner: Runner, settings: GitHubSettings | None) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router)
    forge = ForgeAccess(runner.settings, github=settings) if settings is not None else None
    app.state.forge = ForgeRuntime(forge, runner, None)
    return app


def client(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://t")


def issue_event(number: int, action: str = "labeled", label: str = "stageline", **more: Any):  # type: ignore[no-untyped-def]
    issue = {
        "number": number,
        "title": f"Issue {number}",
        "body": "Make it so.",
        "state": "open",
        "labels": [{"name": label}],
        "html_url": f"https://github.com/{REPO}/issues/{number}",
    }
    payload = {"action": action, "issue": issue, "label": {"name": label}}
    payload["repository"] = {"full_name": more.pop("repo", REPO)}
    return payload


async def send(
    http: httpx.AsyncClient,
    event: str,
    payload: Any,
    delivery: str,
    *,
    secret: str | None = WEBHOOK_SECRET,
    signature: str | None = None,
) -> httpx.Response:
    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    headers["Content-Type"] = "application/json"
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    elif secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    return await http.post("/v1/github/webhook", content=body, headers=headers)


async def test_a_labelled_issue_starts_its_run_once(runner: Runner, git_remote: GitRemote) -> None:
    async with client(app_for(runner, forge_settings(git_remote.checkout))) as http:
        first = await send(http, "issues", issue_event(7), "d-1")
        assert first.status_code == 201, first.text
        run_id = issue_run_id(REPO, 7)
        assert first.json() == {"run_id": run_id, "started": True}
        again = await send(http, "issues", issue_event(7), "d-1")  # a redelivery
        assert again.status_code == 200 and again.json() == {"duplicate": "d-1"}
        other = await send(http, "issues", issue_event(7, "opened"), "d-2")
        assert other.json() == {"run_id": run_id, "started": False}
    runs = await runner.ledger.list_runs()
    assert [(r.run_id, r.template) for r in runs] == [(run_id, "forge_intake")]
    state = runs[0].inputs
    assert state["task"] == "Issue 7\n\nMake it so."
    assert (state["forge_repo"], state["issue_number"]) == (REPO, 7)
    assert state["repo"] == str(git_remote.checkout)


async def test_a_delivery_whose_handling_failed_is_handled_when_redelivered(
    runner: Runner, git_remote: GitRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database away a moment (5xx), or a crash (500): the delivery is not marked handled,
    so GitHub's redelivery of the same id takes the issue in; once handled, it is ignored."""
    from stageline.errors import StorageError

    create = runner.create
    failures: list[BaseException] = [
        StorageError("the database is unreachable"),
        RuntimeError("a crash while handling"),
    ]

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return await create(*args, **kwargs)

    monkeypatch.setattr(runner, "create", flaky)
    async with client(app_for(runner, forge_settings(git_remote.checkout))) as http:
        away = await send(http, "issues", issue_event(8), "d-8")
        assert away.status_code == 503, away.text
        crashed = await send(http, "issues", issue_event(8), "d-8")  # GitHub redelivers it
        assert crashed.status_code == 500, crashed.text
        assert await runner.ledger.list_runs() == []
        taken = await send(http, "issues", issue_event(8), "d-8")
        assert taken.status_code == 201, taken.text
        assert taken.json() == {"run_id": issue_run_id(REPO, 8), "started": True}
        again = await send(http, "issues", issue_event(8), "d-8")
        assert again.status_code == 200 and again.json() == {"duplicate": "d-8"}
    assert [r.run_id for r in await runner.ledger.list_runs()] == [issue_run_id(REPO, 8)]


async def test_a_server_has_one_github_client_closed_once(
    tmp_path: Path, git_remote: GitRemote, fake_github: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's webhook, issue poll and comments and its runner's forge service and CI
    polls share one GitHub client, made once for the process and closed once at shutdown."""
    from forge_fixtures import TOKEN, github_toml
    from stageline.forge import GitHubClient
    from stageline.server import create_app

    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", WEBHOOK_SECRET)
    (tmp_path / "stageline.toml").write_text(github_toml(fake_github.url, git_remote.checkout))
    closed: list[GitHubClient] = []

    async def aclose(self: GitHubClient) -> None:
        closed.append(self)

    monkeypatch.setattr(GitHubClient, "aclose", aclose)
    app = create_app(project_settings(tmp_path))
    async with app.router.lifespan_context(app):
        runner: Runner = app.state.runner
        server = app.state.forge
        assert server.forge is runner.services.forge is runner.forge_ci.forge
        client = server.client
        assert runner.services.forge is not None and runner.services.forge.client is client
        assert await server.poll_once() == []  # the issue poll goes through it
        assert fake_github.of("GET", "/issues")
    assert closed == [client]


async def test_other_labels_actions_repositories_and_events_are_ignored(
    runner: Runner, git_remote: GitRemote
) -> None:
    async with client(app_for(runner, forge_settings(git_remote.checkout))) as http:
        cases = [
            ("issues", issue_event(1, label="bug"), "not an open issue given the label"),
            ("issues", issue_event(2, "closed"), "issues closed"),
            ("issues", issue_event(3, repo="evil/repo"), "'evil/repo' is not in"),
            ("push", {"repository": {"full_name": REPO}}, "event 'push' is not one"),
        ]
        for n, (event, payload, says) in enumerate(cases):
            answer = await send(http, event, payload, f"i-{n}")
            assert answer.status_code == 202 and says in answer.json()["ignored"], answer.text
        ping = await send(http, "ping", {"zen": "Design for failure."}, "p-1")
        assert ping.json() == {"ok": True, "zen": "Design for failure."}
        ci = await send(
            http, "workflow_run", {"action": "completed", "repository": {"full_name": REPO}}, "c-1"
        )
        assert ci.status_code == 202 and ci.json() == {"runs": []}  # no CI wait it ends
    assert await runner.ledger.list_runs() == []


async def test_ci_events_go_to_the_runners_ci_waits(runner: Runner, git_remote: GitRemote) -> None:
    fake = FakeCi()
    runner.forge_ci = fake  # type: ignore[attr-defined]
    payload = {"action": "completed", "repository": {"full_name": REPO}, "check_suite": {}}
    async with client(app_for(runner, forge_settings(git_remote.checkout))) as http:
        answer = await send(http, "check_suite", payload, "c-2")
    assert answer.status_code == 202 and answer.json() == {"runs": ["r1"]}
    assert fake.calls == [("check_suite", payload)]


async def test_signatures_are_required_and_checked_first(
    runner: Runner, git_remote: GitRemote
) -> None:
    async with client(app_for(runner, forge_settings(git_remote.checkout))) as http:
        forged = await send(http, "issues", issue_event(7), "s-1", secret="guessed")
        unsigned = await send(http, "issues", issue_event(7), "s-2", secret=None)
        sha1 = await send(http, "issues", issue_event(7), "s-3", signature="sha1=00")
        for refused in (forged, unsigned, sha1):
            assert refused.status_code == 401, refused.text
            assert "X-Hub-Signature-256" in refused.json()["detail"]
        not_json = await http.post(
            "/v1/github/webhook",
            content=b"[1,",
            headers={"X-Hub-Signature-256": sign(WEBHOOK_SECRET, b"[1,")},
        )
        assert not_json.status_code == 400
        # the refused deliveries were not used up: signed, the same one starts the run
        signed = await send(http, "issues", issue_event(7), "s-1")
        assert signed.status_code == 201
    assert len(await runner.ledger.list_runs()) == 1


async def test_no_webhook_secret_or_no_github_is_404(runner: Runner, git_remote: GitRemote) -> None:
    for settings in (forge_settings(git_remote.checkout, secret=None), None):
        async with client(app_for(runner, settings)) as http:
            answer = await send(http, "issues", issue_event(7), "n-1")
        assert answer.status_code == 404
        assert "webhook is not configured" in answer.json()["detail"]


async def test_two_server_processes_given_the_same_issue_start_one_run(
    tmp_path: Path, shared_backend_url: str, git_remote: GitRemote
) -> None:
    """Two servers on one database (SQLite file, Postgres), each delivered the issue (GitHub
    sends each delivery once; here two events of one issue race): one run, started once."""
    settings = project_settings(tmp_path, shared_backend_url)
    forge = forge_settings(git_remote.checkout)
    async with (
        Runner.open(settings, deliver=False) as one,
        Runner.open(settings, deliver=False) as two,
        client(app_for(one, forge)) as first,
        client(app_for(two, forge)) as second,
    ):
        answers = await asyncio.gather(
            *(
                send(http, "issues", issue_event(5, action), f"race-{n}")
                for n, (http, action) in enumerate(
                    [(first, "labeled"), (second, "opened"), (first, "opened"), (second, "labeled")]
                )
            )
        )
        runs = await one.ledger.list_runs()
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201], [a.text for a in answers]
    assert [a.json()["started"] for a in answers].count(True) == 1
    assert [r.run_id for r in runs] == [issue_run_id(REPO, 5)]


async def test_signed_payloads_that_are_not_githubs_are_refused_not_crashed_on(
    runner: Runner, git_remote: GitRemote
) -> None:
    repo = {"full_name": REPO}
    cases: list[tuple[Any, int]] = [
        ({"action": "labeled", "repository": "acme/app"}, 202),  # not an object: no repository
        ({"action": "labeled", "repository": repo}, 400),  # no issue
        ({"action": "labeled", "repository": repo, "issue": {"number": "7"}}, 400),
        ({"action": "labeled", "repository": repo, "issue": {"number": True}}, 400),
        ({"action": "labeled", "repository": repo, "issue": {"number": 7, "labels": [{}]}}, 400),
        ({**issue_event(7), "label": "stageline"}, 202),  # a label that is not an object
    ]
    async with client(app_for(runner, forge_settings(git_remote.checkout))) as http:
        for n, (payload, status) in enumerate(cases):
            answer = await send(http, "issues", payload, f"h-{n}")
            assert answer.status_code == status, (payload, answer.text)
    assert await runner.ledger.list_runs() == []
