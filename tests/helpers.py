"""Plain helpers the tests share: where the test data lives and how to read it.

Tests import these (``from helpers import DATA, load_jsonl``); fixtures live in
``conftest.py``, which pytest loads by itself and no test imports.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import struct
from pathlib import Path

import pytest

from rmqfilter_engine import PUREPYTHON

__all__ = ["DATA", "ENGINE_CASES", "PUREPYTHON", "RETRY_MESSAGES", "SPARK_TEST_JAVA_OPTIONS", "entry_root", "kernels",
           "load_jsonl", "patch_file", "tasks_passed_on_retry", "tiered_cluster", "tree_snapshot", "use_kernels",
           "write_retry_store"]

#: The conformance cases and the golden store (copied from ../shared so the suite stands alone).
DATA = Path(__file__).resolve().parent / "data"

#: The JVM options of every Spark JVM the tests start (the session, the Connect server, the
#: standalone cluster's daemons, driver and executor): the serial collector and the C1 compiler
#: alone. A test's Spark work is many short queries, where G1's concurrent threads and C2's
#: compilations cost more CPU than they win back; on two cores that CPU is the suite's time (a
#: test-only setting: a user's long job wants the defaults; docs/contributing.md#suite-time).
SPARK_TEST_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def tasks_passed_on_retry(spark, since: set[int]) -> list[str]:
    """The Spark jobs (not in a job group) started after the job ids ``since`` that succeeded
    although some task attempt of theirs failed: Spark retried it (the tests' session is
    ``local[2,2]``). Each as ``"job J stage S: N failed task attempt(s)"``."""
    tracker = spark.sparkContext.statusTracker()
    retried = []
    for job in sorted(set(tracker.getJobIdsForGroup()) - since):
        info = tracker.getJobInfo(job)
        if info is None or info.status != "SUCCEEDED":
            continue
        for stage in info.stageIds:
            stage_info = tracker.getStageInfo(stage)
            if stage_info is not None and stage_info.numFailedTasks:
                retried.append(f"job {job} stage {stage}: {stage_info.numFailedTasks} failed task attempt(s)")
    return retried


def load_jsonl(name: str) -> list[dict]:
    """The records of ``tests/data/<name>``, one JSON object per line."""
    with open(DATA / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def entry_root(entry, golden_copy: Path) -> Path:
    """Where the generic tests read registered reader ``entry``: ``golden_copy``, or a writable copy
    of the entry's own store (``ReaderEntry.store``) beside it."""
    if entry.store == "golden_store":
        return golden_copy
    root = golden_copy.parent / entry.store
    if not root.exists():
        shutil.copytree(DATA / entry.store, root)
    return root


