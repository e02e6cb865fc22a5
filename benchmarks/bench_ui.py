"""The dashboard with 10,000 runs in the ledger: how long the runs list and a run page take.

One process, httpx over the ASGI app (no socket): a signed-in session asks for the first page
of runs, a page further on (by cursor), a filtered page, a search of the inputs, and the page
of a real blog_post run (graph, timeline, records, history, events). Medians over ``--repeat``
requests each. The runs are inserted through the ledger API, spread over 30 days.

Run: ``python benchmarks/bench_ui.py [--runs 10000] [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from stageline.config import load_settings
from stageline.ledger import Run, RunStatus, hash_token, new_token
from stageline.runner import Runner
from stageline.server import create_app

STATUSES = [RunStatus.SUCCEEDED] * 6 + [
    RunStatus.FAILED,
    RunStatus.WAITING,
    RunStatus.CANCELLED,
    RunStatus.REJECTED,
]


async def _fill(runner: Runner, count: int) -> float:
    began = time.perf_counter()
    now = time.time()
    for i in range(count):
        created = now - 30 * 86400 * (count - i) / count
        status = STATUSES[i % len(STATUSES)]
        ended = status not in (RunStatus.WAITING,)
        await runner.ledger.create_run(
            Run(
                run_id=f"bench{i:06d}",
                template="blog_post" if i % 3 else "sdlc",
                template_version="2+bench",
                status=status,
                inputs={"topic": f"topic {i}"},
                created_at=created,
                updated_at=created + 5,
                finished_at=created + 5 if ended else None,
                error="boom" if status is RunStatus.FAILED else None,
            )
        )
    return time.perf_counter() - began


async def _median(client: httpx.AsyncClient, url: str, repeat: int) -> tuple[float, int]:
    took = []
    size = 0
    for _ in range(repeat):
        began = time.perf_counter()
        answer = await client.get(url)
        took.append(time.perf_counter() - began)
        assert answer.status_code == 200, (url, answer.status_code, answer.text[:300])
        size = len(answer.content)
    return statistics.median(took), size


async def main(runs: int, repeat: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-ui-"))
    settings = load_settings(cwd=folder, env={"STAGELINE_HOME": str(folder / ".stageline")})
    async with Runner.open(settings) as runner:
        secret = new_token()
        await runner.ledger.create_token("bench", "admin", hash_token(secret))
        real = await runner.start("blog_post", {"topic": "a real run"}, run_id="real")
        await runner.request_changes(real.run.run_id, note="again", actor="bench")
        await runner.approve(real.run.run_id, actor="bench")
        filled = await _fill(runner, runs)
        print(f"inserted {runs} runs in {filled:.1f}s")
        app = create_app(settings, runner=runner)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://bench",
                headers={"Accept": "text/html"},
            ) as client,
        ):
            signed = await client.post("/ui/login", data={"token": secret, "next": "/ui/"})
            assert signed.status_code == 303, signed.text
            client.cookies.update(signed.cookies)
            first = await client.get("/ui/runs")
            marker = 'rel="next" href="'
            text = first.text
            later = text[text.index(marker) + len(marker) :].split('"', 1)[0].replace("&amp;", "&")
            pages = {
                "runs list, first page": "/ui/runs",
                "runs list, next page (cursor)": later,
                "runs list, failed only": "/ui/runs?status=failed",
                "runs list, template filter": "/ui/runs?template=sdlc",
                "runs list, search in inputs": "/ui/runs?q=topic%209999",
                "runs list rows (live refresh)": "/ui/runs/rows",
                "run page (blog_post, 2 rounds)": "/ui/runs/real",
                "run page live fragment": "/ui/runs/real/live",
                "inbox": "/ui/inbox",
            }
            found = {}
            for name, url in pages.items():
                took, size = await _median(client, url, repeat)
                found[name] = took
                print(f"{name:34} {took * 1000:8.1f} ms  ({size / 1024:.0f} KiB)")
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    options = parser.parse_args()
    asyncio.run(main(options.runs, options.repeat))
