"""The offline composer: a goal's intent planned backwards over the catalog into a plan.

From the keys the goal must produce, it picks a stage that writes each, then stages for what
those read and cannot do without (a key no stage writes becomes a required input), then the
stages that fill what they may read (research, an outline) from what is at hand. It adds the
critics the goal asks for, in parallel, merged by a scoring stage; a revision loop back to the
stage that made what they review, bounded by the rounds asked; an approval gate before the
stage that publishes; a question set first. Every choice is deterministic: ties go to the stage
of the same family (``blog.`` beside ``blog.``), then to the cheaper one, then by name.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stageline.architect._intent import NEAR, Intent
from stageline.errors import CannotCompose
from stageline.templates import CatalogEntry

__all__ = ["Plan", "plan_goal", "template_name"]

ROUTER = "stageline.architect:revise_or_go_on"
"""The route a revision loop takes after its review (names it by import path in YAML)."""
ENRICHING = frozenset({"research", "planning", "writing"})
"""Capabilities added to fill a stage's optional reads (review, gates: only when asked)."""
_COST = {"none": 0, "low": 1, "medium": 2, "high": 3}


@dataclass(kw_only=True)
class Plan:
    """A template in the making: what the YAML will say."""

    name: str
    description: str
    nodes: dict[str, str] = field(default_factory=dict)
    """Node name -> stage ref, in order."""
    routed: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    """Node name -> (capability, the alternatives' refs) where a learned router chooses."""
    inputs: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    reducers: dict[str, str] = field(default_factory=dict)
    edges: list[tuple[str, str]] = field(default_factory=list)
    fanout: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    loops: list[dict[str, Any]] = field(default_factory=list)
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)
    questions: dict[str, dict[str, Any]] = field(default_factory=dict)
    start: str | None = None
    example: dict[str, str] = field(default_factory=dict)
    """Example inputs for the goal (``-i key=value``)."""


def _family(ref: str) -> str:
    return re.split(r"[.:]", ref, maxsplit=1)[0]


class _Planner:
    def __init__(self, intent: Intent, catalog: Sequence[CatalogEntry]) -> None:
        self.intent = intent
        self.catalog = [e for e in catalog if e.composable]
        self.chosen: list[CatalogEntry] = []
        self.inputs: list[str] = []
        self.families: list[str] = []

    # -- choosing ----------------------------------------------------------------------------

    def rank(self, entry: CatalogEntry) -> tuple[Any, ...]:
        words = set(re.findall(r"[a-z]+", f"{entry.ref} {entry.description}".lower()))
        family = _family(entry.ref)
        return (
            family not in self.families,
            -len(words & self.intent.words),
            _COST.get(entry.cost_class or "", 2),
            entry.ref,
        )

    def producers(self, key: str, *, capabilities: frozenset[str] | None = None) -> list[Any]:
        """Stages that write ``key`` without reading it (a normalizer is no producer)."""
        found = [
            e
            for e in self.catalog
            if key in e.writes
            and key not in e.reads
            and e.capability not in ("escalation", "review", "scoring")
            and (capabilities is None or e.capability in capabilities)
        ]
        return sorted(found, key=self.rank)

    def available(self) -> set[str]:
        return {k for e in self.chosen for k in e.writes} | set(self.inputs)

    def take(self, entry: CatalogEntry, visiting: frozenset[str] = frozenset()) -> None:
        """Choose ``entry`` and, first, what it cannot do without."""
        if entry in self.chosen or entry.ref in visiting:
            return
        for key in entry.requires:
            if key in self.available():
                continue
            made = [p for p in self.producers(key) if p.ref not in visiting]
            if made:
                self.take(made[0], visiting | {entry.ref})
            elif key not in self.inputs:
                self.inputs.append(key)
        self.chosen.append(entry)
        self.families.append(_family(entry.ref))

    def enrich(self) -> None:
        """Fill optional reads from stages that need nothing new, until nothing changes."""
        changed = True
        while changed:
            changed = False
            for consumer in list(self.chosen):
                for key in consumer.reads:
                    if key in self.available():
                        continue
                    for p in self.producers(key, capabilities=ENRICHING):
                        fits = set(p.requires) <= self.available()
                        if (
                            p not in self.chosen
                            and fits
                            and not set(p.reads) & set(consumer.writes)
                        ):
                            self.take(p)
                            changed = True
                            break

    def alternatives(self, entry: CatalogEntry) -> list[CatalogEntry]:
        """Other stages of ``entry``'s capability that make what it makes from no more than it
        needs: a learned router chooses among them by outcomes."""
        makes = set(entry.writes) - set(entry.reads)
        return sorted(
            (
                e
                for e in self.catalog
                if e is not entry
                and e.capability == entry.capability
                and e.tier != "agent"
                and makes <= set(e.writes)
                and set(e.requires) <= set(entry.requires) | self.available()
            ),
            key=self.rank,
        )

    def agent(self) -> CatalogEntry:
        """The agent stage a goal over a repository names best."""
        agents = sorted((e for e in self.catalog if e.tier == "agent"), key=self.rank)
        if not agents:
            raise self.refuse([("agent", "agent")])
        return agents[0]

    def refuse(self, missing: Sequence[tuple[str, str]]) -> CannotCompose:
        names = sorted({e.capability for e in self.catalog if e.capability})
        closest: list[str] = []
        for word, capability in missing:
            near = [c for c in NEAR.get(capability, ()) if c in names]
            near += difflib.get_close_matches(capability, names, n=2, cutoff=0.75)
            near += difflib.get_close_matches(word, names, n=2, cutoff=0.75)
            ranked = sorted(self.catalog, key=self.rank)
            closest += [e.ref for c in near for e in ranked if e.capability == c]
        if not closest:  # what makes a deliverable: the stages that write
            makers = [e for e in self.catalog if e.capability in ENRICHING]
            closest = [e.ref for e in sorted(makers, key=self.rank)]
        return CannotCompose(
            [c for _, c in missing], list(dict.fromkeys(closest))[:4], self.intent.goal
        )

    # -- ordering ----------------------------------------------------------------------------

    def order(self) -> list[CatalogEntry]:
        """The chosen stages, each after the stages whose writes it reads (first chosen first)."""
        placed: list[CatalogEntry] = []
        todo = list(self.chosen)
        while todo:
            for entry in todo:
                before = [
                    p
                    for p in todo
                    if p is not entry
                    and set(p.writes) & set(entry.reads)
                    and not set(entry.writes) & set(p.reads)
                ]
                if not before:
                    placed.append(entry)
                    todo.remove(entry)
                    break
            else:  # each reads what another writes: keep the order they were chosen in
                placed.extend(todo)
                break
        return placed


