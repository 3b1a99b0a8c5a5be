"""The choice of release per scenario (docs/testing.md#releases): one table in code, the same in
the docs, every written scenario on a pinned release and every pinned release used. No broker runs."""
from __future__ import annotations

import re

import pytest
from broker_support import RELEASE_ENV, ROOT, SCENARIO_RELEASES, harness, release

# Scenarios not in the table: the throughput bench runs from bench/; the generated runs (random) take
# their release from their name, every covering seed on every release (test_broker_random.py).
NOT_IN_THE_SUITE = {"throughput", "random"}


def test_every_written_scenario_runs_on_a_pinned_release_and_every_release_runs_some():
    assert set(SCENARIO_RELEASES) == set(harness.SCENARIOS) - NOT_IN_THE_SUITE
    assert set(SCENARIO_RELEASES.values()) == set(harness.RELEASES)


def test_the_docs_table_is_the_code_table():
    text = (ROOT / "docs" / "testing.md").read_text()
    section = text.split("{ #releases }", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d+\.\d+\.\d+) \|$", section, flags=re.MULTILINE))
    assert rows == SCENARIO_RELEASES
    for version in harness.RELEASES:
        assert f"**{version}**" in section


def test_the_environment_chooses_every_scenarios_release(monkeypatch):
    monkeypatch.delenv(RELEASE_ENV, raising=False)
    assert release("filters") == SCENARIO_RELEASES["filters"]
    assert release("throughput") == harness.DEFAULT_RELEASE
    monkeypatch.setenv(RELEASE_ENV, "5.3.3")
    assert {release(name) for name in SCENARIO_RELEASES} == {"5.3.3"}


@pytest.mark.parametrize("bad", ["5.5", "five", "5.5.0-SNAPSHOT", "5..1"])
def test_a_release_that_is_not_three_numbers_is_refused(bad):
    with pytest.raises(harness.HarnessError, match="three dot-separated numbers"):
        harness.rocketmq_version(bad)


def test_each_release_has_its_own_build_directory_and_run_hash():
    first, newest = harness.RELEASES[0], harness.RELEASES[-1]
    assert harness.target(first) != harness.target(newest)
    assert harness.classpath(first) != harness.classpath(newest)
    assert harness.source_hash(first) != harness.source_hash(newest)
