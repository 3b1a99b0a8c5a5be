"""The ranges a slice of the ``rocketmq`` data source skips under ``on_corrupt="skip"``, and how they
are reported: a WARNING on logger ``rmqfilter.datasource`` and a JSON-lines file per slice in
``skipped_log`` (docs/spark.md#data-source-options).
"""
from __future__ import annotations

import json
import logging
import os
import urllib.parse

import numpy as np

from cq.errors import StoreFormatError

__all__ = ["Skips"]

_LOG = logging.getLogger("rmqfilter.datasource")


class Skips:
    """The ranges of one slice skipped under ``on_corrupt="skip"``, and how they are reported.

    Each range is a dict: ``topic``, ``queue_id``, queue offsets ``start`` and
    ``end`` (``[start, end)``; ``end`` None for a whole queue that could not be
    opened), ``units`` (None when unknown), and the error's ``path``,
    ``offset`` (byte offset in that file) and ``reason``.
    """

    def __init__(self, options, part) -> None:
        self.enabled = options.on_corrupt == "skip"
        self.log_dir = options.skipped_log
        self.part = part
        self.ranges: list[dict] = []

    def add(self, start: int, end: int | None, exc: StoreFormatError) -> None:
        """Record ``[start, end)`` of the slice's queue as skipped because of ``exc``."""
        self.ranges.append({
            **({} if getattr(self.part, "broker", None) is None else {"broker": self.part.broker}),
            "topic": self.part.topic, "queue_id": self.part.queue_id, "start": int(start),
            "end": None if end is None else int(end), "units": None if end is None else int(end) - int(start),
            "path": exc.path, "offset": exc.offset, "reason": getattr(exc, "reason", str(exc)),
        })

    def add_units(self, queue_offsets: np.ndarray, errors: list[StoreFormatError]) -> None:
        for q, exc in zip(queue_offsets.tolist(), errors):
            self.add(q, q + 1, exc)

    def report(self) -> None:
        """Log each range (WARNING, logger ``rmqfilter.datasource``) and write them to ``skipped_log``.

        One JSON-lines file per slice, replaced atomically, so a retried task
        rewrites its own file instead of counting twice.
        """
        if not self.ranges:
            return
        for r in self.ranges:
            _LOG.warning("rocketmq on_corrupt=skip: %s queue %s offsets [%s, %s) skipped: %s at byte offset %s: %s",
                         r["topic"], r["queue_id"], r["start"], r["end"], r["path"], r["offset"], r["reason"])
        if self.log_dir is None:
            return
        p = self.part
        broker = "" if getattr(p, "broker", None) is None else f"{p.broker}."
        name = urllib.parse.quote(f"{broker}{p.topic}.{p.queue_id}.{p.start}-{p.end}", safe="") + ".jsonl"
        os.makedirs(self.log_dir, exist_ok=True)
        path = os.path.join(self.log_dir, name)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for r in self.ranges:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
