"""The data path's kernels at two source trees on this machine, run alternately: regressions
across commits, where the machine of the last report differs (bench/README.md#across-commits).

    python bench/compare_trees.py OLD_TREE NEW_TREE [--rounds 3] [--store PATH]

Each tree must have its extensions built in place (``python setup.py build_ext --inplace``
there; ``git worktree add --detach DIR COMMIT`` gives a tree of any commit). Every round runs
one fresh process per tree, old then new, each timing its best of several calls: a kernel
over synthetic data (tag scan of 1 M ConsumeQueue units for 40 codes, the Bloom check of 10 M
ext units, ``decode_record`` of 100 k records) and, with ``--store``, ``Store.consume`` of the
benchmarks' sample store's SQL92 group and a tag group, and the data source's group decisions over
every unit of the topic (both groups). The best of the rounds per tree is printed, with the
ratio new / old of the time per item (below 1: the new tree is faster).

``--one-process`` loads OLD's kernels beside this tree's in one process (OLD from before the
kernels moved to ``cq/kernels``, whose modules have other names) and times them alternately on
the same buffers, in CPU time: the steadier comparison where separate processes place their
large buffers differently or the machine is loaded.
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
TAG_GROUP, TAGS = "GID_TAGS", "TagA || TagB"


def _best(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _inputs():
    """The synthetic inputs of the three kernel steps, the same in every tree."""
    import numpy as np

    import bloom
    from cq import format as fmt

    rng = np.random.default_rng(11)
    n = 1_000_000
    pool = rng.integers(-2**31, 2**31, 400)
    units = np.zeros(n, dtype=fmt.CQ_UNIT_DTYPE)
    units["tags_code"] = rng.choice(pool, size=n)
    m = 10_000_000
    ext = np.zeros(m, dtype=[("head", fmt.EXT_UNIT_HEADER_DTYPE), ("bitmap", "u1", (14,))])
    ext["head"]["size"], ext["head"]["bit_map_size"] = 34, 14
    ext["bitmap"] = rng.integers(0, 256, size=(m, 14), dtype=np.uint8)
    parts, starts, pos = [], [], 0
    for i in range(100_000):
        props = {"UNIQ_KEY": f"7F0000010001{i:020X}", "TAGS": f"Tag{i % 50}", "KEYS": f"order-{i}",
                 "a": str(i % 100)}
        record_bytes = fmt.encode_record(topic="TopicBench", body=b"x" * 64, properties=props,
                                         commit_log_offset=pos)
        parts.append(record_bytes)
        starts.append(pos)
        pos += len(record_bytes)
    return {"units": units.tobytes(), "codes": pool[::10][:40], "n": n,
            "ext": ext.tobytes(), "positions": np.arange(m, dtype=np.int64) * 34, "m": m,
            "bits": bloom.BloomFilter().calc_bit_positions("GID_bench#TopicBench"),
            "log": b"".join(parts), "starts": starts}


def _steps(scan, record, d) -> dict[str, tuple[int, object]]:
    """Each step's item count and call, with ``scan`` (scan_tags, check_bitmaps) and ``record``
    (decode_record) taken from one tree."""
    log, starts = d["log"], d["starts"]
    return {
        "scan_tags, 1M units, 40 codes": (d["n"], lambda: scan.scan_tags(d["units"], d["codes"])),
        "check_bitmaps, 10M ext units": (d["m"], lambda: scan.check_bitmaps(d["ext"], d["positions"], d["bits"])),
        "decode_record, 100k records": (len(starts), lambda: [record.decode_record(log, p, len(log))
                                                              for p in starts]),
    }


def one_process(old_tree: str, calls: int) -> dict[str, dict[str, list[float]]]:
    """CPU ns per item of each step, OLD's kernels and this tree's alternately in this process."""
    import importlib.util

    import cq.kernels as new_scan
    from cq.kernels import _record as new_record

    def load(name: str, path: str):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    cq_dir = os.path.join(os.path.abspath(old_tree), "cq")
    try:
        so = {m: next(f for f in os.listdir(cq_dir) if f.startswith(m + ".") and f.endswith(".so"))
              for m in ("_scan", "_tags")}
    except StopIteration:
        raise SystemExit(f"--one-process needs an OLD tree from before cq/kernels, built in place: "
                         f"no cq/_scan*.so and cq/_tags*.so in {cq_dir}") from None
    old_record = load("cq._scan", os.path.join(cq_dir, so["_scan"]))  # relative imports: under cq
    load("cq._tags", os.path.join(cq_dir, so["_tags"]))
    old_scan = load("cq._old_scan", os.path.join(cq_dir, "scan.py"))
    d = _inputs()
    old, new = _steps(old_scan, old_record, d), _steps(new_scan, new_record, d)
    times: dict[str, dict[str, list[float]]] = {}
    for step, (items, _) in new.items():
        times[step] = {"old": [], "new": []}
        for c in range(calls):  # alternate which goes first, so neither always follows the other
            for label, steps in ((("old", old), ("new", new)) if c % 2 == 0 else (("new", new), ("old", old))):
                start = time.process_time()
                steps[step][1]()
                times[step][label].append((time.process_time() - start) / items * 1e9)
    return times


def measure(tree: str, store: str | None) -> dict[str, float]:
    """Nanoseconds per item of each measured step, with ``tree``'s packages first on the path."""
    sys.path.insert(0, tree)
    import cq

    if not cq.__file__.startswith(os.path.abspath(tree)):
        raise SystemExit(f"cq was imported from {cq.__file__}, not from {tree}")
    try:
        from cq.kernels import _record as record
    except ImportError:  # trees before the kernels moved to cq/kernels
        from cq import _scan as record
    out = {}
    calls = {"scan_tags, 1M units, 40 codes": 40, "check_bitmaps, 10M ext units": 8, "decode_record, 100k records": 6}
    for step, (items, call) in _steps(cq, record, _inputs()).items():
        out[step] = _best(call, calls[step]) / items * 1e9
    if store:
        for label, group, kw in (("SQL92", GROUP, {"sql": SQL}), ("tag", TAG_GROUP, {"tags": TAGS})):
            def consume(group=group, kw=kw) -> int:
                s = cq.Store(store)
                try:
                    return sum(1 for _ in s.consume(TOPIC, group, **kw))
                finally:
                    s.close()
            delivered = consume()
            out[f"Store.consume {label} group ({delivered:,} delivered)"] = _best(consume, 3) / delivered * 1e9
        out.update(_reader_decisions(store))
    return out


