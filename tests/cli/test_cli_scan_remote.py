"""``rmqfilter scan --remote``'s checks that need no Spark: the connect extra, the URL, ``--master``.

Running it against a Spark Connect server: tests/spark/test_spark_connect.py.
"""
from __future__ import annotations

import sys

import pytest
from helpers import DATA

STORE = str(DATA / "golden_store")
TOPIC = "GoldenFilterTopic"


def test_cli_scan_remote_without_the_connect_extra_says_what_to_install(monkeypatch, capsys):
    import rmqfilter

    monkeypatch.setitem(sys.modules, "grpc", None)  # as if grpcio were not installed
    code = rmqfilter.main(["scan", STORE, "--topic", TOPIC, "--group", "G", "--tags", "TagA",
                     "--remote", "sc://localhost:15002"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--remote sc://localhost:15002" in err and "rmqfilter[connect]" in err and "'grpc'" in err


def test_cli_scan_remote_and_master_exclude_each_other(capsys):
    import rmqfilter

    with pytest.raises(SystemExit) as info:
        rmqfilter.main(["scan", STORE, "--topic", TOPIC, "--group", "G", "--tags", "TagA",
                  "--master", "local[2]", "--remote", "sc://localhost:15002"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_cli_scan_remote_rejects_a_url_that_is_not_spark_connect(capsys):
    import rmqfilter

    code = rmqfilter.main(["scan", STORE, "--topic", TOPIC, "--group", "G", "--tags", "TagA",
                     "--remote", "spark://host:7077"])
    assert code == 2
    assert "expected sc://host:port or local[N]" in capsys.readouterr().err


def test_spark_session_refuses_master_and_remote_together():
    from pyspark_udfs.job import spark_session

    with pytest.raises(ValueError, match="not both"):
        spark_session("local[2]", remote="sc://localhost:15002")