def patch_file(path, offset: int, data: bytes) -> None:
    """Overwrite the bytes of ``path`` at ``offset`` with ``data`` (to corrupt a store copy)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


class ConnectCallError(RuntimeError):
    """An exception raised under Spark Connect, carried back from the client process as text."""

    def __init__(self, type_name: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{type_name}: {message}\n\n(in the Spark Connect client process)\n{remote_traceback}")
        self.type_name, self.message, self.remote_traceback = type_name, message, remote_traceback

    def __reduce__(self):
        return type(self), (self.type_name, self.message, self.remote_traceback)


def body_start(message) -> int:
    """Where ``message``'s body starts, counted from its record's first byte (the body comes
    before TOPICLENGTH, the topic, PROPERTIESLENGTH and the properties: docs/formats.md)."""
    from cq import format as fmt

    topic_len_width = 2 if message.magic_code == fmt.MESSAGE_MAGIC_CODE_V2 else 1
    return (message.store_size - len(message.body) - topic_len_width - len(message.topic.encode()) - 2
            - len(fmt.encode_properties(message.properties).encode()))


#: The retry store of :func:`write_retry_store`: (properties, what the retry filter decides) per
#: queue offset of ``%RETRY%GID_ORDERS`` queue 0.
RETRY_MESSAGES = [
    ({"RETRY_TOPIC": "OrderTopic", "price": "50"}, "registered: price > 30 is TRUE"),
    ({"RETRY_TOPIC": "OrderTopic", "price": "10"}, "registered: price > 30 is FALSE"),
    ({"RETRY_TOPIC": "AuditTopic", "price": "10"}, "nothing registered for (AuditTopic, GID_ORDERS)"),
    (None, "no properties at all"),
    ({"price": "10"}, "no RETRY_TOPIC"),
]


def write_retry_store(root) -> None:
    """A store holding the retries of group GID_ORDERS (docs/why.md#retry-topics).

    ``%RETRY%GID_ORDERS`` queue 0 holds :data:`RETRY_MESSAGES`. The group registered SQL92 ``price > 100`` for ``%RETRY%GID_ORDERS`` after the messages were
    stored (so layer 1 lets every unit through) and ``price > 30`` for ``OrderTopic``; nothing is
    registered for ``AuditTopic``. No ``CLUSTER`` property is added, so the message without
    properties stores none.
    """
    import cq  # lazy, as body_start's import: conftest imports this module for its plain helpers alone

    t0 = 1_700_000_000_000
    with cq.StoreWriter(root, enable_ext=True, cluster=None, commit_log_file_size=1 << 16,
                        ext_file_size=1 << 12, consume_queue_file_size=200) as w:
        for i, (props, _) in enumerate(RETRY_MESSAGES):
            w.append("%RETRY%GID_ORDERS", b"retry", properties=props, born_timestamp=t0 + i, store_timestamp=t0 + i)
        w.register_group("%RETRY%GID_ORDERS", "GID_ORDERS", "price > 100", born_time=t0 + 60_000)
        w.register_group("OrderTopic", "GID_ORDERS", "price > 30", born_time=t0 - 60_000)


def kernels(engine: str):
    """The store kernels of ``engine`` as one namespace (``kernels("twin").decode_columns``).

    ``"compiled"``: the modules ``cq.kernels`` uses (the twins under ``RMQFILTER_PUREPYTHON``);
    ``"twin"``: the pure-Python twins. Every kernel module's public names, merged (they are unique).
    """
    from types import SimpleNamespace

    from cq import kernels as k

    modules = {n: getattr(k, n) for n in k.MODULES} if engine == "compiled" else k.engine_modules("python")
    return SimpleNamespace(**{name: value for m in modules.values() for name, value in vars(m).items()
                              if not name.startswith("__")})


#: The ``engine`` cases of a test that runs the store kernels both ways (:func:`kernels`,
#: :func:`use_kernels`). Under ``RMQFILTER_PUREPYTHON`` "compiled" names the modules ``cq.kernels``
#: loaded, the twins themselves: that case would run the "twin" case's code a second time, so the
#: pure-Python pass skips it (the compiled pass runs both).
ENGINE_CASES = [pytest.param("compiled", marks=pytest.mark.skipif(
    PUREPYTHON, reason="RMQFILTER_PUREPYTHON: the compiled engine is not loaded, 'compiled' is the twin case again")),
    "twin"]


def use_kernels(monkeypatch, engine: str, *modules: str) -> None:
    """Make ``modules`` (e.g. ``"cq.commitlog"``) call the store kernels of ``engine`` (see :func:`kernels`)."""
    import importlib

    from cq import kernels as k

    chosen = {n: getattr(k, n) for n in k.MODULES} if engine == "compiled" else k.engine_modules("python")
    for path in modules:
        module = importlib.import_module(path)
        for name, kernel in chosen.items():
            if hasattr(module, name):
                monkeypatch.setattr(module, name, kernel)


def _content_digest(path: str) -> str:
    """sha256 of a file's data extents and where they lie: a sparse 1 GiB CommitLog the writer
    created costs its written bytes, not a read of a gigabyte of holes (where SEEK_DATA is not
    supported the whole file is one extent)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(f.fileno(), pos, os.SEEK_DATA)
                end = os.lseek(f.fileno(), start, os.SEEK_HOLE)
            except OSError as e:  # ENXIO: no data past pos; EINVAL: no SEEK_DATA here
                if e.errno == errno.ENXIO:
                    break
                start, end = pos, size
            f.seek(start)
            h.update(start.to_bytes(8, "little"))
            while start < end:
                chunk = f.read(min(end - start, 1 << 24))
                if not chunk:
                    break
                h.update(chunk)
                start += len(chunk)
            pos = end
        h.update(size.to_bytes(8, "little"))
    return h.hexdigest()


def tree_snapshot(root) -> dict[str, tuple]:
    """Everything under ``root``, to prove a read changed nothing: relative path -> (kind, mode,
    size, mtime_ns, sha256 of a file's bytes), and ``"."`` -> the root's own kind, mode and mtime
    (a file created and removed again moves it)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = _content_digest(path) if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size,
                                                st.st_mtime_ns, digest)
    st = os.lstat(root)
    out["."] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def replica_cut_back(root, end: int) -> None:
    """Make store ``root`` hold what a slave that copied its master up to CommitLog offset ``end``
    holds (docs/formats.md#replicas: the same bytes at the same offsets, the units of the records
    below ``end`` at the same queue offsets); the ext units past it stay, unreferenced."""
    log = os.path.join(root, "commitlog")
    for name in sorted(os.listdir(log)):
        start = int(name)
        path = os.path.join(log, name)
        size = os.path.getsize(path)
        if start >= end:
            os.remove(path)
        elif start + size > end:
            with open(path, "r+b") as f:
                f.seek(end - start)
                f.write(b"\0" * (start + size - end))
    base = os.path.join(root, "consumequeue")
    for topic in os.listdir(base):
        for qid in os.listdir(os.path.join(base, topic)):
            qdir = os.path.join(base, topic, qid)
            for name in sorted(os.listdir(qdir)):
                path = os.path.join(qdir, name)
                with open(path, "rb") as f:
                    raw = bytearray(f.read())
                for i in range(len(raw) // 20):
                    off, size = struct.unpack_from(">qi", raw, i * 20)
                    if size and off >= end:
                        raw[i * 20:] = b"\0" * (len(raw) - i * 20)
                        break
                with open(path, "wb") as f:
                    f.write(raw)


def replica_pair(base, **sizes):
    """``(master, slave, end)`` under ``base``: a sample store (``m/broker-x``) and its slave
    (``s/broker-x``, one broker name) cut back to the record four fifths into its CommitLog."""
    import shutil

    import cq
    from cq.writer.sample import generate_sample_store

    master = Path(base) / "m" / "broker-x"
    generate_sample_store(master, messages=1500, seed=5, **sizes)
    store = cq.Store(master)
    offsets = [m.commit_log_offset for m in store.commit_log.messages()]
    store.close()
    end = offsets[len(offsets) * 4 // 5]
    slave = Path(base) / "s" / "broker-x"
    shutil.copytree(master, slave)
    replica_cut_back(slave, end)
    return master, slave, end


def tiered_cluster(base) -> tuple[list[Path], Path]:
    """Two brokers of one cluster that ran the tiered store, sharing one tier (docs/reading.md#tiered-storage):
    ``tests/data/tiered_store`` as ``broker-a`` and again renamed ``broker-b`` (its ``topics.json`` member topic,
    its tier metadata and its directory in the tier). ``([root_a, root_b], tier)`` under ``base``."""
    store = DATA / "tiered_store"
    tier = Path(base) / "tier"
    cluster_dir = next((store / "tier").iterdir())          # {md5(cluster)[:8]}_{cluster}
    roots = []
    for name in ("broker-a", "broker-b"):
        root = Path(base) / name
        shutil.copytree(store, root, ignore=shutil.ignore_patterns("tier"))
        for f in ("topics.json", "tieredStoreMetadata.json"):
            p = root / "config" / f
            p.write_text(p.read_text().replace("broker-a", name))
        shutil.copytree(cluster_dir / "broker-a", tier / cluster_dir.name / name)
        roots.append(root)
    return roots, tier
