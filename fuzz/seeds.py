"""Write the seed corpora under ``fuzz/seeds/<target>/`` from the conformance data.

- selector: every expression of ``tests/data/selector_cases.jsonl``;
- commitlog: every record of the golden store, one file each;
- store: small stores written by ``cq.StoreWriter`` at the fuzz target's sizes;
- dledger: DLedger data files of such stores rewritten by ``cq.write_dledger_store``;
- inner: the bodies of the batch records of ``tests/data/batch_store`` (a BatchCQ topic);
- bloom: a few parameter/key blobs.

Run: ``.venv/bin/python fuzz/seeds.py`` (``fuzz/run.py`` does it when a seed folder is missing).
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SEEDS = ROOT / "fuzz" / "seeds"
sys.path.insert(0, str(ROOT))


def _put(target: str, blob: bytes) -> None:
    folder = SEEDS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(blob).hexdigest()[:16]).write_bytes(blob)


def selector_seeds() -> None:
    with open(DATA / "selector_cases.jsonl", encoding="utf-8") as f:
        exprs = {json.loads(line)["expr"] for line in f}
    for expr in sorted(exprs):
        _put("selector", expr.encode("utf-8", "surrogatepass"))


def commitlog_seeds() -> None:
    with open(DATA / "golden_store.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    files = sorted((DATA / "golden_store" / "commitlog").iterdir())
    size = files[0].stat().st_size
    for line in lines[::7]:
        offset, length = line["commitLogOffset"], line["storeSize"]
        blob = files[offset // size].read_bytes()[offset % size:offset % size + length]
        _put("commitlog", blob)


def store_seeds() -> None:
    import cq

    sys.path.insert(0, str(ROOT / "fuzz"))
    from fuzz_store import CL_SIZE, CQ_SIZE, EXT_SIZE, TOPIC

    for n, with_ext in ((3, True), (8, True), (5, False)):
        with tempfile.TemporaryDirectory() as tmp:
            writer = cq.StoreWriter(tmp, commit_log_file_size=CL_SIZE, consume_queue_file_size=CQ_SIZE,
                                    ext_file_size=EXT_SIZE, enable_ext=with_ext)
            if with_ext:
                writer.register_group(TOPIC, "GID_FUZZ", "a > 5 OR TAGS IN ('A', 'B')")
            for i in range(n):
                writer.append(TOPIC, f"body {i}".encode(), tags="AB"[i % 2] if i % 3 else None,
                              properties={"a": str(i * 3)}, born_timestamp=1_700_000_000_000 + i,
                              store_timestamp=1_700_000_000_100 + i)
            writer.close()
            parts = []
            for rel, size in (("commitlog/00000000000000000000", CL_SIZE),
                              (f"consumequeue/{TOPIC}/0/00000000000000000000", CQ_SIZE),
                              (f"consumequeue_ext/{TOPIC}/0/00000000000000000000", EXT_SIZE)):
                path = Path(tmp) / rel
                parts.append(path.read_bytes()[:size].ljust(size, b"\0") if path.exists() else bytes(size))
            _put("store", b"".join(parts))


def dledger_seeds() -> None:
    import cq

    sys.path.insert(0, str(ROOT / "fuzz"))
    from fuzz_dledger import FILE_SIZE

    for n in (2, 9, 30):
        with tempfile.TemporaryDirectory() as tmp:
            writer = cq.StoreWriter(Path(tmp) / "classic", commit_log_file_size=FILE_SIZE)
            for i in range(n):
                writer.append("FuzzTopic", f"body {i}".encode() * (1 + i % 5), tags="AB"[i % 2],
                              properties={"a": str(i)}, born_timestamp=1_700_000_000_000 + i,
                              store_timestamp=1_700_000_000_100 + i)
            writer.close()
            cq.write_dledger_store(Path(tmp) / "classic", Path(tmp) / "dledger")
            for path in sorted((Path(tmp) / "dledger" / "dledger-n0" / "data").iterdir())[:2]:
                _put("dledger", path.read_bytes())


def timer_seeds() -> None:
    """The timer files of tests/data/timer_store, laid out as fuzz_timer reads its input."""
    sys.path.insert(0, str(ROOT / "fuzz"))
    from fuzz_timer import FILE_SIZE

    store = DATA / "timer_store"
    check = (store / "config" / "timercheck").read_bytes()[:64]
    logs = sorted((store / "timerlog").iterdir())
    for cut in (len(check), 56, 31):
        body = b"".join(p.read_bytes()[:FILE_SIZE].ljust(FILE_SIZE, b"\0") for p in logs[:2])
        _put("timer", bytes([cut]) + check[:cut] + body)


def bloom_seeds() -> None:
    for blob in (b"\x14\x00\x20\x00" + b"GID_A#TopicTest" * 3, bytes(range(64)), b"\x01\x01" + b"\xff" * 40):
        _put("bloom", blob)


def inner_seeds() -> None:
    from contextlib import closing

    import cq

    with closing(cq.Store(DATA / "batch_store")) as store:
        for q in store.queue_ids("BatchTopic"):
            for off in store.consume_queue("BatchTopic", q).units["commit_log_offset"].tolist():
                _put("inner", store.commit_log.read_message(off).body)


def main() -> None:
    selector_seeds()
    commitlog_seeds()
    store_seeds()
    dledger_seeds()
    inner_seeds()
    timer_seeds()
    bloom_seeds()
    for folder in sorted(SEEDS.iterdir()):
        print(f"{folder.name}: {sum(1 for _ in folder.iterdir())} seeds")


if __name__ == "__main__":
    main()