def _reader_decisions(path: str) -> dict[str, float]:
    """ns per unit of the data source's group decisions (its ``_GroupFilter.decide`` over every unit of
    each queue of the topic: layer 1, presence, layer 2, the re-check), for the SQL92 and the tag group;
    the reader's private names, which trees since the data source's ``_GroupFilter`` share."""
    import cq
    from pyspark_udfs import _reader
    from pyspark_udfs._source import ReadOptions

    s = cq.Store(path)
    try:
        cols = {}
        for q in s.queue_ids(TOPIC):
            cqueue = s.consume_queue(TOPIC, q)
            cols[q] = cqueue.read_columns(0, cqueue.max_offset)
        units = sum(len(c["size"]) for c in cols.values())
        out = {}
        for label, kw, group in (("SQL92", {"sql": SQL}, GROUP), ("tag", {"tags": TAGS}, TAG_GROUP)):
            options = ReadOptions(path=path, group=group, **kw)

            def decide(options=options) -> None:
                for q, c in cols.items():
                    tags_code, known, _, ext_batch, _ = _reader._resolve_ext(s, TOPIC, q, c["tags_code"])
                    _reader._GroupFilter(s, options, TOPIC).decide(c, tags_code, known, ext_batch, known | True)
            out[f"reader group decisions, {label} group ({units:,} units)"] = _best(decide, 3) / units * 1e9
        return out
    finally:
        s.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--store", help="a sample store (the benchmarks' cached one) for Store.consume")
    p.add_argument("--one-process", action="store_true",
                   help="OLD's kernels beside this tree's in one process, CPU time, --calls alternating calls")
    p.add_argument("--calls", type=int, default=21)
    p.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: one tree
    args = p.parse_args(argv)
    if args.one_process:
        print(f"| step | {args.old}, CPU ns/item (min, median) | this tree (min, median) | new / old (min, median) |")
        print("|---|---|---|---|")
        for step, t in one_process(args.old, args.calls).items():
            o, n = sorted(t["old"]), sorted(t["new"])
            mo, mn = o[len(o) // 2], n[len(n) // 2]
            print(f"| {step} | {o[0]:,.2f}, {mo:,.2f} | {n[0]:,.2f}, {mn:,.2f} | {n[0] / o[0]:.2f}, {mn / mo:.2f} |")
        return 0
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
