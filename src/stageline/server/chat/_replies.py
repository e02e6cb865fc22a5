"""Replies in a run's Slack thread: each answers what the run waits for, and each gets an
answer only its writer sees (recorded, already answered and by whom, not a decider, or what
could not be matched, with the form offered).

A reply answers the oldest question set waiting: a set of one question by the whole text; a
larger set by one line per question, ``N: answer`` (its number, from 1) or ``ID: answer``.
Failing that, it answers the one interrupt the run waits at (as text; a ``HumanInterrupt``'s
``response``, where its config allows one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from stageline.errors import AnswerInvalid
from stageline.ledger import WaitKind, WaitStatus
from stageline.server.chat._render import question_blocks, questions_of
from stageline.server.chat._runtime import ChatRuntime
from stageline.server.chat._settings import actor_of
from stageline.stages import validate_answers

__all__ = ["match_reply", "reply"]

_LINE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*[:.)]\s*(.*)$")


def match_reply(questions: Sequence[Mapping[str, Any]], text: str) -> dict[str, Any] | None:
    """The answers a reply gives, one per question, or None when it cannot be matched."""
    if len(questions) == 1:
        return {str(questions[0]["id"]): text.strip()} if text.strip() else None
    ids = [str(q["id"]) for q in questions]
    answers: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        found = _LINE.match(line)
        if found is None:
            return None
        key, value = found.group(1), found.group(2).strip()
        qid = ids[int(key) - 1] if key.isdigit() and 0 < int(key) <= len(ids) else key
        if qid not in ids or qid in answers:
            return None
        answers[qid] = value
    return answers or None


async def reply(chat: ChatRuntime, event: Mapping[str, Any], advancer: Any) -> None:
    """Answer with the reply ``event`` what its run's thread waits for, and tell its writer."""
    channel, uid = str(event.get("channel") or ""), str(event.get("user") or "")
    run_id = await chat.runner.ledger.chat_thread_run(channel, str(event["thread_ts"]))
    if run_id is None:
        return
    if not chat.chat.may_decide(uid):
        await chat.tell(
            channel,
            uid,
            "You are not one of the people allowed to answer here "
            "([slack] deciders); your reply answered nothing.",
        )
        return
    pending = await chat.runner.pending(run_id)
    sets = [w for w in pending if w.kind is WaitKind.QUESTION]
    asks = [
        w
        for w in pending
        if w.kind is WaitKind.INTERRUPT
        and (not w.payload.get("human") or "response" in w.inbox_allows)
    ]
    text = _unescape(str(event.get("text") or ""))
    actor = actor_of({"id": uid, "name": await _name(chat, uid)})
    if sets:
        wait = sets[0]
        answers = match_reply(questions_of(wait), text)
        if answers is None:
            await _offer_form(chat, channel, uid, wait)
            return
        try:
            checked = validate_answers(questions_of(wait), answers)
        except AnswerInvalid as exc:
            await chat.tell(channel, uid, f"Your reply answered nothing: {exc}")
            return
        work = chat.runner.answer(run_id, checked, question_id=wait.wait_id, actor=actor)
        said = f"Recorded your answer to the questions at {wait.node}."
    elif len(asks) == 1:
        wait = asks[0]
        value = [{"type": "response", "args": text}] if wait.payload.get("human") else text
        work = chat.runner.respond(run_id, value, wait_id=wait.wait_id, actor=actor)
        said = f"Recorded your answer at {wait.name}."
    else:
        gates = [w.name for w in pending if w.kind is WaitKind.GATE]
        await chat.tell(channel, uid, await _nothing_waits(chat, run_id, len(asks), gates))
        return

    async def done() -> None:
        await work
        await chat.tell(channel, uid, said)

    await chat.carry(
        advancer.run(done()), lambda exc: chat.tell(channel, uid, f"Nothing was changed: {exc}")
    )


async def _offer_form(chat: ChatRuntime, channel: str, uid: str, wait: Any) -> None:
    """A reply that matched no question: say how to answer, with the form's button."""
    ids = ", ".join(f"{n}: {q['id']}" for n, q in enumerate(questions_of(wait), 1))
    text = (
        "Your reply answered nothing: answer one question per line as `N: answer` or "
        f"`ID: answer` ({ids}), or use the form."
    )
    _, blocks = question_blocks(wait, channel)
    await chat.call(
        "chat.postEphemeral",
        channel=channel,
        user=uid,
        text=text,
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": text}}, *blocks],
    )


async def _nothing_waits(chat: ChatRuntime, run_id: str, asks: int, gates: Sequence[str]) -> str:
    """What to tell a reply when the run waits for no answer it could give."""
    if gates:
        return f"This run waits at gate {gates[0]}: decide with its message's buttons."
    if asks > 1:
        return "This run waits at several places; answer each from its own message's buttons."
    waits = await chat.runner.ledger.waits(run_id)
    if any(w.kind is WaitKind.CI and w.status is WaitStatus.PENDING for w in waits):
        return "This run waits on CI, which GitHub completes; your reply answered nothing."
    settled = [w for w in waits if w.status in (WaitStatus.DECIDED, WaitStatus.APPLIED)]
    if settled:
        last = max(settled, key=lambda w: w.decided_at or 0)
        return (
            f"Already answered by {last.actor or 'someone'} "
            f"({last.decision or 'answered'}); your reply answered nothing."
        )
    return "Nothing in this run waits for an answer; your reply answered nothing."


async def _name(chat: ChatRuntime, uid: str) -> str | None:
    """A Slack user's name (``users.info``), for the record of what they answered."""
    found = await chat.call("users.info", user=uid)
    user = (found or {}).get("user") or {}
    name = user.get("name") or (user.get("profile") or {}).get("display_name")
    return str(name) if name else None


def _unescape(text: str) -> str:
    """A message's text as typed: Slack escapes ``&``, ``<`` and ``>``."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
