"""The data path's kernels at two source trees on this machine, run alternately: regressions
across commits, where the machine of the last report differs (bench/README.md#across-commits).

    python bench/compare_trees.py OLD_TREE NEW_TREE [--rounds 3] [--store PATH]

Each tree must have its extensions built in place (``python setup.py build_ext --inplace``
there; ``git worktree add --detach DIR COMMIT`` gives a tree of any commit). Every round runs
one fresh process per tree, old then new, each timing its best of several calls: a kernel
over synthetic data (tag scan of 1 M ConsumeQueue units for 40 codes, the Bloom check of 10 M
ext units, ``decode_record`` of 100 k records) and, with ``--store``, ``Store.consume`` of the
benchmarks' sample store's SQL92 group. The best of the rounds per tree is printed, with the
ratio new / old of the time per item (below 1: the new tree is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

TOPIC, GROUP = "SampleTopic", "GID_PRIORITY"
SQL = "priority >= 4 AND region IN ('cn-hangzhou', 'cn-beijing')"


def _best(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(tree: str, store: str | None) -> dict[str, float]:
    """Nanoseconds per item of each measured step, with ``tree``'s packages first on the path."""
    sys.path.insert(0, tree)
    import numpy as np

    import bloom
    import cq
    from cq import format as fmt

    if not cq.__file__.startswith(os.path.abspath(tree)):
        raise SystemExit(f"cq was imported from {cq.__file__}, not from {tree}")
    try:
        from cq.kernels import _record as record
    except ImportError:  # trees before the kernels moved to cq/kernels
        from cq import _scan as record
    rng = np.random.default_rng(11)
    out = {}
    n = 1_000_000
    pool = rng.integers(-2**31, 2**31, 400)
    units = np.zeros(n, dtype=fmt.CQ_UNIT_DTYPE)
    units["tags_code"] = rng.choice(pool, size=n)
    buf, codes = units.tobytes(), pool[::10][:40]
    out["scan_tags, 1M units, 40 codes"] = _best(lambda: cq.scan_tags(buf, codes), 40) / n * 1e9
    m = 10_000_000
    ext = np.zeros(m, dtype=[("head", fmt.EXT_UNIT_HEADER_DTYPE), ("bitmap", "u1", (14,))])
    ext["head"]["size"], ext["head"]["bit_map_size"] = 34, 14
    ext["bitmap"] = rng.integers(0, 256, size=(m, 14), dtype=np.uint8)
    ebuf, positions = ext.tobytes(), np.arange(m, dtype=np.int64) * 34
    bits = bloom.BloomFilter().calc_bit_positions("GID_bench#TopicBench")
    out["check_bitmaps, 10M ext units"] = _best(lambda: cq.check_bitmaps(ebuf, positions, bits), 8) / m * 1e9
    parts, starts, pos = [], [], 0
    for i in range(100_000):
        props = {"UNIQ_KEY": f"7F0000010001{i:020X}", "TAGS": f"Tag{i % 50}", "KEYS": f"order-{i}",
                 "a": str(i % 100)}
        record_bytes = fmt.encode_record(topic="TopicBench", body=b"x" * 64, properties=props,
                                         commit_log_offset=pos)
        parts.append(record_bytes)
        starts.append(pos)
        pos += len(record_bytes)
    log = b"".join(parts)
    out["decode_record, 100k records"] = _best(
        lambda: [record.decode_record(log, p, len(log)) for p in starts], 6) / len(starts) * 1e9
    if store:
        def consume() -> int:
            s = cq.Store(store)
            try:
                return sum(1 for _ in s.consume(TOPIC, GROUP, sql=SQL))
            finally:
                s.close()
        delivered = consume()
        out[f"Store.consume SQL92 group ({delivered:,} delivered)"] = _best(consume, 3) / delivered * 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--store", help="a sample store (the benchmarks' cached one) for Store.consume")
    p.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: one tree
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.store)))
        return 0
    best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
    for r in range(args.rounds):
        for label, tree in (("old", args.old), ("new", args.new)):
            cmd = [sys.executable, __file__, args.old, args.new, "--measure", tree]
            if args.store:
                cmd += ["--store", args.store]
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            got = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
            for k, v in got.items():
                best[label][k] = min(v, best[label].get(k, v))
            print(f"round {r + 1}/{args.rounds}, {label}: done", file=sys.stderr)
    print(f"| step | {args.old} (ns/item) | {args.new} (ns/item) | new / old |")
    print("|---|---|---|---|")
    for k, old in best["old"].items():
        new = best["new"][k]
        print(f"| {k} | {old:,.2f} | {new:,.2f} | {new / old:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
