"""Budgets: how they are read and merged, which limit a run or node has used up, and the
budget gate a node waits at (approve grants the amount asked; reject stops the run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest

from direct_run import BudgetJournal, DirectRun, decision
from stageline.errors import UsageError
from stageline.llm import OfflineModel
from stageline.stages import (
    Budget,
    BudgetRejected,
    RunContext,
    StageContext,
    live_overrun,
    overrun,
    state_hash,
)
from stageline.templates import Template


class S(TypedDict, total=False):
    topic: str
    text: str


# -- reading and merging --------------------------------------------------------------------


def test_a_budget_is_read_from_a_mapping_as_floats() -> None:
    read = Budget.of(
        {
            "tokens": 100,
            "cost": "2.5",
            "ask_tokens": 50,
            "ask_cost": None,
            "nodes": {"draft": {"tokens": 5}, 3: {"cost": 1}, "skip": None},
        }
    )
    assert read == Budget(
        tokens=100.0,
        cost=2.5,
        ask_tokens=50.0,
        nodes={"draft": Budget(tokens=5.0), "3": Budget(cost=1.0)},
    )
    assert isinstance(read.tokens, float)
    assert Budget.of({"nodes": None}) == Budget()
    assert Budget.of(None) is None
    given = Budget(tokens=1)
    assert Budget.of(given) is given


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5, "a budget is a mapping of tokens/cost/nodes, got 5"),
        (["tokens"], "a budget is a mapping of tokens/cost/nodes, got ['tokens']"),
        (
            {"tokenz": 5, "tokens": 1},
            "unknown budget field 'tokenz'; use tokens, cost, ask_tokens, ask_cost, nodes",
        ),
        (
            {"zz": 1, "aa": 2},
            "unknown budget field 'aa'; use tokens, cost, ask_tokens, ask_cost, nodes",
        ),
        ({"tokens": True}, "budget tokens must be a positive number, got True"),
        ({"cost": 0}, "budget cost must be a positive number, got 0"),
        ({"ask_tokens": -1}, "budget ask_tokens must be a positive number, got -1"),
        ({"ask_cost": "inf"}, "budget ask_cost must be a positive number, got 'inf'"),
        ({"tokens": float("nan")}, "budget tokens must be a positive number, got nan"),
        ({"nodes": {"a": {"tokens": 0}}}, "budget tokens must be a positive number, got 0"),
    ],
)
def test_a_budget_that_is_not_one_is_refused_naming_why(value: Any, message: str) -> None:
    with pytest.raises(UsageError) as info:
        Budget.of(value)
    assert str(info.value) == message


def test_a_budget_over_another_takes_its_limits_where_it_sets_them() -> None:
    base = Budget(
        tokens=5, cost=1, ask_tokens=2, nodes={"a": Budget(tokens=1), "b": Budget(cost=1)}
    )
    top = Budget(tokens=9, ask_cost=3, nodes={"b": Budget(tokens=7)})
    assert base.over(top) == Budget(
        tokens=9,
        cost=1,
        ask_tokens=2,
        ask_cost=3,
        nodes={"a": Budget(tokens=1), "b": Budget(tokens=7)},
    )
    assert base.over(None) is base


def test_a_budget_as_a_dict_holds_what_is_set_and_reads_back() -> None:
    budget = Budget(tokens=100, ask_cost=0.5, nodes={"a": Budget(cost=1.0)})
    assert budget.to_dict() == {"tokens": 100, "ask_cost": 0.5, "nodes": {"a": {"cost": 1.0}}}
    assert Budget.of(budget.to_dict()) == budget
    assert Budget().to_dict() == {}


# -- which limit is used up -----------------------------------------------------------------


def over(scope: str, measure: str, limit: float, used: float, ask: float) -> dict[str, Any]:
    return {"scope": scope, "measure": measure, "limit": limit, "used": used, "ask": ask}


def test_a_limit_is_used_up_once_usage_reaches_it() -> None:
    budget = Budget(tokens=100)
    assert overrun(budget, "a", {"tokens": 99.5}, {}, {}) is None
    assert overrun(budget, "a", {"tokens": 100}, {}, {}) == over("run", "tokens", 100, 100, 100)
    assert overrun(budget, "a", {}, {}, {}) is None  # nothing used yet
    assert overrun(Budget(cost=0.5), "a", {"tokens": 10}, {}, {}) is None  # no cost yet
    assert overrun(Budget(), "a", {"tokens": 10**9, "cost": 10**9}, {}, {}) is None


def test_grants_raise_the_limit_and_a_gate_asks_the_base_amount_again() -> None:
    budget = Budget(tokens=100, cost=2)
    granted = {"run:tokens": 50.0}
    assert overrun(budget, "a", {"tokens": 149}, {}, granted) is None
    assert overrun(budget, "a", {"tokens": 150}, {}, granted) == over(
        "run", "tokens", 150, 150, 100
    )
    assert overrun(budget, "a", {"tokens": 150, "cost": 2}, {}, {"run:cost": 1.0}) == over(
        "run", "tokens", 100, 150, 100
    )


def test_a_gate_asks_what_the_budget_says_to_ask() -> None:
    budget = Budget(tokens=100, cost=2, ask_tokens=30, ask_cost=0.5)
    assert overrun(budget, "a", {"cost": 2}, {}, {}) == over("run", "cost", 2, 2, 0.5)
    assert overrun(budget, "a", {"tokens": 100}, {}, {}) == over("run", "tokens", 100, 100, 30)


def test_a_node_budget_counts_that_nodes_usage_only() -> None:
    budget = Budget(tokens=1000, nodes={"draft": Budget(cost=1, ask_cost=2)})
    node_used = {"cost": 1.0}
    assert overrun(budget, "edit", {"cost": 5}, node_used, {}) is None  # not draft's budget
    assert overrun(budget, "draft", {"cost": 0.5}, node_used, {}) == over(
        "node:draft", "cost", 1, 1, 2
    )
    assert overrun(budget, "draft", {}, node_used, {"node:draft:cost": 1.0}) is None
    assert overrun(budget, "draft", {"tokens": 1000}, node_used, {}) == over(
        "run", "tokens", 1000, 1000, 1000
    )  # the run's limit first


# -- the budget gate ------------------------------------------------------------------------


async def spend(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "spent"}


def spending(node: str = "draft") -> Template:
    template = Template("spending", state=S)
    template.add_stage(node, spend)
    return template


async def test_a_used_up_run_budget_asks_at_a_gate_and_approval_grants_the_ask() -> None:
    used_up = over("run", "tokens", 150.0, 200.0, 150.0)
    journal = BudgetJournal([used_up, None])
    run = DirectRun(spending(), attempt=2, journal=journal)
    asked = await run.start({"topic": "t"})
    assert asked is not None and asked["task_id"]
    assert asked == {
        "kind": "gate",
        "gate": "budget",
        "node": "draft",
        "attempt": 2,
        "state_hash": state_hash({"topic": "t"}),
        "deadline": 86400.0,
        "on_deadline": ["remind", "escalate", "park"],
        "changes_to": None,
        "reject_to": None,
        "changes_left": None,
        "show": {"budget": "the run used 200 of its 150 tokens; approve 150 more tokens?"},
        "budget": used_up,
        "task_id": asked["task_id"],
    }
    assert "text" not in await run.state()  # the node waits before it runs
    assert await run.respond(decision(asked, token="tok-7")) is None
    assert journal.grants == [("tok-7", "run:tokens", 150.0)]
    assert (await run.state())["text"] == "spent"
    assert [c[:2] for c in journal.checks] == [("draft", asked["task_id"])] * 3


async def test_a_used_up_node_budget_asks_at_that_nodes_budget_gate() -> None:
    node_cost = over("node:draft", "cost", 0.5, 0.75, 0.25)
    journal = BudgetJournal([node_cost])
    run = DirectRun(spending(), journal=journal)
    asked = await run.start({})
    assert asked is not None and asked["gate"] == "budget:draft"
    described = "node 'draft' used 0.75 of its 0.5 in cost; approve 0.25 more in cost?"
    assert asked["show"] == {"budget": described}
    assert await run.respond(decision(asked, token=None)) is None
    assert journal.grants == [("", "node:draft:cost", 0.25)]


async def test_rejecting_a_budget_gate_stops_the_run_naming_the_limit() -> None:
    journal = BudgetJournal([over("run", "tokens", 100.0, 120.0, 100.0)])
    run = DirectRun(spending(), journal=journal)
    asked = await run.start({})
    assert asked is not None
    expected = (
        "budget gate 'budget' rejected (the run used 120 of its 100 tokens; "
        "approve 100 more tokens?): too dear"
    )
    with pytest.raises(BudgetRejected) as info:
        await run.respond(decision(asked, "reject", note="too dear"))
    assert str(info.value) == expected
    assert info.value.failure_phase == "budget"
    assert journal.grants == []

    run = DirectRun(spending(), journal=BudgetJournal([over("run", "cost", 1.0, 1.0, 1.0)]))
    asked = await run.start({})
    assert asked is not None
    with pytest.raises(BudgetRejected) as info:
        await run.respond(decision(asked, "reject"))
    assert str(info.value).endswith("approve 1 more in cost?)")  # no note, nothing after


async def test_a_budget_gate_refuses_changes_and_stale_decisions() -> None:
    journal = BudgetJournal([over("run", "tokens", 100.0, 120.0, 100.0), None])
    run = DirectRun(spending(), journal=journal)
    asked = await run.start({})
    assert asked is not None
    again = await run.respond(decision(asked, "changes", note="less", token="tok-2"))
    refused = {"token": "tok-2", "reason": "this gate takes no (more) changes"}
    assert again == {**asked, "refused": refused}
    again = await run.respond(decision(asked, attempt=5))
    assert again is not None
    assert again["refused"]["reason"].startswith("stale: the decision is for attempt 5")
    assert journal.grants == []
    assert await run.respond(decision(asked)) is None
    assert len(journal.grants) == 1


def context(journal: Any) -> StageContext:
    run = RunContext(
        run_id="r",
        attempt=1,
        template="t",
        services={},
        journal=journal,
        run_dir=Path("unused"),
        model=OfflineModel(),
    )
    return StageContext(run=run, node="agent", task_id="task-9")


async def test_spending_while_running_is_checked_against_the_same_limits() -> None:
    used_up = over("run", "cost", 1.0, 1.2, 1.0)
    journal = BudgetJournal([used_up])
    spent = {"input_tokens": 70, "output_tokens": 30.5, "cost": 0.2, "calls": 3}
    assert await live_overrun(context(journal), spent) == used_up
    assert journal.checks == [("agent", "task-9", {"tokens": 100.5, "cost": 0.2})]
    journal = BudgetJournal([])
    assert await live_overrun(context(journal), {}) is None
    assert journal.checks == [("agent", "task-9", {"tokens": 0.0, "cost": 0.0})]


async def test_without_a_budget_nothing_is_checked() -> None:
    from direct_run import Journal

    assert await live_overrun(context(Journal()), {"cost": 10**6}) is None
