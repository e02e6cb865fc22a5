"""A goal's intent, read without a model: what it must produce, who reviews it and how many
times, whether a person approves, what to ask first, how many rounds of revision.

The reading is deterministic and plain: words the goal uses, looked up in small tables. A goal
that asks for an action stageline knows of but no stage can do (translate, deploy, ...) names
that capability, so the composer can refuse it by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ACTIONS", "DELIVERABLES", "NEAR", "Intent", "read_goal"]

DELIVERABLES: dict[str, tuple[str, ...]] = {
    "blog post": ("draft", "post_path"),
    "post": ("draft", "post_path"),
    "article": ("draft", "post_path"),
    "a draft": ("draft",),
    "the draft": ("draft",),
    "outline": ("outline",),
    "research notes": ("research",),
    "research": ("research",),
    "notes": ("research",),
    "implementation plan": ("plan",),
    "plan": ("plan",),
    "wiki": ("@agent",),
}
"""A noun of the goal -> the state keys it is made of (``@capability``: a stage of it)."""

ACTIONS: dict[str, str] = {
    "translat": "translation",
    "summari": "summarization",
    "deploy": "deployment",
    "release": "deployment",
    "email": "notification",
    "send": "notification",
    "notify": "notification",
    "tweet": "social",
    "illustrat": "image",
    "image": "image",
    "picture": "image",
    "video": "video",
    "transcri": "transcription",
    "podcast": "audio",
    "invoice": "billing",
    "pay": "billing",
    "scrap": "crawling",
    "crawl": "crawling",
}
"""Word stems of actions that need a capability of their own (a stage of it)."""

NEAR: dict[str, tuple[str, ...]] = {
    "translation": ("writing",),
    "summarization": ("writing", "scoring"),
    "deployment": ("ci", "publish"),
    "notification": ("publish",),
    "social": ("publish", "writing"),
    "image": ("writing",),
    "video": ("writing",),
    "transcription": ("research", "writing"),
    "audio": ("writing",),
    "billing": ("publish",),
    "crawling": ("research",),
}
"""Capabilities the catalog may have that come closest to one it lacks."""

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a": 1, "an": 1}
_REVIEW = re.compile(
    r"\b(?:(?P<n>\d+|one|two|three|four|five|six|a|an)\s+)?"
    r"(?:independent\s+|parallel\s+|different\s+)?(?:critics?|reviewers?|reviews)\b"
)
_REVIEWED = re.compile(r"\b(?:reviewed|critiqued|review(?:ing)?|critique)\b")
_ROUNDS = re.compile(
    r"\b(?:at most|up to|no more than|max(?:imum)?(?: of)?)\s+"
    r"(?P<n>\d+|one|two|three|four|five|six)\s+(?:rounds?|revisions?|times|iterations?|passes)\b"
)
_REVISE = re.compile(r"\b(?:revise[sd]?|revision|iterate|rework|redraft|until)\b")
_APPROVE = re.compile(
    r"\b(?:(?:an?|the|my|our)\s+(?P<who>[a-z]+(?: [a-z]+)?)\s+(?:approves?|signs? off|okays?)|"
    r"approv(?:al|e|es|ed)|sign[- ]off|signs? off)\b"
)
_ASK = re.compile(
    r"\b(?:ask(?:s|ing)?|clarify(?:ing)?|questions?)\b(?:[^.]*?\babout\s+(?P<about>[^.;]+))?"
)
_ABOUT = re.compile(r"\babout\s+(?P<topic>[^.;,]+)")
_REPO = re.compile(r"\b(?:repository|repo|codebase|checkout)\b")
_STOP = {"the", "a", "an", "its", "their", "our", "my", "what", "which", "and", "or", "first"}
_STOP |= {"then", "before", "after", "me", "us", "them", "it", "start", "begin"}


@dataclass(frozen=True, kw_only=True)
class Intent:
    """What a goal asks for."""

    goal: str
    keys: tuple[str, ...]
    """State keys the pipeline must produce (``@agent``: an agent stage's result)."""
    words: frozenset[str]
    product: str = ""
    """The goal's object as written, where no known deliverable was found (``symphony``)."""
    missing: tuple[tuple[str, str], ...] = ()
    """(word of the goal, capability) for actions no table of stageline knows a stage for."""
    reviewers: int = 0
    rounds: int = 0
    """Revision rounds: 0 means no revision loop."""
    approver: str | None = None
    """Who approves (``editor``), ``""`` for an unnamed person, None for no gate."""
    ask_about: tuple[str, ...] = ()
    asks: bool = False
    topic: str | None = None
    """What the goal is about (an example input)."""
    repository: bool = False


def _number(text: str | None, default: int) -> int:
    if text is None:
        return default
    return int(text) if text.isdigit() else _NUMBERS.get(text, default)


def _about(text: str) -> tuple[str, ...]:
    parts = re.split(r",|\band\b|\bor\b", text)
    found = []
    for part in parts:
        words = [w for w in re.findall(r"[a-z][a-z_-]*", part) if w not in _STOP]
        if words:
            found.append("_".join(words[:3]))
    return tuple(dict.fromkeys(found))


def read_goal(goal: str) -> Intent:
    """The intent of ``goal`` (English words; case and punctuation do not matter)."""
    text = " ".join(goal.lower().split())
    words = frozenset(re.findall(r"[a-z][a-z_-]*", text))
    keys: list[str] = []
    rest = text
    for noun in sorted(DELIVERABLES, key=len, reverse=True):
        if re.search(rf"\b{re.escape(noun)}s?\b", rest):
            keys.extend(DELIVERABLES[noun])
            rest = re.sub(rf"\b{re.escape(noun)}s?\b", " ", rest)
    missing = tuple(
        (word, capability) for word, capability in ACTIONS.items() if re.search(rf"\b{word}", text)
    )
    reviewers = 0
    if found := _REVIEW.search(text):
        reviewers = _number(found.group("n"), 2)
    elif _REVIEWED.search(text):
        reviewers = 1
    rounds = 0
    if found := _ROUNDS.search(text):
        rounds = _number(found.group("n"), 3)
    elif _REVISE.search(text) and reviewers:
        rounds = 3
    approver = None
    if found := _APPROVE.search(text):
        approver = found.group("who") or ""
    asks = False
    ask_about: tuple[str, ...] = ()
    if found := _ASK.search(text):
        asks = True
        ask_about = _about(found.group("about") or "")
    content = [w for w in re.findall(r"[a-z][a-z_-]*", text.split(",")[0]) if w not in _STOP]
    product = content[1] if len(content) > 1 else (content[0] if content else "")
    topic = None
    if (found := _ABOUT.search(text)) and not (asks and found.start() > text.find("ask")):
        topic = found.group("topic").strip()
    return Intent(
        goal=goal.strip(),
        keys=tuple(dict.fromkeys(keys)),
        words=words,
        product="" if keys else product,
        missing=tuple(dict.fromkeys(missing)),
        reviewers=reviewers,
        rounds=rounds,
        approver=approver,
        asks=asks,
        ask_about=ask_about,
        topic=topic,
        repository=bool(_REPO.search(text)),
    )
