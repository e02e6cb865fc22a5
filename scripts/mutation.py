"""Mutation score per module: runs mutmut (config in pyproject.toml) and prints a table.

    python scripts/mutation.py                      # every module of [tool.mutmut] only_mutate
    python scripts/mutation.py stages._human ledger._sql   # some of them
    python scripts/mutation.py --report             # only print the scores of the last runs
    python scripts/mutation.py --max-children 1 runner._human   # one test process at a time

Scores are killed (or timed out) over tested mutants, as mutmut counts them. Slow on 2 cores
(tens of minutes per module), so it is not part of CI; the survivors are listed with
`mutmut results` and shown with `mutmut show NAME`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KILLED = {"killed", "timeout"}
NOT_TESTED = {"skipped", "not checked", "no tests"}


def configured_modules() -> list[str]:
    """`stages._human` for each file in mutmut's `only_mutate`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    return [
        ".".join(Path(path).relative_to("src/stageline").with_suffix("").parts)
        for path in config["only_mutate"]
    ]


def run(module: str, max_children: int | None = None) -> int:
    """One module's mutants; mutmut keeps results in ./mutants between runs."""
    command = [sys.executable, "-m", "mutmut", "run", f"stageline.{module}.*"]
    if max_children is not None:
        command[4:4] = ["--max-children", str(max_children)]
    return subprocess.call(command, cwd=ROOT)


def statuses() -> dict[str, Counter[str]]:
    """Mutant statuses per module, as `mutmut results --all true` prints them."""
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    by_module: dict[str, Counter[str]] = {}
    for line in out.splitlines():
        match = re.match(r"\s*stageline\.(\S+?)\.x[_ǁ]\S*: (.+)$", line)
        if match:
            by_module.setdefault(match[1], Counter())[match[2].strip()] += 1
    return by_module


def report(modules: list[str]) -> bool:
    """The table; True when every module scores 80% or more."""
    found = statuses()
    ok = True
    print(f"{'module':28} {'mutants':>8} {'killed':>7} {'survived':>9} {'other':>6} {'score':>7}")
    for module in modules:
        counts = found.get(module, Counter())
        tested = sum(n for status, n in counts.items() if status not in NOT_TESTED)
        killed = sum(counts[s] for s in KILLED)
        survived = counts["survived"]
        other = tested - killed - survived
        score = 100 * killed / tested if tested else 0.0
        ok = ok and score >= 80
        print(
            f"{module:28} {sum(counts.values()):>8} {killed:>7} {survived:>9} {other:>6} "
            f"{score:>6.1f}%"
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="e.g. stages._human (default: all configured)")
    parser.add_argument("--report", action="store_true", help="print the last runs' scores only")
    parser.add_argument(
        "--max-children", type=int, help="test processes mutmut runs at once (default: one a core)"
    )
    args = parser.parse_args()
    modules = args.modules or configured_modules()
    unknown = sorted(set(modules) - set(configured_modules()))
    if unknown:
        parser.error(f"not in [tool.mutmut] only_mutate: {', '.join(unknown)}")
    if not args.report:
        for module in modules:
            run(module, args.max_children)
    return 0 if report(modules) else 1


if __name__ == "__main__":
    sys.exit(main())
