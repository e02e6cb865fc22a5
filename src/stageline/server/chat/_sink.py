"""The Slack deliverer: an outbox sink that keeps one thread per run in step with the ledger.

It is delivered from the ledger like any ``[[sinks]]`` sink (a cursor per run, retries with
backoff kept in the ledger), so when Slack is down the run keeps waiting and the messages are
posted when it is back. Every message posted is recorded (run, what it shows, channel, ts)
before the next one is sent: a batch retried after a failure posts nothing twice. Each message
carries metadata naming its run and key, and a post whose answer was lost (Slack took it, then
answered after the timeout) is looked for in the channel or thread before it is sent again.
Gate and question messages are drawn from the wait's current row in the ledger, never from the
event.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from stageline.events import EventFilter
from stageline.events._delivery import DeliveryError, DeliveryPolicy
from stageline.events._links import find_wait
from stageline.ledger import LedgerStore, Wait
from stageline.ledger.records import Event
from stageline.server.chat._render import (
    esc,
    escalation_text,
    milestone_text,
    retired,
    root_blocks,
    wait_blocks,
)
from stageline.server.chat._settings import ChatSettings
from stageline.server.forge import fact_line, forge_fact, slack_link

__all__ = ["METADATA_EVENT", "MILESTONES", "SLACK_POLICY", "SlackSink"]

_log = logging.getLogger("stageline.server")

SLACK_POLICY = DeliveryPolicy(batch=20, retries=0, backoff=0.5, max_backoff=15.0, timeout=20.0)
MILESTONES = EventFilter.of(
    min_level="info", kinds=("run.*", "node.failed", "gate.*", "question.*", "interrupt.*")
)
"""What goes into a run's thread besides its gates and questions (a sink-style filter)."""
_FOR_GOOD = {
    "invalid_blocks",
    "invalid_blocks_format",
    "msg_too_long",
    "no_text",
    "invalid_arguments",
    "too_many_attachments",
}
"""Slack errors that sending the same message again cannot cure."""
_FORM_METHODS = {"users.info", "conversations.history", "conversations.replies"}
"""Methods Slack takes no JSON body for."""
METADATA_EVENT = "stageline_message"
"""The ``event_type`` of the metadata each message carries (its payload: run and key)."""
_WAITS = ("gate.", "question.", "interrupt.")
"""Events about a wait: its own message in the thread, updated as it changes."""
_WAIT_CHANGED = ("decided", "answered", "expired", "rolled_back", "refused", "expiry_failed")


