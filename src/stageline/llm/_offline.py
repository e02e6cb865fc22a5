"""What the offline model writes: plain sentences built from the prompt it is given.

No model is called. The text is made from the request's subject (the first line's ``...:
subject``), the audience, and the sections of the prompt (``Research notes:``, ``Outline:``,
``Draft:``, an editor's or reviewer's note), so a pipeline's work shows in its output: research
gives notes, the outline turns them into headings, the draft writes one section per heading
from the notes, a critic points at the draft's own sections. The same prompt always gives the
same text, and every text begins with ``MARK``, so no one takes it for a model's.

It never writes ``score: x``: templates fall back to a stable score of their own offline.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["MARK", "offline_text"]

T = TypeVar("T")

MARK = "[offline model: deterministic text, no LLM was called]"

_SECTION = re.compile(r"^([A-Z][^:\n]{0,80}):\s*$")
"""A line that opens a section of the prompt, such as ``Research notes:``."""

NOTES = (
    "Getting {s} wrong is costly for {a}, and the cost tends to show up late, in production.",
    "The core idea behind {s} fits in one sentence; the rest is about when it applies.",
    "A claim worth checking: the gains from {s} appear only when failures are common enough "
    "to notice.",
    "The main trade-off with {s} is simplicity now against control later.",
    "A concrete example: a team tries {s} on one service, measures before and after, and "
    "keeps what the numbers support.",
    "Most trouble with {s} comes from defaults nobody chose on purpose.",
    "A diagram of what happens on a failure explains {s} better than a list of features.",
    "The value of {s} is best measured by the time it saves the person on call.",
)
"""Research notes: number-neutral sentences about the subject ``{s}`` for the audience ``{a}``."""

HEADINGS = (
    ("The case for {s}", "the problem it solves and who feels it"),
    ("How it works", "the moving parts, in the order a request meets them"),
    ("The trade-offs", "what it costs and what it buys"),
    ("A worked example", "one concrete case, from start to finish"),
    ("Where it goes wrong", "the ways it fails and how to spot them early"),
    ("First steps", "the smallest useful change to make first"),
)
"""Outline sections: a heading and what the section covers. The first two and the last are
always in an outline; one or two of the others join them."""

LINKS = (
    "That is the part {a} tend to ask about first.",
    "It is worth checking this against your own system before trusting it.",
    "The rest of the post builds on this.",
    "None of this needs a new tool, only a clear rule written down.",
    "This is where measurements beat opinions.",
)
"""The closing sentence of a draft's section, picked by its heading."""


@dataclass(frozen=True)
class Request:
    """A prompt, read: what it asks, about what, for whom, and its named sections."""

    verb: str
    subject: str
    audience: str
    sections: dict[str, list[str]] = field(default_factory=dict)
    rest: list[str] = field(default_factory=list)
    """The lines after the first blank line that no section holds."""

    def section(self, *starts: str) -> list[str]:
        """The lines of the first section whose name starts with one of ``starts``."""
        for name, lines in self.sections.items():
            if name.lower().startswith(starts):
                return lines
        return []


def read(prompt: str) -> Request:
    lines = prompt.strip().splitlines()
    first = lines[0].strip() if lines else ""
    verb, _, subject = first.partition(":")
    if not subject:
        verb, subject = first, ""
    audience = "readers"
    sections: dict[str, list[str]] = {}
    rest: list[str] = []
    current: list[str] | None = None
    blank = False
    for line in lines[1:]:
        if line.startswith("Audience:") and current is None:
            audience = line.removeprefix("Audience:").split(".")[0].strip() or audience
            continue
        opened = _SECTION.match(line.strip())
        if opened:
            current = sections.setdefault(opened.group(1), [])
        elif not line.strip():
            blank = True
        elif current is not None:
            current.append(line.strip())
        elif blank:
            rest.append(line.strip())
    subject = " ".join(subject.split()).rstrip(".")
    if subject[1:2].islower():  # a title's capital (``Outline a blog post titled: Gates``)
        subject = subject[:1].lower() + subject[1:]
    return Request(
        verb=verb.strip().lower(),
        subject=subject,
        audience=audience,
        sections=sections,
        rest=rest,
    )


def _pick(seed: str, options: Sequence[T], count: int) -> list[T]:
    """``count`` of ``options`` in their own order, the same ones for the same ``seed``."""
    digest = hashlib.sha256(seed.encode()).digest()
    ranked = sorted(range(len(options)), key=lambda i: (digest[i % len(digest)], i))
    return [options[i] for i in sorted(ranked[:count])]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _items(lines: Sequence[str]) -> list[str]:
    """The bullet or numbered items of a section, without their markers."""
    found = [re.sub(r"^(?:[-*•]|\d+[.)])\s+", "", line).strip() for line in lines]
    return [item for item in found if item and not item.startswith("[")]


def research(r: Request) -> str:
    notes = _pick(f"notes\n{r.subject}\n{r.audience}", NOTES, 5)
    return "\n".join(f"- {n.format(s=r.subject, a=r.audience)}" for n in notes)


def outline(r: Request) -> str:
    middle = _pick(f"outline\n{r.subject}", HEADINGS[2:-1], 2 if len(r.subject) % 2 else 1)
    chosen = [HEADINGS[0], HEADINGS[1], *(h for h in HEADINGS if h in middle), HEADINGS[-1]]
    subject = r.subject or "the topic"
    return "\n".join(
        f"- {head.format(s=subject, S=_cap(subject))}: {covers}." for head, covers in chosen
    )


