"""Fuzz target: the 5.x timer's files (docs/formats.md#timer-files) built from the input.

The input is split into a ``config/timercheck`` (its first byte says how long, up to 64 bytes) and
two timerlog files of 1 KiB (the rest, zero-padded), read by :class:`cq.TimerFiles` whole. Only
``cq.StoreFormatError`` may escape, naming one of the files and an offset inside it; the units it
returns lie in the timerlog, 52 bytes apart.
"""
import os
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    import cq
    from cq import format as fmt

FILE_SIZE = 1024
ROOT = tempfile.mkdtemp(prefix="rmq-fuzz-timer-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
CHECK = os.path.join(ROOT, "config", fmt.TIMER_CHECK_FILE)
LOG = [os.path.join(ROOT, fmt.TIMER_LOG_DIR, fmt.file_name(i * FILE_SIZE)) for i in range(2)]
os.makedirs(os.path.dirname(CHECK), exist_ok=True)
os.makedirs(os.path.dirname(LOG[0]), exist_ok=True)


def test_one_input(data: bytes) -> None:
    n = data[0] % 65 if data else 0
    check, rest = data[1:1 + n], data[1 + n:]
    with open(CHECK, "wb") as f:
        f.write(check)
    for i, path in enumerate(LOG):
        with open(path, "wb") as f:
            f.write(rest[i * FILE_SIZE:(i + 1) * FILE_SIZE].ljust(FILE_SIZE, b"\0"))
    try:
        with cq.TimerFiles(ROOT) as timer:
            units = timer.units()
            assert len(check) >= fmt.TIMER_CHECK_DTYPE.itemsize
    except cq.StoreFormatError as exc:
        assert exc.path in (CHECK, *LOG) and exc.offset is not None, exc
        assert 0 <= exc.offset <= os.path.getsize(exc.path), exc
        return
    assert all(0 <= p <= 2 * FILE_SIZE - fmt.TIMER_LOG_UNIT_SIZE and p % FILE_SIZE % fmt.TIMER_LOG_UNIT_SIZE == 0
               for p in units["position"].tolist())


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
