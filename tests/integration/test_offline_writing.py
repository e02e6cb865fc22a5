"""The offline model writes a post a person can read: blog_post run offline through the runner
on a real SQLite file, to the editor's gate and approved. The post has the topic as its title,
the outline's headings as its sections, sentences (not word lists), says it is offline, and is
the same text every time; after a note the redraft says what it did about the note."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stageline.config import Settings
from stageline.ledger import RunStatus
from stageline.llm import OfflineModel
from stageline.runner import Runner

TOPIC = "retry budgets for durable pipelines"


async def _post(
    settings: Settings, run_id: str, note: str | None = None
) -> tuple[str, dict[str, Any]]:
    async with Runner.open(settings, deliver=False, model=OfflineModel()) as runner:
        waiting = await runner.start("blog_post", {"topic": TOPIC}, run_id=run_id)
        assert waiting.status is RunStatus.WAITING
        if note is not None:
            again = await runner.request_changes(run_id, note=note)
            assert again.status is RunStatus.WAITING
        done = await runner.approve(run_id)
    assert done.status is RunStatus.SUCCEEDED
    return Path(done.state["post_path"]).read_text(encoding="utf-8"), done.state


def _prose(post: str) -> list[str]:
    """The post's paragraphs of running text: not headings, the byline, notes or the mark."""
    body = post.split("## Reviewers' notes")[0]
    return [
        p.strip()
        for p in body.split("\n\n")
        if p.strip() and not p.lstrip().startswith(("#", "*", "_", "[offline model"))
    ]


async def test_the_offline_post_reads_as_sentences_under_the_outlines_headings(
    sqlite_settings: Settings,
) -> None:
    post, state = await _post(sqlite_settings, "one")
    assert post.startswith(f"# {TOPIC[0].upper()}{TOPIC[1:]}\n"), post
    assert "[offline model: deterministic text, no LLM was called]" in post

    headings = [
        line[2:].split(":")[0].strip() for line in state["outline"].splitlines() if line[:2] == "- "
    ]
    assert len(headings) >= 4, state["outline"]
    shown = [line[3:] for line in post.splitlines() if line.startswith("## ")]
    assert shown[: len(headings)] == headings, (shown, headings)
    notes = [line[2:] for line in state["research"].splitlines() if line.startswith("- ")]
    assert len(notes) >= 3 and all(n.endswith(".") for n in notes), state["research"]
    assert sum(note in post for note in notes) >= 3  # the draft draws on the research

    paragraphs = _prose(post)
    assert len(paragraphs) >= len(headings) + 1  # an introduction, then a paragraph a section
    for paragraph in paragraphs:
        sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z\"])", paragraph)
        for sentence in sentences:
            assert sentence[0].isupper() or sentence[0] == '"', sentence
            assert sentence.endswith((".", '."')), sentence
    words = re.findall(r"[a-z'-]+", post.lower())
    for a, b, c in zip(words, words[1:], words[2:], strict=False):
        assert not a == b == c, (a, post)
    for critic in ("critic_a", "critic_b"):  # the critics speak of this draft's sections
        line = next(line for line in post.splitlines() if line.startswith(f"- **{critic}**"))
        assert any(f'"{h}"' in line for h in shown), line

    again, _ = await _post(sqlite_settings, "two")
    assert again == post  # deterministic: same topic, same text


async def test_a_redraft_says_what_it_did_about_the_editors_note(sqlite_settings: Settings) -> None:
    plain, _ = await _post(sqlite_settings, "plain")
    note = "Make it shorter and add an example."
    post, _ = await _post(sqlite_settings, "noted", note=note)
    assert post != plain
    assert f'This version answers the editor\'s note: "{note}"' in post
    assert "## An example" in post and "## An example" not in plain
    assert "## What changed after the editor's note" in post
    assert len(_prose(post)[1]) < len(_prose(plain)[1])  # its sections are shorter
