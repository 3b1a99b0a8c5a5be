"""The cost report's measurements (docs/cost.md).

* The Bloom math: the bitmap the dispatcher (``CommitLogDispatcherCalcBitMap``) would build holds every
  registered SQL92 group's answer for every message. :func:`cq.analyses.cost.tally_range` keeps the
  answers per message as packed bit rows, counted by distinct row; :func:`replay_bitmaps` rebuilds the
  bitmaps in memory from them (never written) for 1..N of the registered groups and for other ``f``/``n``,
  to measure the Bloom false-positive rate beside the rate the math predicts (:func:`predicted_fp_rate`).
* The CPU a selector evaluation takes on this machine (:func:`measure_ns_per_evaluation`), beside the
  broker's quoted Java figures (:func:`quoted_java_ns`).
"""
from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

import bloom
import selector
from selector.quoted import BROKER_EVALUATE_NS

from ..store.store import Store
from ..tags import bloom_key

#: Messages whose properties the CPU timing evaluates (the first ones of the topic).
TIMING_SAMPLE = 20_000
#: Replays of 1..N groups: every N up to this many groups, else this many points from 1 to N.
MAX_REPLAY_STEPS = 32


# ------------------------------------------------------------------ the Bloom math
def predicted_fp_rate(k: int, m: int, members: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The rate the Bloom math predicts for a group that does not match a message.

    A message whose bitmap holds the bits of ``x`` matching groups (each sets ``k`` of ``m``
    bits) has a given bit still clear with probability ``(1 - 1/m) ** (k x)``; a non-matching
    group tests positive when its ``k`` bits are all set: ``(1 - (1 - 1/m) ** (k x)) ** k``.
    ``members`` holds ``x`` per (message, non-matching group) pair; the result is the mean,
    weighted by ``weights``.
    """
    x = np.asarray(members, dtype=np.float64)
    if not len(x):
        return float("nan")
    p = (1.0 - (1.0 - 1.0 / m) ** (k * x)) ** k
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    return float((p * w).sum() / w.sum()) if w.sum() else float("nan")


def replay_bitmaps(patterns: dict[bytes, int], registered: Sequence[Any], topic: str, f: int, n: int,
                   steps: Sequence[int]) -> list[dict]:
    """Rebuild the bitmaps of the distinct answer rows with Bloom(f, n) for the first ``s`` registered
    groups, ``s`` in ``steps``; false positives per group (never written to the store)."""
    bf = bloom.BloomFilter(f, n)
    r = len(registered)
    keys = list(patterns)
    weights = np.array([patterns[k] for k in keys], dtype=np.int64)
    rows = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), -1) if keys else \
        np.zeros((0, max(1, (r + 7) // 8)), dtype=np.uint8)
    member = np.unpackbits(rows, axis=1, count=r).astype(bool) if r else np.zeros((len(keys), 0), bool)
    nbytes = (bf.m + 7) // 8
    bitmaps = np.zeros((len(keys), nbytes), dtype=np.uint8)
    datas = [g.bloom_data if (g.bloom_data is not None and bf.is_valid(g.bloom_data))
             else bf.generate(bloom_key(g.group, topic)) for g in registered]
    out = []
    want = set(steps)
    for j, data in enumerate(datas):
        bits = bloom.BitsArray(bf.m)
        bf.hash_to(data, bits)
        bitmaps[member[:, j]] |= np.frombuffer(bytes(bits), dtype=np.uint8)
        s = j + 1
        if s not in want:
            continue
        fps, negs, preds, per_group = 0, 0, [], {}
        x = member[:, :s].sum(axis=1)
        for i in range(s):
            neg = ~member[:, i]
            hit = bf.is_hit_many(datas[i], bitmaps) if len(keys) else np.zeros(0, bool)
            fp = int(weights[hit & neg].sum())
            ng = int(weights[neg].sum())
            fps += fp
            negs += ng
            per_group[registered[i].group] = {"false_positives": fp, "negatives": ng}
            if ng:
                preds.append((predicted_fp_rate(bf.k, bf.m, x[neg], weights[neg]), ng))
        predicted = (sum(p * w for p, w in preds) / sum(w for _, w in preds)) if preds else None
        out.append({
            "groups": s, "f": f, "n": n, "k": bf.k, "m": bf.m, "bitmap_bytes": nbytes,
            "false_positives": fps, "negatives": negs,
            "fp_rate": fps / negs if negs else None,
            "predicted_fp_rate": predicted,
            "dispatch_evaluations": int(weights.sum()) * s,
            "per_group": per_group,
        })
    return out


def replay_steps(r: int) -> list[int]:
    """The group counts 1..``r`` replayed: each, or :data:`MAX_REPLAY_STEPS` points spread evenly in log scale."""
    if r <= MAX_REPLAY_STEPS:
        return list(range(1, r + 1))
    return sorted({max(1, round(math.exp(math.log(r) * i / (MAX_REPLAY_STEPS - 1)))) for i in range(MAX_REPLAY_STEPS)}
                  | {r})


# ------------------------------------------------------------------ CPU per evaluation
def machine() -> dict:
    """Where the timing ran: CPU model, cores, Python, engine."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.release()}", "numpy": np.__version__,
            "selector_engine": selector.ENGINE}


def measure_ns_per_evaluation(store: Store, topic: str, sqls: Iterable[str], *, sample: int = TIMING_SAMPLE,
                              repeat: int = 5) -> tuple[dict[str, float], int]:
    """Nanoseconds per evaluation of each selector on the first ``sample`` messages of ``topic``.

    A batch timing (``Selector.matches_many`` over the messages' property maps, the call layer 2
    of :meth:`cq.Store.consume` makes), best of ``repeat`` runs, divided by the messages.
    Returns ``(ns per selector, messages timed)``.
    """
    sqls = sorted(set(sqls))
    if not sqls:
        return {}, 0
    offsets: list[np.ndarray] = []
    got = 0
    log = store.commit_log
    for q in store.queue_ids(topic):
        with store.queue_readers(topic, q, ext=False) as (cqueue, _ext):  # one queue's files open at a time
            units = cqueue.read(count=sample - got)
        offs = units["commit_log_offset"].astype(np.int64)
        offs = offs[store.records_present(offs, units["size"].astype(np.int64))]
        offsets.append(offs)
        got += len(offs)
        if got >= sample:
            break
    props = log.gather_properties(np.concatenate(offsets)) if offsets else []
    if not props:
        return {}, 0
    out = {}
    for sql in sqls:
        compiled = selector.compile(sql)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            compiled.matches_many(props)
            best = min(best, time.perf_counter_ns() - t0)
        out[sql] = best / len(props)
    return out, len(props)


# ------------------------------------------------------------------ the broker's quoted figures
def _normal(sql: str) -> str:
    return " ".join(sql.split()).lower()


#: :data:`BROKER_EVALUATE_NS` by normalised selector text, what a report's rows look up.
_QUOTED_BY_SQL = {_normal(sql): v for sql, v in BROKER_EVALUATE_NS.items()}


def quoted_java_ns(sql: str) -> float | None:
    """The broker's quoted Java nanoseconds per evaluation of ``sql`` (normalised text), or None."""
    return _QUOTED_BY_SQL.get(_normal(sql))
