"""Shared fixtures, defined once here: the data directory, a writable golden store, one SparkSession.

Tests never import this module (pytest loads it); plain helpers they import are in
``tests/helpers.py``.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import DATA
from hypothesis import settings

# Spark starts its Python workers with PYSPARK_PYTHON; they must be this interpreter.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Spark binds to the machine's first non-loopback address unless told otherwise;
# tests talk to nothing but this machine's loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# Hypothesis: "fast" keeps `make test` quick; HYPOTHESIS_PROFILE=long digs deeper.
settings.register_profile("fast", max_examples=150, deadline=None)
settings.register_profile("long", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture
def golden_copy(tmp_path) -> Path:
    """A writable copy of the golden store (``tests/data/golden_store``), to corrupt or append to."""
    root = tmp_path / "store"
    shutil.copytree(DATA / "golden_store", root)
    return root


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole test session: local[2], UI off, few shuffle partitions.

    Fails (never skips) with a clear message when Java or PySpark is missing.
    """
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.fail("Spark tests need Java 17: no `java` on PATH and JAVA_HOME is not set", pytrace=False)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        pytest.fail(f"Spark tests need pyspark (pip install -e '.[spark]'): {exc}", pytrace=False)
    import pyspark_udfs

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmqfilter-tests")
        .config("spark.ui.enabled", "false")
        # The native-selector tests build very wide plans; 1 GB (the default) runs out
        # once the whole suite has shared the session.
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pyspark_udfs.register(session)
    yield session
    session.stop()
