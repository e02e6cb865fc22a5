"""How long a ``stageline`` command takes as a whole process, beside ``python -c pass``.

Run: ``python benchmarks/bench_cli.py [--rounds R]``. Each command runs R times (interleaved
with the baseline) in a fresh project folder whose ledger holds a few finished runs; the
figures are medians of wall-clock time, start to exit, and of the CPU time the process used
(user + system: steadier than wall time on a shared, busy machine). Bytecode is cached, as
in an installed package. Aims: ``--help`` under
0.25 s and ``runs`` under 0.5 s on a 2-CPU machine.

Where valgrind is installed, each command also runs once under ``valgrind --tool=callgrind``
and its instruction count is printed beside the times (``--no-instructions`` skips it): a
count is the same on a quiet machine and a busy one, so it shows what a change saved. Aims
(issue 28): ``--help`` at most 450 M instructions, ``runs --json`` at most 1,200 M.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "stageline.cli"]

COMMANDS: list[tuple[str, list[str], float | None]] = [
    ("python -c pass", [sys.executable, "-c", "pass"], None),
    ("stageline --help", [*CLI, "--help"], 0.25),
    ("stageline runs", [*CLI, "runs"], 0.5),
    ("stageline runs --json", [*CLI, "runs", "--json"], 0.5),
    ("stageline logs RUN --json", [*CLI, "logs", "run0", "--json"], None),
    ("stageline pending", [*CLI, "pending"], None),
    ("stageline stats", [*CLI, "stats"], None),
    ("stageline show RUN", [*CLI, "show", "run0"], None),
    ("stageline show RUN --json", [*CLI, "show", "run0", "--json"], None),
]


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one whole process."""
    began, cpu = time.perf_counter(), _cpu()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began, _cpu() - cpu


INSTRUCTION_AIMS = {"stageline --help": 450e6, "stageline runs --json": 1200e6}


def _instructions(argv: list[str], cwd: Path, env: dict[str, str]) -> float | None:
    """Instructions one whole process executes, counted by callgrind (None: it failed)."""
    out = cwd / "callgrind.out"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    text = out.read_text(encoding="utf-8") if out.exists() else ""
    out.unlink(missing_ok=True)
    found = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.MULTILINE)
    if done.returncode != 0 or found is None:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        print(f"callgrind: {' '.join(argv[1:])} exited {done.returncode}: {tail}", file=sys.stderr)
        return None
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--no-instructions", action="store_true", help="Do not count instructions (callgrind)."
    )
    args = parser.parse_args()
    count = not args.no_instructions and shutil.which("valgrind") is not None
    with tempfile.TemporaryDirectory() as folder:
        cwd = Path(folder)
        # As an installed package runs: with its bytecode cached (the set-up runs below write
        # it), so a PYTHONDONTWRITEBYTECODE in the caller's environment is dropped.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("STAGELINE_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(STAGELINE_HOME=str(cwd / ".stageline"), STAGELINE_MODEL="offline", COLUMNS="100")
        for i in range(3):
            subprocess.run(
                [*CLI, "run", "blog_post", "-i", "topic=t", "--run-id", f"run{i}"],
                cwd=cwd,
                env=env,
                stdout=subprocess.DEVNULL,
                check=False,
            )
        times: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in COMMANDS}
        for _ in range(args.rounds):
            for name, argv, _ in COMMANDS:
                times[name].append(_timed(argv, cwd, env))
        counted = {name: _instructions(argv, cwd, env) for name, argv, _ in COMMANDS if count}
    base = statistics.median(t[0] for t in times["python -c pass"])
    print(
        f"{'command':<28} {'wall s':>7} {'- baseline':>11} {'cpu s':>6} {'aim s':>6}     "
        f"{'instr M':>8} {'aim M':>6}"
    )
    for name, _, aim in COMMANDS:
        wall = statistics.median(t[0] for t in times[name])
        cpu = statistics.median(t[1] for t in times[name])
        verdict = "" if aim is None else f"{aim:>6.2f} {'ok' if wall < aim else 'OVER'}"
        line = f"{name:<28} {wall:>7.3f} {wall - base:>11.3f} {cpu:>6.3f} {verdict:<11}"
        if (done := counted.get(name)) is not None:
            line += f" {done / 1e6:>8,.0f}"
            if (most := INSTRUCTION_AIMS.get(name)) is not None:
                line += f" {most / 1e6:>6,.0f} {'ok' if done <= most else 'OVER'}"
        print(line.rstrip())
    print(
        f"(medians of {args.rounds} rounds; {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.1f})"
    )
    if not count:
        print(
            "(instructions not counted: "
            + ("--no-instructions)" if args.no_instructions else "valgrind not found)")
        )


if __name__ == "__main__":
    main()
