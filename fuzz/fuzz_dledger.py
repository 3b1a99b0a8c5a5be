"""Fuzz target: a DLedger CommitLog (docs/formats.md#dledger-commitlog) built from the input.

The input is one DLedger data file of a tiny store (its size fixed below), read every way the
log is walked: recovery (``max_offset``), ``messages()`` lax and strict, ``column_batches()``,
and each record found read again at its offset. Only ``cq.StoreFormatError`` may escape, and
it names the file and an offset inside it; nothing may crash, hang or allocate without bound.
"""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    import cq

FILE_SIZE = 4096
ROOT = tempfile.mkdtemp(prefix="rmq-fuzz-dledger-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
DATA_DIR = os.path.join(ROOT, "dledger-n0", "data")
PATH = os.path.join(DATA_DIR, "00000000000000000000")
os.makedirs(DATA_DIR, exist_ok=True)


def test_one_input(data: bytes) -> None:
    with open(PATH, "wb") as f:
        f.write(data[:FILE_SIZE].ljust(FILE_SIZE, b"\0"))
    log = cq.DLedgerCommitLog(DATA_DIR, file_size=FILE_SIZE)
    try:
        assert 0 <= log.max_offset <= FILE_SIZE
        # where each record lies (its PHYSICALOFFSET field is data, and may be anything)
        found = [(m._file_offset, m.store_size) for m in log.messages(strict=False)]
        assert all(at + size <= log.max_offset for at, size in found)
        for at, size in found:
            assert log.read_message(at).store_size == size
        for strict in (True, False):
            try:
                list(log.messages(strict=strict, verify_crc=True))
                for _ in log.column_batches(strict=strict, batch_records=3):
                    pass
            except cq.StoreFormatError as exc:
                assert exc.path == PATH and exc.offset is not None and 0 <= exc.offset <= FILE_SIZE, exc
    finally:
        log.close()


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
