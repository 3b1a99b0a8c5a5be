"""Fuzz target: the CommitLog record decoder on arbitrary bytes.

``decode_message`` must either return a Message whose fields add up to the
record, or raise ``cq.StoreFormatError`` naming the offset; decompressing a
body must fail the same way.
"""
import sys

import atheris

with atheris.instrument_imports():
    import cq
    from cq.readers.commitlog import decode_message


def test_one_input(data: bytes) -> None:
    for verify_crc in (False, True):
        try:
            msg = decode_message(data, 0, len(data), path="fuzz", verify_crc=verify_crc)
        except cq.StoreFormatError as exc:
            assert exc.offset is not None and 0 <= exc.offset <= len(data), exc
            continue
        assert msg.store_size <= len(data)
        assert msg.tags is None or isinstance(msg.tags, str)
        try:
            msg.uncompressed_body()
        except (cq.StoreFormatError, ImportError):
            pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
