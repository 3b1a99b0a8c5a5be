"""Custom filters the tests name as ``filters_for_tests:function`` (tests/ is on sys.path)."""
from __future__ import annotations

import cq


def queue0(message: cq.Message) -> bool:
    return message.queue_id == 0


def tag_a(message: cq.Message) -> bool:
    return message.tags == "TagA"


def boom(message: cq.Message) -> bool:
    if message.queue_offset % 3 == 0:
        raise RuntimeError(f"no offset divisible by 3, got {message.queue_offset}")
    return True


def not_a_bool(message: cq.Message):
    return "yes"


@cq.batch_filter
def queue0_batch(batch):
    import pyarrow.compute as pc

    return pc.equal(batch["queue_id"], 0)


@cq.batch_filter
def wrong_length(batch):
    import numpy as np

    return np.ones(batch.num_rows + 1, dtype=bool)


NOT_CALLABLE = 42
