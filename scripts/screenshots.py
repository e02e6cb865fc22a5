"""Screenshots of the dashboard's main pages into ``docs/screenshots/`` (shown in the README).

A real ``stageline serve`` over a fresh project (the browser tests' fixture), runs seeded
through the API (a gate waiting, a question set, a finished run with a round of changes, a
retried run and a failed one), then each page in Debian's Chromium at 1280 pixels wide.

Run: ``PYTHONPATH=src python scripts/screenshots.py [--out docs/screenshots]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

from dashboard_browser import screenshots, seed_runs  # noqa: E402
from server_fixtures import make_project  # noqa: E402


def main(out: Path) -> list[Path]:
    with tempfile.TemporaryDirectory(prefix="stageline-shots-") as folder:
        server = make_project(Path(folder) / "project", templates=("flaky.py",))
        server.start()
        try:
            seed_runs(server)
            return screenshots(server, out)
        finally:
            server.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    for path in main(parser.parse_args().out):
        print(path)