def _node_name(ref: str, taken: dict[str, str]) -> str:
    base = re.sub(r"\W", "_", re.split(r"[.:]", ref)[-1]).strip("_").lower() or "stage"
    name, n = base, 2
    while name in taken or name in ("end", "start"):
        name, n = f"{base}_{n}", n + 1
    return name


def template_name(goal: str) -> str:
    """A template name made from the goal's first words."""
    return _slug(goal)


def _slug(goal: str) -> str:
    words = [w for w in re.findall(r"[a-z0-9]+", goal.lower()) if w not in ("a", "an", "the")]
    return "_".join(words[:5])[:40].strip("_") or "composed"


def plan_goal(intent: Intent, catalog: Sequence[CatalogEntry], *, name: str | None = None) -> Plan:
    """The plan for ``intent`` over ``catalog``; ``CannotCompose`` names what is missing."""
    p = _Planner(intent, catalog)
    capabilities = {e.capability for e in p.catalog}
    missing = [(w, c) for w, c in intent.missing if c not in capabilities]
    if missing:
        raise p.refuse(missing)
    if not intent.keys:
        thing = intent.product or "something"
        raise p.refuse([(thing, thing)])
    for key in intent.keys:
        if key.startswith("@"):
            p.take(p.agent())
            continue
        if key in p.available():
            continue
        made = p.producers(key)
        if not made:
            raise p.refuse([(key, key)])
        p.take(made[0])
    p.enrich()
    plan = Plan(name=name or _slug(intent.goal), description=intent.goal)
    return _assemble(plan, p)


def _assemble(plan: Plan, p: _Planner) -> Plan:
    intent = p.intent
    ordered = p.order()
    chain = []
    for entry in ordered:
        node = _node_name(entry.ref, plan.nodes)
        plan.nodes[node] = entry.use
        chain.append(node)
        others = p.alternatives(entry)
        if others and entry.capability:
            plan.routed[node] = (entry.capability, [entry.use, *(o.use for o in others)])
            for other in others:
                for key in (*other.reads, *other.writes):
                    plan.types.setdefault(key, other.key_types.get(key, "any"))
    plan.inputs = list(p.inputs)
    made = {k for e in ordered for k in e.writes if k not in e.reads}
    read = any("topic" in e.reads for e in ordered)
    if intent.topic and read and "topic" not in plan.inputs and "topic" not in made:
        plan.inputs.insert(0, "topic")  # what the goal is "about" is an input
    for entry in ordered:
        for key in (*entry.reads, *entry.writes):
            plan.types.setdefault(key, entry.key_types.get(key, "any"))
    for entry in ordered:
        for key, kind in entry.key_types.items():
            if entry.tier == "agent":
                plan.types.setdefault(key, kind)
    for key in plan.inputs:
        if plan.types.get(key, "any") == "any":
            plan.types[key] = "str"  # an input given on the command line is text
    _review(plan, p, ordered, chain)
    if intent.topic and "topic" in plan.inputs:
        plan.example["topic"] = intent.topic
    return plan


