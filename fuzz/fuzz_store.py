"""Fuzz target: a whole store directory (CommitLog, ConsumeQueue, ext) built from the input.

The input is split into the three files of a tiny store (sizes fixed below),
which is then read every way a user can: ``messages()``, ConsumeQueue
``read``, ext ``get`` on every unit's address, ``Store.consume`` with an SQL92
group. Only ``cq.StoreFormatError`` / ``selector`` errors (ValueError) may
escape; nothing may crash, hang or allocate without bound.
"""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    import cq

CL_SIZE, CQ_SIZE, EXT_SIZE = 4096, 400, 512
TOPIC = "FuzzTopic"
ROOT = tempfile.mkdtemp(prefix="rmq-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
PATHS = {
    "cl": os.path.join(ROOT, "commitlog", "00000000000000000000"),
    "cq": os.path.join(ROOT, "consumequeue", TOPIC, "0", "00000000000000000000"),
    "ext": os.path.join(ROOT, "consumequeue_ext", TOPIC, "0", "00000000000000000000"),
}
for p in PATHS.values():
    os.makedirs(os.path.dirname(p), exist_ok=True)


def split(data: bytes) -> tuple[bytes, bytes, bytes]:
    """Seeds are ``commitlog + consumequeue + ext`` concatenated at the fixed sizes."""
    return data[:CL_SIZE], data[CL_SIZE:CL_SIZE + CQ_SIZE], data[CL_SIZE + CQ_SIZE:CL_SIZE + CQ_SIZE + EXT_SIZE]


def test_one_input(data: bytes) -> None:
    cl, cq_bytes, ext = split(data)
    for key, chunk, size in (("cl", cl, CL_SIZE), ("cq", cq_bytes, CQ_SIZE), ("ext", ext, EXT_SIZE)):
        with open(PATHS[key], "wb") as f:
            f.write(chunk.ljust(size, b"\0"))
    store = cq.Store(ROOT, commit_log_file_size=CL_SIZE, consume_queue_file_size=CQ_SIZE, ext_file_size=EXT_SIZE)
    try:
        try:
            for _ in store.commit_log.messages(strict=False):
                pass
        except ValueError:
            pass
        try:
            units = store.consume_queue(TOPIC, 0).read()
            ext_queue = store.ext(TOPIC, 0)
            if ext_queue is not None:
                for code in units["tags_code"].tolist():
                    try:
                        ext_queue.get(code)
                    except ValueError:
                        pass
        except ValueError:
            pass
        for kwargs in ({"sql": "a > 5 OR TAGS IN ('A', 'B')"}, {"tags": "A || B"}):
            try:
                result = store.consume(TOPIC, "GID_FUZZ", **kwargs)
                for _ in result:
                    pass
            except ValueError:
                pass
    finally:
        store.close()


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
