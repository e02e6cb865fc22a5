"""The issue comment mirror: an outbox sink that tells a run's issue what the run does.

A run with ``forge_repo`` and ``issue_number`` inputs gets a comment for each of: the run taken
(its id), each question set asked, the plan at its approval gate (any gate's summary), each
decision and answer (who, what), CI dispatched and finished, the pull request, and how the run
ended (``_facts.comment_text``). Delivered from the ledger like the Slack thread (a cursor,
retries with backoff kept in the ledger): GitHub being down never hurts the run. Each comment
is recorded once posted, so a batch retried after a failure posts nothing twice; each carries
a hidden marker ``<!-- stageline:RUN:KEY -->``, and a post tried before whose answer was lost
is looked for by it among the issue's comments before it is sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from stageline.errors import ForgeError
from stageline.events import EventFilter
from stageline.events._delivery import DeliveryError, DeliveryPolicy
from stageline.events._links import find_wait
from stageline.forge import GitHubSettings
from stageline.ledger import LedgerStore, Run
from stageline.ledger.records import Event
from stageline.server.forge._facts import COMMENT_KINDS, clip, comment_text

if TYPE_CHECKING:
    from stageline.forge import GitHubClient

__all__ = ["COMMENTS_FILTER", "COMMENTS_POLICY", "IssueCommentSink", "marker"]

_log = logging.getLogger("stageline.forge")

COMMENTS_POLICY = DeliveryPolicy(batch=20, retries=0, backoff=1.0, max_backoff=60.0, timeout=90.0)
COMMENTS_FILTER = EventFilter.of(min_level="info", kinds=COMMENT_KINDS)
_GIVE_UP = (404, 410, 422)
"""GitHub's answers that sending the same comment again cannot cure (no such issue, locked,
a body it refuses)."""
_RECORD = "github:"
"""The prefix of the comment records in the ledger's chat messages (apart from Slack's)."""


def marker(run_id: str, key: str) -> str:
    """The hidden line that names a comment's run and key."""
    return f"<!-- stageline:{run_id}:{key} -->"


class IssueCommentSink:
    """Posts a run's story as comments on its issue (an ``AsyncSink``)."""

    name = "github-comments"

    def __init__(
        self,
        settings: GitHubSettings,
        ledger: LedgerStore,
        client: Callable[[], GitHubClient],
        *,
        public_url: str | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self._client = client
        self.public_url = public_url.rstrip("/") if public_url else None
        self._runs: dict[str, Run | None] = {}

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        for event in events:
            await self._one(event)

    async def aclose(self, **future_kwargs: Any) -> None:
        return None

    async def _issue(self, run_id: str) -> tuple[Run, str, int] | None:
        """The run and its issue (repository, number), when it has one stageline may touch."""
        if run_id not in self._runs:
            try:
                self._runs[run_id] = await self.ledger.get_run(run_id)
            except Exception:  # pruned meanwhile: nothing to tell
                self._runs[run_id] = None
            if len(self._runs) > 1000:
                self._runs.pop(next(iter(self._runs)))
        run = self._runs[run_id]
        if run is None:
            return None
        repo, number = run.inputs.get("forge_repo"), run.inputs.get("issue_number")
        if not isinstance(repo, str) or repo not in self.settings.repositories:
            return None
        if isinstance(number, bool) or not isinstance(number, int | str):
            return None
        try:
            return run, repo, int(number)
        except ValueError:
            return None

    async def _one(self, event: Event) -> None:
        found = await self._issue(event.run_id)
        if found is None:
            return
        run, repo, number = found
        wait = None
        if event.kind in ("question.asked", "gate.waiting"):
            wait = await find_wait(self.ledger, event)
        page = f"{self.public_url}/ui/runs/{run.run_id}" if self.public_url else None
        text = comment_text(event, run, wait, page=page)
        if text is None:
            return
        key = "taken" if event.kind in ("run.queued", "run.started") else f"event:{event.seq}"
        await self.post(run.run_id, repo, number, key, text)

    async def post(self, run_id: str, repo: str, number: int, key: str, text: str) -> None:
        """Post once: a comment recorded for ``key`` is not posted again, and one tried before
        whose answer was lost is looked for by its marker first."""
        if await self.ledger.chat_message(run_id, _RECORD + key) is not None:
            return
        where = f"{repo}#{number}"
        tag = marker(run_id, key)
        try:
            if await self.ledger.chat_message(run_id, f"{_RECORD}try:{key}") is not None:
                for comment in await self._client().comments(repo, number):
                    if tag in comment.body:
                        await self.ledger.save_chat_message(
                            run_id, _RECORD + key, where, str(comment.id)
                        )
                        return
            else:
                await self.ledger.save_chat_message(run_id, f"{_RECORD}try:{key}", where, "")
            made = await self._client().comment(repo, number, f"{clip(text)}\n\n{tag}")
        except ForgeError as exc:
            raise DeliveryError(
                f"github comment on {where}: {exc.message}"
                + (f" (HTTP {exc.status})" if exc.status else ""),
                retryable=exc.status not in _GIVE_UP,
            ) from None
        await self.ledger.save_chat_message(run_id, _RECORD + key, where, str(made))
