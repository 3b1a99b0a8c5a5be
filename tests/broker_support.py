"""The broker harness's runs, for the tests marked ``broker`` (docs/testing.md).

Each scenario runs once per source version of the harness: its outputs are kept in
``build/broker-runs/<scenario>-<hash>/`` (``hash`` covers tests/broker's pom, Java sources and
run.py), so the second ``make test`` pass (the pure-Python engines) and later runs read the same
stores. Without Java or Maven the tests fail under CI (``CI`` set) and are skipped, loudly,
elsewhere.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "broker"
RUNS = ROOT / "build" / "broker-runs"

sys.path.insert(0, str(HARNESS))
import run as harness

sys.path.remove(str(HARNESS))


def require_tools() -> None:
    """Fails under CI, skips with a loud reason elsewhere, when Java or Maven is missing."""
    missing = harness.missing_tools()
    if not missing:
        return
    reason = (f"the broker harness needs Java 17 and Maven (missing: {', '.join(missing)}); "
              "the tests that hold rmqfilter against a real RocketMQ broker did NOT run")
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    warnings.warn(reason, stacklevel=2)
    pytest.skip(reason)


@dataclass
class Run:
    """One scenario's outputs: the store copies, what was sent and received, broker.json."""

    dir: Path
    broker: dict
    sent: list[dict]
    received: list[dict]
    first: dict[str, dict[tuple[int, int], dict]] = field(default_factory=dict)

    def store_path(self, name: str = "broker-a") -> Path:
        return self.dir / "stores" / name

    def group(self, name: str) -> dict:
        return next(g for g in self.broker["groups"] if g["group"] == name)

    def subscription(self, group: dict) -> dict:
        """Store.consume's arguments for a group: SQL92 groups by their registration alone."""
        return {} if group["type"] == "SQL92" else {"tags": group["expression"]}


def load(out: Path) -> Run:
    def lines(name):
        with open(out / name, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    run = Run(out, json.loads((out / "broker.json").read_text()), lines("sent.jsonl"), lines("received.jsonl"))
    first: dict[str, dict] = collections.defaultdict(dict)
    for r in run.received:     # first deliveries: a redelivered unit keeps its first line
        first[r["group"]].setdefault((r["queue_id"], r["queue_offset"]), r)
    run.first = dict(first)
    return run


_CACHE: dict[str, Run] = {}


def scenario(name: str) -> Run:
    """The scenario's run for the harness's current sources, run now if there is none yet."""
    if name in _CACHE:
        return _CACHE[name]
    require_tools()
    out = RUNS / f"{name}-{harness.source_hash()}"
    if not (out / "broker.json").exists():
        for old in RUNS.glob(f"{name}-*"):
            shutil.rmtree(old, ignore_errors=True)
        partial = out.with_name(out.name + ".partial")
        try:
            harness.run(name, partial)
        except harness.HarnessError as e:
            pytest.fail(f"broker harness, scenario {name}: {e}", pytrace=False)
        partial.rename(out)
    _CACHE[name] = load(out)
    return _CACHE[name]
