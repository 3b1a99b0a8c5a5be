"""Fuzz target: an inner-batch record's body (docs/formats.md#inner-batch) from the input.

The input is split into its messages by the compiled kernel and its twin (the same spans, error
byte and text), then read as ``cq.readers.batchcq.inner_messages`` reads it: only
``cq.StoreFormatError`` may escape, naming an offset inside the body; every message found lies
inside the input; nothing may crash, hang or allocate without bound.
"""
import sys

import atheris

with atheris.instrument_imports():
    import numpy as np

    import cq
    from cq.kernels import _inner_py, split_inner
    from cq.readers.batchcq import inner_messages

BASE = 1000  # where the body is taken to start in its CommitLog file


def test_one_input(data: bytes) -> None:
    spans, at, error = split_inner(data)
    twin = _inner_py.split_inner(np.frombuffer(data, np.uint8))
    assert (spans.tolist(), at, error) == (twin[0].tolist(), twin[1], twin[2])
    assert ((spans[:, 2] + spans[:, 3] + 2 + spans[:, 4]) <= len(data)).all()
    try:
        got = inner_messages(data, "commitlog/00000000000000000000", BASE)
        assert error is None and len(got) == len(spans)
    except cq.StoreFormatError as exc:
        assert error is not None and BASE <= exc.offset < BASE + len(data), exc


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
