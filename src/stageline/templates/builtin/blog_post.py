"""The built-in ``blog_post`` template: research -> outline -> draft -> two critics -> an
editor's approval gate -> publish. Changes the editor asks for go back to ``draft``."""

from __future__ import annotations

import asyncio
import hashlib
import operator
import re
from typing import Annotated, Any, Required, TypedDict

from stageline.errors import InputError
from stageline.stages import StageContext, stage
from stageline.templates._builder import Template

__all__ = ["BlogState", "template"]

DEFAULT_AUDIENCE = "engineers"


class BlogState(TypedDict, total=False):
    topic: Required[str]
    audience: str
    research: str
    outline: str
    feedback: str
    """An editor's note (from a gate) the next draft must address."""
    draft: str
    reviews: Annotated[list[dict[str, Any]], operator.add]
    score: float
    summary: str
    post_path: str


async def _ask(ctx: StageContext, prompt: str, *, system: str) -> str:
    """Call the run's model and record what the call cost on this node."""
    done = await ctx.model.complete(prompt, system=system)
    ctx.metric("input_tokens", done.input_tokens)
    ctx.metric("output_tokens", done.output_tokens)
    ctx.metric("llm_latency", done.latency)
    return done.text


def _title(topic: str) -> str:
    topic = " ".join(topic.split())
    return topic[:1].upper() + topic[1:]


