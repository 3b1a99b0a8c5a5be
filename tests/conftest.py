"""Shared fixtures: conformance data (copied from ../shared so the suite stands alone)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data"

# Spark starts its Python workers with PYSPARK_PYTHON; they must be this interpreter.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

PUREPYTHON = os.environ.get("RMQFILTER_PUREPYTHON", "") not in ("", "0")


def load_jsonl(name: str) -> list[dict]:
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA
