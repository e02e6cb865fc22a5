"""A learned router: one node, several alternatives for one capability, chosen by Thompson
sampling over their past outcomes.

For each alternative the router draws ``p ~ Beta(1 + successes, 1 + failures)`` and, where
outcomes carry a quality score in [0, 1], ``q ~ Beta(1 + sum(q), 1 + sum(1 - q))`` (otherwise
``q = 1``); it picks the highest ``p * q - cost_weight * mean cost``. Drawing from the posterior
keeps exploring: an alternative with few outcomes gets a wide draw and a fair chance.

The history is this template's routed outcomes, read once per run advance. The choice is kept
by the side-effect journal, so LangGraph's replay of the node (after a gate or a question)
runs the same alternative. Under a seed (the ``router_seed`` service, or
``STAGELINE_ROUTER_SEED``) the draws are a pure function of the seed, template, node, how many
outcomes the history holds and the node's attempt: the same history gives the same choice.
"""

from __future__ import annotations

import inspect
import json
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stageline.errors import UsageError
from stageline.stages._context import StageContext
from stageline.stages._stage import Stage

__all__ = ["ROUTER_SEED_ENV", "Router", "choose", "router_stage", "thompson_scores"]

ROUTER_SEED_ENV = "STAGELINE_ROUTER_SEED"
_LOOPS_KEY = "stageline_loops"


@dataclass(frozen=True, kw_only=True)
class Router:
    """What a routed node chooses among."""

    capability: str
    alternatives: Mapping[str, Stage]
    cost_weight: float = 0.0


def router_stage(
    capability: str,
    alternatives: Mapping[str, Stage | Callable[..., Any]],
    *,
    name: str | None = None,
    cost_weight: float = 0.0,
    retry: Any = None,
    timeout: float | None = None,
) -> Stage:
    """A stage that runs one of ``alternatives`` (name -> stage or function) per node run.

    The node's retry and timeout are this stage's (the alternatives' own are not used).
    """
    if len(alternatives) < 2:
        raise UsageError(f"a router for {capability!r} needs at least two alternatives")
    if cost_weight < 0:
        raise UsageError(f"cost_weight must not be negative, got {cost_weight}")
    alts = {
        str(k): v if isinstance(v, Stage) else Stage(fn=v, name=str(k))
        for k, v in alternatives.items()
    }
    spec = Router(capability=capability, alternatives=alts, cost_weight=float(cost_weight))

    async def route(state: Any, ctx: StageContext) -> Any:
        picked = alts[await choose(spec, ctx, state)]
        result = picked.fn(state, ctx)
        return await result if inspect.isawaitable(result) else result

    label = name or f"router:{capability}"
    route.__name__ = route.__qualname__ = label.replace(":", "_")
    made = Stage(fn=route, name=label, capability=capability, metadata={"router": spec})
    return made.with_options(retry=retry, timeout=timeout) if retry or timeout else made


def thompson_scores(rows: Sequence[Any], spec: Router, rng: random.Random) -> dict[str, float]:
    """One posterior draw per alternative from its past outcomes (see the module docstring)."""
    by_alt: dict[str, list[Any]] = {a: [] for a in spec.alternatives}
    for row in rows:
        if row.alternative in by_alt and row.status in ("succeeded", "failed"):
            by_alt[row.alternative].append(row)
    graded = any(r.quality is not None for rs in by_alt.values() for r in rs)
    scores: dict[str, float] = {}
    for alt in sorted(by_alt):
        seen = by_alt[alt]
        wins = sum(1 for r in seen if r.status == "succeeded")
        p = rng.betavariate(1 + wins, 1 + len(seen) - wins)
        q = 1.0
        if graded:
            qs = [
                min(1.0, max(0.0, float(r.quality)))
                for r in seen
                if r.status == "succeeded" and r.quality is not None
            ]
            q = rng.betavariate(1 + sum(qs), 1 + len(qs) - sum(qs))
        costs = [float(r.cost) for r in seen]
        mean_cost = sum(costs) / len(costs) if costs else 0.0
        scores[alt] = p * q - spec.cost_weight * mean_cost
    return scores


def _seed(ctx: StageContext) -> str | None:
    seed = ctx.services.get("router_seed") if isinstance(ctx.services, Mapping) else None
    if seed is None:
        seed = os.environ.get(ROUTER_SEED_ENV) or None
    return None if seed is None else str(seed)


async def choose(spec: Router, ctx: StageContext, state: Any) -> str:
    """The alternative this node run uses: drawn once, kept across replays."""
    loops = state.get(_LOOPS_KEY) if isinstance(state, Mapping) else None
    key = (
        f"router:{spec.capability}:a{ctx.attempt}:t{ctx.try_no}"
        f":{json.dumps(loops or {}, sort_keys=True)}"
    )
    journal = ctx.run.journal

    async def pick() -> dict[str, Any]:
        history_of = getattr(journal, "router_history", None)
        history = await history_of(ctx.run.template) if history_of is not None else []
        rows = [o for o in history if o.node == ctx.node and o.capability == spec.capability]
        seed = _seed(ctx)
        rng = (
            random.Random(f"{seed}|{ctx.run.template}|{ctx.node}|{len(rows)}|{key}")
            if seed is not None
            else random.Random()
        )
        scores = thompson_scores(rows, spec, rng)
        choice = max(sorted(scores), key=lambda a: scores[a])
        journal.node_event(
            node=ctx.node,
            kind="router.chose",
            level="info",
            category="lifecycle",
            message=f"{spec.capability}: chose {choice!r}",
            data={
                "capability": spec.capability,
                "alternative": choice,
                "scores": {a: round(s, 4) for a, s in scores.items()},
                "history": len(rows),
            },
        )
        return {"alternative": choice}

    picked = await ctx.effect(key, pick, idempotent=True)
    choice = str(picked["alternative"])
    if choice not in spec.alternatives:  # the template changed its alternatives since
        raise UsageError(f"router {spec.capability!r} has no alternative {choice!r} any more")
    setattr(ctx, "alternative", choice)  # noqa: B010 - read back by the node wrapper
    return choice
