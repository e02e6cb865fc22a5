"""The HTTP API's cost per advance: a 10-node run started through ``POST /v1/runs`` (wait)
against ``Runner.start`` on the same runner, in one process (httpx over the ASGI app: no
socket, so the figure is the API layer itself: routing, auth, validation, JSON).

Run: ``python benchmarks/bench_api_inprocess.py [--runs N] [--rounds R]``. Rounds interleave
the two; the figures are medians over rounds (the overhead: the median of each round's
difference), and the best round against the best round, which a busy machine disturbs least.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

import httpx

from stageline.config import load_settings
from stageline.ledger import hash_token, new_token
from stageline.runner import Runner
from stageline.server import create_app
from stageline.templates import Template


class State(TypedDict, total=False):
    n: int


def bench_template() -> Template:
    template = Template("bench_api", state=State)
    for i in range(10):

        async def step(state: State, ctx: Any) -> State:
            return {"n": state.get("n", 0) + 1}

        template.add_stage(f"n{i}", step)
    template.add_sequence(*[f"n{i}" for i in range(10)])
    return template


async def main(runs: int, rounds: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-api-"))
    settings = load_settings(cwd=folder, env={"STAGELINE_HOME": str(folder / ".stageline")})
    async with Runner.open(settings) as runner:
        # Known to the runner by name (as a templates-folder file would be, minus its lookup,
        # which both paths would pay alike).
        runner.load(bench_template())
        secret = new_token()
        await runner.ledger.create_token("bench", "decide", hash_token(secret))
        app = create_app(settings, runner=runner)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://bench",
                headers={"Authorization": f"Bearer {secret}"},
            ) as client,
        ):
            body = {"template": "bench_api", "inputs": {"n": 0}, "wait": True}

            async def through_api() -> None:
                answer = await client.post("/v1/runs", json=body)
                assert answer.status_code == 201 and answer.json()["run"]["status"] == "succeeded"

            async def through_runner() -> None:
                # In a task with a fresh context, as each request has: LangGraph leaves
                # context variables behind in the task that ran a graph, which slow the next
                # run in that task (a caller looping in one task pays that, not the runner).
                work = runner.start("bench_api", {"n": 0})
                summary = await asyncio.create_task(work, context=contextvars.Context())
                assert str(summary.status) == "succeeded"

            async def bare_request() -> None:
                answer = await client.get("/v1/whoami")
                assert answer.status_code == 200

            await through_api()  # warm up: template load, graph compile, first queries
            await through_runner()
            api_ms: list[float] = []
            runner_ms: list[float] = []
            bare_ms: list[float] = []
            for _ in range(rounds):
                for work, out in (
                    (through_runner, runner_ms),
                    (through_api, api_ms),
                    (bare_request, bare_ms),
                ):
                    began = time.perf_counter()
                    for _ in range(runs):
                        await work()
                    out.append((time.perf_counter() - began) / runs * 1000)
    api, direct = statistics.median(api_ms), statistics.median(runner_ms)
    paired = statistics.median(a - r for a, r in zip(api_ms, runner_ms, strict=True))
    return {
        "runner_ms": direct,
        "api_ms": api,
        "overhead_ms": paired,
        "ratio": api / direct,
        "best_overhead_ms": min(api_ms) - min(runner_ms),
        "request_ms": statistics.median(bare_ms),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="advances per round and engine")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(main(args.runs, args.rounds))
    print(f"10-node run, one advance each ({args.runs} x {args.rounds} rounds, medians)")
    print(f"  Runner.start in process:  {result['runner_ms']:7.2f} ms")
    print(f"  POST /v1/runs (wait):     {result['api_ms']:7.2f} ms")
    print(
        f"  API overhead per advance: {result['overhead_ms']:7.2f} ms median of rounds, "
        f"{result['best_overhead_ms']:.2f} ms best against best "
        f"(x{result['ratio']:.2f}; aim: at most 2 ms)"
    )
    print(
        "  one bare request (GET /v1/whoami: routing, token check, JSON): "
        f"{result['request_ms']:.2f} ms"
    )
