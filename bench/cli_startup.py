"""Wall-clock time of `slaguard` commands an SRE types, each a fresh process.

`slaguard rollback` mid-incident, `status`, `--help`: their time is mostly imports. Each
command runs `--repeat` times against a SQLite audit DB made for the run; the table gives
the median and the slowest, and the ratio to a bare interpreter started in the same run
(`python -c pass`), the floor no command can go under. `--baseline-src DIR` also times
the same commands from another checkout (e.g. a `git worktree` of an older commit) and
gives this tree's ratio to it. Prints a table, or JSON with --json.

    .venv/bin/python bench/cli_startup.py [--repeat 7] [--baseline-src DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: list[tuple[str, list[str]]] = [
    ("--help", ["--help"]),
    ("rollback", ["rollback", "--reason", "bench", "--db", "{db}"]),
    ("resume", ["resume", "--db", "{db}"]),
    ("status", ["status", "--db", "{db}"]),
    ("history", ["history", "--db", "{db}"]),
    ("incidents", ["incidents", "--db", "{db}"]),
    ("db current", ["db", "current", "--db", "{db}"]),
    ("fleet show", ["fleet", "show"]),
    ("audit decisions", ["audit", "decisions", "--since", "-1h", "--db", "{db}"]),
]


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src), COLUMNS="120")
    env.pop("SLAGUARD_DB", None)
    return env


def _time(argv: list[str], env: dict[str, str], cwd: Path, answers: bool = True) -> float:
    """Seconds for one run; a command must exit 0 and print its answer (a no-op is no
    measurement)."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0 or (answers and not done.stdout):
        raise SystemExit(f"error: {' '.join(argv[3:])} exited {done.returncode}: {done.stderr}")
    return elapsed


def measure(src: Path, workdir: Path, repeat: int) -> dict[str, list[float]]:
    """Seconds per run of each command, run from the checkout `src`."""
    env = _env(src)
    db = workdir / f"bench-{src.name}.db"
    cli = [sys.executable, "-c", "from slaguard.cli.main import main; main()"]
    subprocess.run([*cli, "db", "upgrade", "--db", str(db)], env=env, cwd=workdir, check=True,
                   capture_output=True)  # fmt: skip
    times: dict[str, list[float]] = {"python -c pass": []}
    for _ in range(repeat):
        times["python -c pass"].append(
            _time([sys.executable, "-c", "pass"], env, workdir, answers=False)
        )
        for name, args in COMMANDS:
            argv = [*cli, *(a.format(db=db) for a in args)]
            times.setdefault(name, []).append(_time(argv, env, workdir))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument("--baseline-src", type=Path, help="another checkout to compare with")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if args.baseline_src is not None and not (args.baseline_src / "slaguard").is_dir():
        parser.error(f"--baseline-src: {args.baseline_src} holds no slaguard/ package")
    with tempfile.TemporaryDirectory() as tmp:
        ours = measure(ROOT, Path(tmp), args.repeat)
        base = None if args.baseline_src is None else measure(args.baseline_src, Path(tmp),
                                                              args.repeat)  # fmt: skip
    floor = statistics.median(ours["python -c pass"])
    rows = []
    for name, runs in ours.items():
        row = {"command": name, "median_s": statistics.median(runs), "max_s": max(runs),
               "x_python": statistics.median(runs) / floor}  # fmt: skip
        if base is not None:
            row["baseline_median_s"] = statistics.median(base[name])
            row["x_baseline"] = row["median_s"] / row["baseline_median_s"]
        rows.append(row)
    if args.json:
        meta = {"machine": platform.node(), "python": platform.python_version(),
                "cpus": os.cpu_count(), "repeat": args.repeat}  # fmt: skip
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return
    head = f"{'command':<18} {'median':>8} {'max':>8} {'x python':>9}"
    if base is not None:
        head += f" {'baseline':>9} {'x base':>7}"
    print(head)
    for r in rows:
        line = (
            f"{r['command']:<18} {r['median_s']:>7.2f}s {r['max_s']:>7.2f}s {r['x_python']:>9.1f}"
        )
        if base is not None:
            line += f" {r['baseline_median_s']:>8.2f}s {r['x_baseline']:>7.2f}"
        print(line)


if __name__ == "__main__":
    main()