class SlackSink:
    """Posts and updates a run's Slack thread from its events (an ``AsyncSink``)."""

    name = "slack"

    def __init__(
        self,
        chat: ChatSettings,
        ledger: LedgerStore,
        *,
        client: Any = None,
        milestones: EventFilter = MILESTONES,
    ) -> None:
        self.chat = chat
        self.ledger = ledger
        self.client = client or chat.client()
        self.milestones = milestones
        self.secrets = tuple(s for s in (chat.bot_token, chat.signing_secret) if s)

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        for event in events:
            await self._one(event)

    async def aclose(self, **future_kwargs: Any) -> None:
        session = getattr(self.client, "session", None)
        if session is not None:
            await session.close()

    # -- calls ------------------------------------------------------------------------------

    async def call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """One Web API call (JSON for writes, a form for reads such as ``users.info``); a
        failure becomes a ``DeliveryError`` (no token, no URL in it)."""
        from slack_sdk.errors import SlackApiError

        body = {"data": kwargs} if method in _FORM_METHODS else {"json": kwargs}
        try:
            response = await self.client.api_call(method, **body)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "error") if exc.response else "error"
            retry_after = None
            if error == "ratelimited" and exc.response is not None:
                retry_after = float(exc.response.headers.get("Retry-After", 1) or 1)
            raise DeliveryError(
                f"slack {method}: {error}",
                retryable=error not in _FOR_GOOD,
                retry_after=retry_after,
            ) from None
        except Exception as exc:  # the network, a proxy, a page that is not JSON
            raise DeliveryError(f"slack {method}: {type(exc).__name__}") from None
        return dict(response.data) if hasattr(response, "data") else dict(response)

    async def post(
        self,
        run_id: str,
        key: str,
        text: str,
        blocks: list[dict[str, Any]] | None,
        *,
        thread: bool = True,
    ) -> None:
        """Post once: a message already recorded for ``key`` is not posted again. Each message
        carries metadata naming its run and key; a post tried before whose answer was lost
        (Slack took it, then answered after the timeout) is looked for before posting again."""
        if await self.ledger.chat_message(run_id, key) is not None:
            return
        root = await self.root(run_id) if thread else None
        channel = root.channel if root is not None else await self.home(run_id)
        if await self.ledger.chat_message(run_id, f"try:{key}") is not None:
            ts = await self._posted(channel, root.ts if root is not None else None, run_id, key)
            if ts is not None:
                await self.ledger.save_chat_message(run_id, key, channel, ts)
                return
        else:
            await self.ledger.save_chat_message(run_id, f"try:{key}", channel, "")
        args: dict[str, Any] = {"channel": channel, "text": text}
        if blocks:
            args["blocks"] = blocks
        if root is not None:
            args["thread_ts"] = root.ts
        args["metadata"] = {
            "event_type": METADATA_EVENT,
            "event_payload": {"run_id": run_id, "key": key},
        }
        done = await self.call("chat.postMessage", **args)
        await self.ledger.save_chat_message(
            run_id, key, str(done.get("channel") or channel), str(done["ts"])
        )

    async def _posted(self, channel: str, thread: str | None, run_id: str, key: str) -> str | None:
        """The ``ts`` of the message for ``run_id`` and ``key`` Slack already has, if any (read
        back by its metadata from the thread, or from the channel for a root message)."""
        if thread is not None:
            found = await self.call(
                "conversations.replies",
                channel=channel,
                ts=thread,
                include_all_metadata="true",
                limit="200",
            )
        else:
            found = await self.call(
                "conversations.history", channel=channel, include_all_metadata="true", limit="100"
            )
        for message in found.get("messages") or []:
            meta = message.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if (
                meta.get("event_type") == METADATA_EVENT
                and payload.get("run_id") == run_id
                and payload.get("key") == key
                and message.get("ts")
            ):
                return str(message["ts"])
        return None

    async def home(self, run_id: str) -> str:
        """Where the run's thread goes: the channel its command was typed in, else ``channel``."""
        origin = await self.ledger.chat_message(run_id, "origin")
        return origin.channel if origin is not None else self.channel

    @property
    def channel(self) -> str:
        if not self.chat.channel:
            raise DeliveryError("[slack] channel is not set", retryable=False)
        return self.chat.channel

    async def root(self, run_id: str) -> Any:
        """The run's root message, posted first if it was not."""
        found = await self.ledger.chat_message(run_id, "root")
        if found is None:
            text, blocks = root_blocks(await self.ledger.get_run(run_id))
            await self.post(run_id, "root", text, blocks, thread=False)
            found = await self.ledger.chat_message(run_id, "root")
        return found

    async def update(self, run_id: str, key: str, text: str, blocks: list[dict[str, Any]]) -> None:
        found = await self.ledger.chat_message(run_id, key)
        if found is None:
            return
        await self.call("chat.update", channel=found.channel, ts=found.ts, text=text, blocks=blocks)

    # -- what each event does --------------------------------------------------------------

    async def _one(self, event: Event) -> None:
        run_id, kind = event.run_id, event.kind
        await self.root(run_id)
        if kind.startswith("run."):
            text, blocks = root_blocks(await self.ledger.get_run(run_id))
            await self.update(run_id, "root", text, blocks)
        if kind in ("gate.waiting", "question.asked", "interrupt.waiting"):
            wait = await find_wait(self.ledger, event)
            if wait is not None:
                await self._wait(wait, post=True)
            return
        if kind.endswith(".escalated"):
            await self.post(
                run_id,
                f"event:{event.seq}",
                escalation_text(event.message or kind, self.chat.deciders),
                None,
            )
            return
        if kind.endswith(".reminded"):
            await self.post(run_id, f"event:{event.seq}", f"⏰ {event.message or kind}", None)
            return
        if forge_fact(event):  # CI runs, failures, rebuilds; the pull request: a line + link
            text = fact_line(event, slack_link, esc) or kind
            await self.post(run_id, f"event:{event.seq}", text, None)
            return
        if kind.endswith(".expired"):  # a deadline's last step, told in the thread
            await self.post(run_id, f"event:{event.seq}", f"⌛ {event.message or kind}", None)
            if event.data.get("policy") == "park":
                await self._reask(event)
                return
        if kind == "run.parked" and event.data.get("policy") == "park":
            return  # told by the deadline's own message
        if kind.startswith(_WAITS) and kind.rpartition(".")[2] in _WAIT_CHANGED:
            wait_id = event.data.get("wait_id")
            for wait in await self.ledger.waits(run_id):
                if wait.wait_id == wait_id:
                    await self._wait(wait, post=False)
        if self.milestones.accepts(event) and not kind.startswith(_WAITS):
            await self.post(
                run_id, f"event:{event.seq}", milestone_text(kind, event.node, event.message), None
            )

    async def _reask(self, event: Event) -> None:
        """A wait parked at its deadline: its message loses its buttons, and it is asked again
        below, with buttons, so the thread's last word on it is the one to answer."""
        for wait in await self.ledger.waits(event.run_id):
            if wait.wait_id != event.data.get("wait_id"):
                continue
            key = f"wait:{wait.wait_id}:{wait.round}"
            root = await self.root(wait.run_id)
            text, blocks = wait_blocks(wait, root.channel if root else "")
            note = "_deadline passed: the run is parked; it is asked again below_"
            await self.update(wait.run_id, key, text, retired(blocks, note))
            await self.post(wait.run_id, f"{key}:parked", text, blocks)

    async def _wait(self, wait: Wait, *, post: bool) -> None:
        key = f"wait:{wait.wait_id}:{wait.round}"
        if not post and await self.ledger.chat_message(wait.run_id, f"{key}:parked") is not None:
            key = f"{key}:parked"  # asked again at its deadline: that message is the live one
        root = await self.root(wait.run_id)
        text, blocks = wait_blocks(wait, root.channel if root else "")
        if post:
            await self.post(wait.run_id, key, text, blocks)
        else:
            await self.update(wait.run_id, key, text, blocks)