def _sentence(text: str) -> str:
    text = text.strip()
    return _cap(text) if text.endswith((".", "!", "?")) else _cap(text) + "."


def draft(r: Request) -> str:
    """An introduction, one section per outline heading (drawing on the notes), and, given an
    editor's note, what this draft did about it."""
    heads = [item.partition(": ") for item in _items(r.section("outline"))]
    sections = [(h, covers.rstrip(".")) for h, _, covers in heads if h] or [(_cap(r.subject), "")]
    notes = _items(r.section("research")) or [f"This post is about {r.subject}."]
    feedback = " ".join(r.section("editor", "the reviewer", "feedback"))
    short = bool(re.search(r"\b(short|shorter|cut|brief|concise)", feedback, re.IGNORECASE))
    intro = [
        f"This post looks at {r.subject} for {r.audience}.",
        f'It has {len(sections)} sections, from "{sections[0][0]}" to "{sections[-1][0]}".'
        if len(sections) > 1
        else "",
    ]
    if feedback:
        intro.append(f'This version answers the editor\'s note: "{feedback}"')
    out = [" ".join(s for s in intro if s)]
    for i, (heading, covers) in enumerate(sections):
        body = [f"This section covers {covers}." if covers else ""]
        body.append(_sentence(notes[i % len(notes)]))
        if not short:
            link = _pick(f"link\n{heading}", LINKS, 1)[0]
            body.append(link.format(a=r.audience))
        out += [f"## {heading}", " ".join(s for s in body if s)]
    if feedback:
        done = []
        if re.search(r"\bexamples?\b", feedback, re.IGNORECASE):
            example = NOTES[4].format(s=r.subject, a=r.audience)
            out += ["## An example", example.removeprefix("A concrete example: ").capitalize()]
            done.append("An example now has a section of its own.")
        done.append(
            "Each section is cut to what it must say, and the closing sentences are gone."
            if short
            else "Each section was reread with it in mind."
        )
        out += [
            "## What changed after the editor's note",
            f'The editor asked: "{feedback}" ' + " ".join(done),
        ]
    return "\n\n".join(out)


def _focus(r: Request) -> str:
    found = re.match(r"review this \w+ for (.+)", r.verb)
    return found.group(1) if found else "gaps, risks and untested steps"


def review(r: Request) -> str:
    """Short critiques that point at the reviewed text's own sections and sentences."""
    body = r.section("draft") or r.rest
    heads = [line.lstrip("#").strip() for line in body if line.startswith("#")]
    prose = [line for line in body if line and not line.startswith(("#", "-", "[", "*"))]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", " ".join(prose)) if s.strip()]
    words = sum(len(s.split()) for s in sentences)
    mean = round(words / len(sentences)) if sentences else 0
    focus = _focus(r)
    inner = [line.lstrip("#").strip() for line in body if line.startswith("##")] or heads
    plain = [h for h in inner if "example" not in h.lower() and not h.startswith("What changed")]
    pointed = _pick(f"{focus}\n{' '.join(plain)}", plain, 1)[0] if plain else ""
    pace = (
        f"Its {len(sentences)} sentences average {mean} words, which "
        + ("reads easily." if mean <= 20 else "is long; shorter sentences would help.")
        if sentences
        else "It has no sentences to judge yet."
    )
    shape = (
        f'The text has {len(heads)} sections, from "{heads[0]}" to "{heads[-1]}", in an order '
        "that reads naturally."
        if heads
        else "The text has no sections yet, which makes it hard to follow."
    )
    if re.search(r"clarity|readab", focus):
        notes = [pace]
        if pointed:
            notes.append(f'The section "{pointed}" would be easier to follow with a short example.')
        notes.append("The headings say what each section is about, which helps a reader skim.")
    else:
        notes = [shape]
        if pointed and re.search(r"untested|risk", focus):
            notes.append(f'For {focus}: the section "{pointed}" does not say how it is tested.')
        elif pointed:
            notes.append(
                f'For {focus}: the section "{pointed}" makes a claim it does not back with a '
                "number or a source."
            )
        notes.append(pace)
    return " ".join(notes)


def plan(r: Request) -> str:
    """Steps, risks and tests for the task; given a reviewer's note, how the plan answers it."""
    steps = [
        "Read the code the task touches, and write down what must not change.",
        "Write a failing test that shows the task is not done yet.",
        "Make the smallest change that passes it, behind a setting where that is cheap.",
        "Run the whole test suite, then ask for a review of the change.",
    ]
    lines = [f"{i}. {s}" for i, s in enumerate(steps, 1)]
    lines += [
        "",
        "Risks: the change may alter behaviour that callers rely on; the test of step 2 and "
        "the full suite of step 4 are there to catch it.",
    ]
    asked = " ".join(r.section("the reviewer", "editor", "feedback"))
    if asked:
        lines += ["", "This plan answers the review: each step now says how it is tested."]
    return "\n".join(lines)


def generic(r: Request) -> str:
    subject = f" about {r.subject}" if r.subject else ""
    return (
        f"This is a placeholder answer{subject}, written without a model. "
        "Configure a chat model (STAGELINE_MODEL) for a real one."
    )


WRITERS: dict[str, Callable[[Request], str]] = {
    "research": research,
    "outline": outline,
    "write": draft,
    "review": review,
    "plan": plan,
}
"""What the offline model writes, by the first word of the request."""


def offline_text(prompt: str) -> str:
    """The offline model's reply to ``prompt``: ``MARK`` on a line, then the text."""
    r = read(prompt)
    writer = WRITERS.get(r.verb.split(" ", 1)[0], generic)
    return f"{MARK}\n\n{writer(r).strip()}"