def _review(plan: Plan, p: _Planner, ordered: list[CatalogEntry], chain: list[str]) -> None:
    """Critics, a revision loop, a gate and questions around the chain, then its edges."""
    intent = p.intent
    content = next((e for e in reversed(ordered) if e.capability in ENRICHING), None)
    publish = [n for n, e in zip(chain, ordered, strict=True) if e.capability == "publish"]
    after_gate = publish[-1] if publish else None
    body = [n for n in chain if n != after_gate]
    reviewers = max(intent.reviewers, 1 if intent.rounds else 0)
    judge: str | None = None
    split = len(body)
    if reviewers and content is not None:
        content_node = plan_node(plan, content)
        split = body.index(content_node) + 1
        judge = _critics(plan, p, content, content_node, reviewers)
        if intent.rounds:
            plan.loops.append({"name": "revisions", "head": content_node, "max": intent.rounds})
    tail = body[split:]
    if intent.approver is not None:
        who = re.sub(r"\W", "_", intent.approver)
        gate = f"{who}_approval" if who else "approval"
        options: dict[str, Any] = {"show": [k for k in ("summary", "score") if k in plan.types]}
        if content is not None:
            options["changes_to"] = plan_node(plan, content)
            options["max_changes"] = max(intent.rounds, 3)
            plan.types.setdefault("feedback", "str")
            options["show"].append(content.writes[0] if content.writes else "summary")
        plan.gates[gate] = options
        tail.append(gate)
    if after_gate:
        tail.append(after_gate)
    head = body[:split]
    if intent.asks:
        asked = intent.ask_about or ("scope",)
        plan.questions["clarify"] = {
            "questions": [
                {
                    "id": a,
                    "text": f"About the {a.replace('_', ' ')}: what should the work know?",
                }
                for a in asked
            ],
            "answers": "answers",
        }
        plan.types.setdefault("answers", "dict")
        plan.types.setdefault("qa_history", "list")
        head.insert(0, "clarify")
    plan.start = head[0] if head else (tail[0] if tail else None)
    for a, b in itertools.pairwise(head):
        plan.edges.append((a, b))
    after = tail[0] if tail else "END"
    if judge is None:
        if head and tail:
            plan.edges.append((head[-1], tail[0]))
    elif intent.rounds:
        plan.routes.append(
            {"from": judge, "by": ROUTER, "to": {"revise": plan.loops[-1]["head"], "done": after}}
        )
        plan.loops[-1]["on_exhausted"] = after
    elif tail:
        plan.edges.append((judge, tail[0]))
    for a, b in itertools.pairwise(tail):
        plan.edges.append((a, b))
    if tail:
        plan.edges.append((tail[-1], "END"))
    elif judge is None and head:
        plan.edges.append((head[-1], "END"))
    elif judge is not None and not intent.rounds:
        plan.edges.append((judge, "END"))


def plan_node(plan: Plan, entry: CatalogEntry) -> str:
    return next(n for n, use in plan.nodes.items() if use == entry.use)


def _critics(plan: Plan, p: _Planner, content: CatalogEntry, after: str, count: int) -> str:
    """``count`` critics of what ``content`` writes, in parallel, merged by a scoring stage;
    the node whose result a revision loop reads."""
    made = set(content.writes)
    critics = sorted(
        (e for e in p.catalog if e.capability == "review" and made & set(e.reads)), key=p.rank
    )
    if not critics:
        raise p.refuse([("review", "review")])
    lists = [k for k in critics[0].writes if critics[0].key_types.get(k) == "list"]
    parallel = [c for c in critics if lists and set(c.writes) <= set(lists)]
    if count > 1 and len(parallel) < count:
        parallel = (parallel * count)[:count] if parallel else []
    chosen = parallel[:count] if count > 1 and parallel else critics[:1]
    nodes = []
    for critic in chosen:
        node = _node_name(critic.ref, plan.nodes)
        plan.nodes[node] = critic.use
        nodes.append(node)
        for key in (*critic.reads, *critic.writes):
            plan.types.setdefault(key, critic.key_types.get(key, "any"))
    scorers = sorted(
        (e for e in p.catalog if e.capability == "scoring" and set(lists) & set(e.reads)),
        key=p.rank,
    )
    join = None
    if not scorers and len(nodes) > 1:  # parallel critics need a stage that merges them
        for node in nodes[1:]:
            del plan.nodes[node]
        nodes = nodes[:1]
    if scorers and len(nodes) > 1:
        join = _node_name(scorers[0].ref, plan.nodes)
        plan.nodes[join] = scorers[0].use
        for key in (*scorers[0].reads, *scorers[0].writes):
            plan.types.setdefault(key, scorers[0].key_types.get(key, "any"))
    for key in lists:
        plan.types[key] = "list"
        plan.reducers[key] = "append"
    if join is None:
        plan.edges.append((after, nodes[0]))
        return nodes[0]
    plan.fanout.append({"from": after, "to": nodes, "join": join})
    assert join is not None
    return join
