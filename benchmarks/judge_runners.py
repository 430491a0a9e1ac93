"""The judge's two runners, timed: what isolation costs a learner per `judge.py` run.

``judge.py test`` runs the tests and the learner's file together in one child process (the
in-child runner); ``judge.py test --isolated`` and ``judge.py verify`` run the tests in the judge
and the file in a child behind ``practice/proxy.py`` (the isolated runner), where every call into
the file is a round trip. For each exercise this runs ``judge.py solution N --json`` both ways,
``--repeat`` times each, alternating, and prints the median wall time and the median CPU time (the
judge and every process it waited for: user + system) with the ratio isolated / in-child. Both
columns are measured in the same run, so a busy machine slows both.

``--learner`` times what a learner runs instead: ``judge.py test N`` on the reference copied into a
throwaway workspace (the in-child runner, the verdict recorded), median CPU time per exercise.

    python benchmarks/judge_runners.py [--exercises 21 25 31] [--repeat 3] [--learner] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JUDGE = ROOT / "practice" / "judge.py"


def exercises() -> list[str]:
    """Every exercise number, from the judge's own list."""
    out = subprocess.run([sys.executable, str(JUDGE), "list", "--json"], capture_output=True, text=True,
                         check=True, timeout=300)
    return [row["number"] for row in json.loads(out.stdout)]


def judged(args: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """One ``judge.py ARGS --json``: (wall seconds, CPU seconds of it and its children, verdict)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(JUDGE), *args, "--json"], capture_output=True, text=True,
                          timeout=900, env=env)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    try:
        verdict = json.loads(proc.stdout)["verdict"]
    except (ValueError, KeyError):
        verdict = f"no report (exit {proc.returncode})"
    return wall, cpu, verdict


def timed_run(number: str, isolated: bool) -> tuple[float, float, str]:
    """One ``judge.py solution N``, under the isolated runner or not."""
    return judged(["solution", number] + (["--isolated"] if isolated else []))


def learner_run(number: str, workspace: Path) -> tuple[float, str]:
    """One ``judge.py test N`` on the workspace's file: (CPU seconds, verdict)."""
    _, cpu, verdict = judged(["test", number], env={**os.environ, "NANO_ENGINE_WORKSPACE": str(workspace)})
    return cpu, verdict


def measure_learner(number: str, repeat: int) -> dict:
    """``judge.py test N`` on the reference, copied into a throwaway workspace: median CPU of ``repeat`` runs."""
    folder = next(p for p in (ROOT / "practice").iterdir() if p.is_dir() and p.name.split("_", 1)[0] == number)
    with tempfile.TemporaryDirectory(prefix="judge_bench_") as tmp:
        shutil.copyfile(folder / "solution.py", Path(tmp) / f"{folder.name}.py")
        cpus, verdicts = zip(*(learner_run(number, Path(tmp)) for _ in range(repeat)), strict=True)
    return {"exercise": number, "test_cpu_s": round(statistics.median(cpus), 3), "verdicts": sorted(set(verdicts))}


def measure(number: str, repeat: int) -> dict:
    runs: dict[bool, list[tuple[float, float, str]]] = {False: [], True: []}
    for _ in range(repeat):
        for isolated in (False, True):
            runs[isolated].append(timed_run(number, isolated))
    row: dict = {"exercise": number}
    for isolated, name in ((False, "in_child"), (True, "isolated")):
        walls, cpus, verdicts = zip(*runs[isolated], strict=True)
        row[f"{name}_wall_s"] = round(statistics.median(walls), 2)
        row[f"{name}_cpu_s"] = round(statistics.median(cpus), 2)
        row[f"{name}_verdicts"] = sorted(set(verdicts))
    row["wall_ratio"] = round(row["isolated_wall_s"] / row["in_child_wall_s"], 2)
    row["cpu_ratio"] = round(row["isolated_cpu_s"] / row["in_child_cpu_s"], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercises", nargs="*", help="exercise numbers (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per exercise and runner (median)")
    parser.add_argument("--learner", action="store_true",
                        help="time `judge.py test N` on the reference in a throwaway workspace instead")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    numbers = args.exercises or exercises()
    rows = []
    for i, number in enumerate(numbers, 1):
        print(f"[{i}/{len(numbers)}] exercise {number} ...", file=sys.stderr, flush=True)
        rows.append((measure_learner if args.learner else measure)(number, args.repeat))
    if args.json:
        print(json.dumps({"load_average": os.getloadavg(), "repeat": args.repeat, "rows": rows}, indent=1))
        return 0
    if args.learner:
        print(f"judge.py test N on the reference (throwaway workspace): median CPU of {args.repeat} runs "
              "(user + system of the judge and its children)")
        for r in rows:
            print(f"{r['exercise']:>3}  {r['test_cpu_s']:>7.3f} s   {'/'.join(r['verdicts'])}")
        print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0
    print(f"judge.py solution N: median of {args.repeat} runs each; CPU = user + system of the judge and its children")
    print(f"{'ex':>3}  {'in-child wall':>13}  {'isolated wall':>13}  {'ratio':>5}   {'in-child CPU':>12}  "
          f"{'isolated CPU':>12}  {'ratio':>5}   verdicts")
    for r in rows:
        verdicts = "/".join(sorted(set(r["in_child_verdicts"]) | set(r["isolated_verdicts"])))
        print(f"{r['exercise']:>3}  {r['in_child_wall_s']:>12.2f}s  {r['isolated_wall_s']:>12.2f}s  "
              f"{r['wall_ratio']:>5.2f}   {r['in_child_cpu_s']:>11.2f}s  {r['isolated_cpu_s']:>11.2f}s  "
              f"{r['cpu_ratio']:>5.2f}   {verdicts}")
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