@stage(name="blog.research", capability="research", cost_class="medium")
async def research(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """Research notes on the topic for the audience, from the run's model."""
    topic = (state.get("topic") or "").strip()
    if not topic:
        raise InputError("blog_post needs a non-empty `topic` input")
    audience = state.get("audience") or DEFAULT_AUDIENCE
    notes = await _ask(
        ctx,
        f"Research notes on: {topic}\n"
        f"Audience: {audience}. List the key facts, claims worth checking, trade-offs, "
        "and one concrete example, as short bullet points.",
        system="You are a careful technical researcher. Prefer facts you can stand behind.",
    )
    ctx.log.info("research done", topic=topic, audience=audience)
    return {"topic": topic, "audience": audience, "research": notes}


@stage(name="blog.outline", capability="planning", cost_class="low")
async def outline(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """An outline of the post: section headings from the research notes."""
    text = await _ask(
        ctx,
        f"Outline a blog post titled: {_title(state['topic'])}\n"
        f"Audience: {state.get('audience', DEFAULT_AUDIENCE)}. Give 4-6 section headings, "
        f"each with one line on what it covers.\n\nResearch notes:\n{state.get('research', '')}",
        system="You are an editor who plans clear, well-ordered posts.",
    )
    return {"outline": text}


@stage(name="blog.draft", capability="writing", cost_class="high", retry=2, timeout=300)
async def draft(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """The post's draft in Markdown, from the outline and research (and an editor's feedback)."""
    prompt = (
        f"Write the blog post: {_title(state['topic'])}\n"
        f"Audience: {state.get('audience', DEFAULT_AUDIENCE)}. Follow the outline, use the "
        "research, write in plain Markdown without a top-level title.\n\n"
        f"Outline:\n{state.get('outline', '')}\n\nResearch notes:\n{state.get('research', '')}"
    )
    feedback = state.get("feedback")
    if feedback:
        prompt += f"\n\nEditor's feedback on the previous draft (address all of it):\n{feedback}"
        ctx.log.info("drafting with the editor's feedback", feedback=feedback)
    text = await _ask(ctx, prompt, system="You are a technical writer: concrete, honest, brief.")
    return {"draft": text}


def _score(critic: str, draft_text: str, reply: str) -> float:
    """The critic's ``SCORE: x`` if it gave one, else a stable score derived from the draft."""
    found = re.search(r"score\s*[:=]\s*(0(?:\.\d+)?|1(?:\.0+)?)\b", reply, re.IGNORECASE)
    if found:
        return float(found.group(1))
    digest = hashlib.sha256(f"{critic}\n{draft_text}".encode()).digest()
    return round(0.5 + 0.5 * int.from_bytes(digest[:4], "big") / 0xFFFFFFFF, 2)


async def _review(state: BlogState, ctx: StageContext, critic: str, focus: str) -> dict[str, Any]:
    text = state.get("draft", "")
    reply = await _ask(
        ctx,
        f"Review this draft for {focus}: {_title(state['topic'])}\n"
        "Give two or three specific notes, then a line `SCORE: x` with x between 0 and 1."
        f"\n\nDraft:\n{text}",
        system=f"You are a demanding reviewer who checks {focus}.",
    )
    score = _score(critic, text, reply)
    ctx.metric("review_score", score)
    return {"reviews": [{"critic": critic, "score": score, "notes": reply.strip()}]}


@stage(name="blog.critic_a", capability="review", cost_class="medium", writes=("reviews",))
async def critic_a(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """A review of the draft for accuracy and evidence, with a score."""
    return await _review(state, ctx, "critic_a", "accuracy and evidence")


@stage(name="blog.critic_b", capability="review", cost_class="medium", writes=("reviews",))
async def critic_b(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """A review of the draft for clarity and readability, with a score."""
    return await _review(state, ctx, "critic_b", "clarity and readability")


def _latest_reviews(state: BlogState) -> list[dict[str, Any]]:
    """One review per critic, the newest: a redraft appends a fresh round to ``reviews``."""
    latest = {r["critic"]: r for r in state.get("reviews", [])}
    return [latest[name] for name in sorted(latest)]


@stage(name="blog.aggregate", capability="scoring", cost_class="none")
async def aggregate(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """The critics' newest reviews merged into one score and summary."""
    reviews = _latest_reviews(state)
    if not reviews:
        return {"score": 0.0, "summary": "no reviews"}
    mean = round(sum(float(r["score"]) for r in reviews) / len(reviews), 3)
    lowest = min(reviews, key=lambda r: float(r["score"]))
    summary = (
        f"{len(reviews)} reviews, mean score {mean:.2f}; "
        f"lowest {lowest['critic']} ({float(lowest['score']):.2f})"
    )
    ctx.metric("score", mean)
    ctx.metric("quality", mean)  # the capability outcome's quality score (router, stats)
    ctx.log.info(summary, score=mean)
    return {"score": mean, "summary": summary}


def render_post(state: BlogState) -> str:
    """The post as Markdown: title, byline, draft, then the critics' notes."""
    lines = [
        f"# {_title(state['topic'])}",
        "",
        f"*For {state.get('audience', DEFAULT_AUDIENCE)}. "
        f"Review score {float(state.get('score', 0.0)):.2f}.*",
        "",
        state.get("draft", "").strip(),
        "",
        "## Reviewers' notes",
        "",
    ]
    for review in _latest_reviews(state):
        notes = " ".join(str(review["notes"]).split())
        lines.append(f"- **{review['critic']}** ({float(review['score']):.2f}): {notes}")
    if state.get("summary"):
        lines += ["", f"_{state['summary']}_"]
    return "\n".join(lines) + "\n"


@stage(name="blog.publish", capability="publish", cost_class="none")
async def publish(state: BlogState, ctx: StageContext) -> dict[str, Any]:
    """The post written as Markdown into the run's folder."""
    path = ctx.run_dir / "post.md"
    text = render_post(state)

    def write() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    await asyncio.to_thread(write)
    ctx.metric("post_chars", len(text))
    ctx.log.info("post published", path=str(path))
    return {"post_path": str(path)}


template = Template(
    "blog_post",
    state=BlogState,
    version="2",
    description="Research, outline and draft a blog post, review it twice, an editor approves, "
    "publish Markdown.",
)
template.require_input("topic", "what the post is about")
template.add_stage(research).add_stage(outline).add_stage(draft)
template.add_stage(critic_a).add_stage(critic_b).add_stage(aggregate)
template.add_gate(
    "editor_approval",
    changes_to="draft",
    max_changes=3,
    show=("summary", "score", "draft"),
    deadline="2d",
    on_deadline="park",
)
template.add_stage(publish)
template.add_sequence("research", "outline", "draft")
template.add_fanout("draft", ["critic_a", "critic_b"], join="aggregate")
template.add_sequence("aggregate", "editor_approval", "publish")
