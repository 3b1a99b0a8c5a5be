#!/usr/bin/env python3
"""``make matrix SEEDS="3 17 ..."``: generated runs and their checks, seed after seed (docs/testing.md#matrix).

For each seed: ``run.py random --seed N`` into ``build/matrix/seed-N/`` (the run's outputs, kept),
then tests/broker/test_broker_random.py against that run alone (``RMQFILTER_RANDOM_RUN``). Without
seeds, 30 fresh ones (from the system's random source, printed first so a run can be repeated).
Prints one line per seed (its seconds, and each failing check) and a summary naming each failing
seed and check; exits 1 when any failed. A seed whose scenario failed because the broker's JVM crashed
in native code (``run.JVM_CRASHED``: RocketMQ's defect, not a check's) runs once more, as ``make test``
runs again a scenario the harness gave up on, and the summary names it. ``--rocketmq VERSION`` is
passed to run.py.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from run import JVM_CRASHED  # the harness (run.py), beside this script

DEFAULT_COUNT = 30


def failing_checks(junit: Path) -> list[str]:
    """The names of the failed or erroring tests in a pytest JUnit XML report."""
    if not junit.exists():
        return ["pytest wrote no report"]
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out.append(case.get("name"))
    return out


def run_seed(seed: int, out: Path, rocketmq: str | None) -> tuple[float, list[str]]:
    """Runs one seed's scenario and its checks: (seconds of the scenario, failing checks)."""
    started = time.time()
    cmd = [sys.executable, str(HERE / "run.py"), "random", "--seed", str(seed), "--out", str(out)]
    if rocketmq:
        cmd += ["--rocketmq", rocketmq]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.time() - started
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return seconds, [f"scenario: {last[:300]}"]
    junit = out / "checks.xml"
    env = {**os.environ, "RMQFILTER_RANDOM_RUN": str(out)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "broker and not spark",
                    f"--junitxml={junit}", str(HERE / "test_broker_random.py")],
                   cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return seconds, failing_checks(junit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", nargs="*", type=int, help=f"seeds to run (default: {DEFAULT_COUNT} fresh ones)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "matrix")
    parser.add_argument("--rocketmq", metavar="VERSION")
    args = parser.parse_args(argv)
    seeds = args.seeds or [random.SystemRandom().randrange(1, 10**6) for _ in range(DEFAULT_COUNT)]
    print(f"matrix: {len(seeds)} seed(s): {' '.join(map(str, seeds))}", flush=True)
    failed: dict[int, list[str]] = {}
    total = 0.0
    judge_crashed: dict[int, str] = {}
    for seed in seeds:
        out = args.out / f"seed-{seed}"
        seconds, checks = run_seed(seed, out, args.rocketmq)
        total += seconds
        if len(checks) == 1 and checks[0].startswith("scenario: ") and JVM_CRASHED in checks[0]:
            # the judge died in native code (a broker's defect, docs/testing.md#matrix): once more, as
            # make test runs a scenario the harness gave up on; the first attempt is kept beside
            judge_crashed[seed] = checks[0].removeprefix("scenario: ")
            print(f"seed {seed}: the broker's JVM crashed (scenario {seconds:.0f} s): {judge_crashed[seed]}; "
                  "running it again", flush=True)
            shutil.rmtree(out.with_name(out.name + "-crashed"), ignore_errors=True)
            out.rename(out.with_name(out.name + "-crashed"))
            seconds, checks = run_seed(seed, out, args.rocketmq)
            total += seconds
        print(f"seed {seed}: {'ok' if not checks else 'FAILED'} (scenario {seconds:.0f} s)"
              + "".join(f"\n    {c}" for c in checks), flush=True)
        if checks:
            failed[seed] = checks
    print(f"---- matrix: {len(seeds) - len(failed)} of {len(seeds)} seed(s) passed; scenarios took {total:.0f} s "
          f"({total / len(seeds):.0f} s a seed)")
    for seed, crash in judge_crashed.items():
        print(f"RAN AGAIN seed {seed}: {crash}")
    for seed, checks in failed.items():
        print(f"FAILED seed {seed}: {', '.join(checks)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
