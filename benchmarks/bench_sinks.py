"""What a webhook costs a foreground command: a 10-node run and the runner's close, with no
sink, a webhook that answers, and one that never answers (SQLite, one process).

    python benchmarks/bench_sinks.py [--rounds 5] [--exit-timeout 1.5]

Prints medians: the run's wall time and the close (what a command pays after its run).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))

from loopback_hook import Endpoint

from stageline.config import load_settings, with_overrides
from stageline.runner import Runner
from stageline.templates import Template


class S(TypedDict, total=False):
    n: int


async def step(state: S, ctx: Any) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


def ten() -> Template:
    made = Template("ten", state=S)
    names = [f"n{i}" for i in range(10)]
    for name in names:
        made.add_stage(name, step)
    return made.add_sequence(*names)


async def once(sinks: tuple[dict[str, Any], ...], grace: float) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(cwd=Path(tmp), env={"STAGELINE_HOME": tmp})
        settings = with_overrides(settings, sinks=sinks, sink_exit_timeout=grace)
        template = ten()
        async with Runner.open(settings) as runner:
            began = time.perf_counter()
            await runner.start(template, {})
            ran = time.perf_counter() - began
            closing = time.perf_counter()
        return ran, time.perf_counter() - closing


async def main(rounds: int, grace: float) -> None:
    answering, hanging = Endpoint("ok"), Endpoint("hang")
    cases = {
        "no sink": (),
        "webhook that answers": ({"type": "webhook", "format": "json", "url": answering.url},),
        "webhook that hangs": (
            {"type": "webhook", "format": "json", "url": hanging.url, "timeout": 30},
        ),
    }
    try:
        print(f"{'case':24} {'run (ms)':>10} {'close (ms)':>11}")
        for name, sinks in cases.items():
            got = [await once(sinks, grace) for _ in range(rounds)]
            run = statistics.median(g[0] for g in got) * 1000
            close = statistics.median(g[1] for g in got) * 1000
            print(f"{name:24} {run:10.1f} {close:11.1f}")
    finally:
        answering.close()
        hanging.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--exit-timeout", type=float, default=1.5)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.exit_timeout))
