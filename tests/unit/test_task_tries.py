"""``TaskTries`` sees each try of a task (a RetryPolicy's), and only the tasks' own runs: not
the runnables a node calls, not a subgraph's graph run; a subgraph's nodes under their tasks."""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.runnables import RunnableLambda
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import RetryPolicy

from stageline.runner._task_tries import TaskTries


class Count(TypedDict, total=False):
    n: int


async def test_each_try_of_each_task_and_nothing_else() -> None:
    tries = [0]
    echo = RunnableLambda(lambda value: value, name="flaky")  # the node's name, inside it

    def flaky(state: Count) -> dict[str, Any]:
        echo.invoke(1)
        tries[0] += 1
        if tries[0] < 3:
            raise ConnectionError(f"drop {tries[0]}")
        return {"n": 1}

    inner = StateGraph(Count)
    inner.add_node("flaky", flaky, retry_policy=RetryPolicy(initial_interval=0, jitter=False))
    inner.add_edge(START, "flaky")
    outer = StateGraph(Count)
    outer.add_node("sub", inner.compile(name="sub"))
    outer.add_node("after", lambda state: {"n": 2})
    outer.add_edge(START, "sub")
    outer.add_edge("sub", "after")
    seen = TaskTries()
    config: Any = {"configurable": {"thread_id": "t"}, "callbacks": [seen]}
    tasks: dict[str, str] = {}
    graph = outer.compile(checkpointer=InMemorySaver())
    async for _ns, chunk in graph.astream({}, config, stream_mode="tasks", subgraphs=True):
        tasks[chunk["name"]] = chunk["id"]
    flaky_tries = seen.take(tasks["flaky"])
    assert [t.error and str(t.error) for t in flaky_tries] == ["drop 1", "drop 2", None]
    assert all(t.finished is not None and t.started <= t.finished for t in flaky_tries)
    assert len(seen.take(tasks["sub"])) == 1 and len(seen.take(tasks["after"])) == 1
    assert seen.take(tasks["flaky"]) == []  # taken once
