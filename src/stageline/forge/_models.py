"""What the forge's calls return: small frozen records of GitHub's answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CiRun", "Comment", "Issue", "PullRequest"]


@dataclass(frozen=True, kw_only=True)
class Issue:
    number: int
    title: str
    body: str
    labels: tuple[str, ...]
    state: str
    """``open`` or ``closed``."""
    url: str
    """Its page (``html_url``)."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Issue:
        return cls(
            number=int(data["number"]),
            title=str(data.get("title") or ""),
            body=str(data.get("body") or ""),
            labels=tuple(
                str(label["name"] if isinstance(label, dict) else label)
                for label in data.get("labels") or ()
            ),
            state=str(data.get("state") or "open"),
            url=str(data.get("html_url") or ""),
        )


@dataclass(frozen=True, kw_only=True)
class Comment:
    id: int
    body: str
    url: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Comment:
        return cls(
            id=int(data["id"]), body=str(data.get("body") or ""), url=str(data.get("html_url"))
        )


@dataclass(frozen=True, kw_only=True)
class CiRun:
    """A workflow run, or a check suite (``kind``), of one commit."""

    id: int
    status: str
    """``queued``, ``in_progress``, ``completed``, ... as GitHub says."""
    conclusion: str | None
    """``success``, ``failure``, ... once completed; else None."""
    url: str
    """Its page where GitHub has one (``html_url``), else its API URL."""
    head_sha: str
    name: str = ""
    kind: str = "workflow_run"
    """``workflow_run`` or ``check_suite``."""
    app: str = ""
    """A check suite's app (its slug, e.g. ``github-actions``)."""
    check_runs: int | None = None
    """A check suite's ``latest_check_runs_count``: 0 for the suite GitHub makes on every push
    for an installed app that checks nothing, which stays ``queued`` for ever."""

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def checks_nothing(self) -> bool:
        """A check suite without check runs: an app that checks nothing on this commit (so
        far). It says nothing about CI (and stays ``queued`` for ever)."""
        return self.kind == "check_suite" and self.check_runs == 0

    @classmethod
    def from_workflow_run(cls, data: dict[str, Any]) -> CiRun:
        return cls(
            id=int(data["id"]),
            status=str(data.get("status") or ""),
            conclusion=data.get("conclusion"),
            url=str(data.get("html_url") or data.get("url") or ""),
            head_sha=str(data.get("head_sha") or ""),
            name=str(data.get("name") or ""),
        )

    @classmethod
    def from_check_suite(cls, data: dict[str, Any]) -> CiRun:
        app = data.get("app") or {}
        return cls(
            id=int(data["id"]),
            status=str(data.get("status") or ""),
            conclusion=data.get("conclusion"),
            url=str(data.get("url") or ""),
            head_sha=str(data.get("head_sha") or ""),
            name=str(app.get("name") or app.get("slug") or ""),
            kind="check_suite",
            app=str(app.get("slug") or ""),
            check_runs=_count(data.get("latest_check_runs_count")),
        )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, kw_only=True)
class PullRequest:
    number: int
    url: str
    """Its page (``html_url``)."""
    node_id: str
    """Its GraphQL id (``markPullRequestReadyForReview`` takes it)."""
    draft: bool
    state: str = "open"
    merged: bool = False
    head: str = ""
    base: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PullRequest:
        return cls(
            number=int(data["number"]),
            url=str(data.get("html_url") or ""),
            node_id=str(data.get("node_id") or ""),
            draft=bool(data.get("draft")),
            state=str(data.get("state") or "open"),
            merged=bool(data.get("merged")),
            head=str((data.get("head") or {}).get("ref") or ""),
            base=str((data.get("base") or {}).get("ref") or ""),
        )
