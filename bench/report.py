"""Run every benchmark and write ``bench/RESULTS.md`` (tables) and ``bench/charts/*.png``.

Usage (what ``make bench`` runs)::

    .venv/bin/python bench/report.py                 # run bench/ and the whole-store scripts, write the report
    .venv/bin/python bench/report.py --json run.json # only rebuild the report from a saved run
    .venv/bin/python bench/report.py -- -k bloom     # pass arguments on to pytest
    .venv/bin/python bench/report.py --scripts-only  # rerun the scripts alone, rewrite their section
    .venv/bin/python bench/report.py --scripts-only --script-args "bench_find.py=--messages 2000000"

Benchmarks describe themselves through pytest-benchmark's ``extra_info``
(see ``bench/conftest.py``): ``items`` per round, ``role`` ("ours",
"alternative", "twin"), optional ``bytes`` per round, and for charts a
``series`` name with the ``size`` of the input (rows with both become a
chart of throughput against size, one line per benchmark and role). Every figure in the report is
a median over rounds measured in this run; the min–max range is shown beside
it, because this machine has two cores shared with whatever else is running.

Whole-store benchmarks (:data:`SCRIPTS`) are scripts, not pytest modules: each writes a large store
first. Each is run with ``--report FILE`` and writes a Markdown fragment under its own ``###``
heading; the report puts the fragments in its section "Whole-store benchmarks", between two
markers, so that ``--scripts-only`` reruns the scripts and rewrites that section alone. A script
that cannot run here (no ``--report`` option, a tool it needs missing) is skipped, and the
section says so.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the quoted figures live in the package (selector.quoted)

from selector.quoted import BROKER_BLOOM_POSITIONS_NS, BROKER_EVALUATE_NS

# The broker's own figures, quoted in the issues (Java, warm JIT); not measured here.
QUOTED = [
    *[(f"selector evaluate `{sql}`", f"{ns} ns/evaluate") for sql, ns in BROKER_EVALUATE_NS.items()],
    ("Bloom bit positions", f"~{BROKER_BLOOM_POSITIONS_NS} ns/key"),
]


#: The whole-store benchmark scripts of bench/: (script, what it measures, the arguments it runs with by default).
SCRIPTS = [
    ("bench_find.py", "`rmqfilter find` by store time and by key against scans (issue 38)",
     ["--messages", "10000000"]),
    ("bench_object_storage.py", "a store read from S3-compatible object storage against local disk (issue 37)", []),
]
#: The markers around the section ``--scripts-only`` rewrites.
SCRIPTS_BEGIN = "<!-- whole-store benchmarks: bench/report.py --scripts-only rewrites from here -->"
SCRIPTS_END = "<!-- whole-store benchmarks: to here -->"


def _rate(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}/s"
    return f"{value:.3g} /s"


def _per_item(seconds: float) -> str:
    ns = seconds * 1e9
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} µs"
    return f"{ns:.3g} ns"


def _natural(text: str) -> list:
    """Sort key that orders "10,000 rows" after "1,000 rows" and before "100,000 rows"."""
    return [int(part.replace(",", "")) if part.replace(",", "").isdigit() else part
            for part in re.split(r"(\d[\d,]*)", text)]


def run_benchmarks(pytest_args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        # Paths among the arguments replace bench/ (e.g. `-- bench/bench_sizes.py`).
        paths = [a for a in pytest_args if not a.startswith("-") and (ROOT / a.split("::")[0]).exists()]
        cmd = [sys.executable, "-m", "pytest", "-q", *([] if paths else [str(HERE)]),
               f"--benchmark-json={out}", "--benchmark-columns=median", *pytest_args]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env)
        if not out.exists():
            raise SystemExit(f"benchmarks produced no results (pytest exit {proc.returncode})")
        if proc.returncode not in (0, 1):
            print(f"warning: pytest exited {proc.returncode}; reporting what ran", file=sys.stderr)
        text = out.read_text()
        # Kept (git-ignored) so the report can be rebuilt: `report.py --json bench/.last-run.json`.
        (HERE / ".last-run.json").write_text(text)
        return json.loads(text)


def summarise(run: dict) -> list[dict]:
    rows = []
    for bench in run["benchmarks"]:
        info = bench.get("extra_info") or {}
        items = info.get("items")
        if not items:
            continue
        stats = bench["stats"]
        rows.append({
            "group": bench.get("group") or bench["name"],
            "name": bench["name"],
            "role": info.get("role", "ours"),
            "items": items,
            "bytes": info.get("bytes"),
            "series": info.get("series"),
            "label": info.get("label"),
            "size": info.get("size"),
            "median": stats["median"],
            "min": stats["min"],
            "max": stats["max"],
            "q1": stats.get("q1", stats["min"]),
            "q3": stats.get("q3", stats["max"]),
            "rounds": stats["rounds"],
            "interleaved": info.get("interleaved"),
            "peer": info.get("peer"),
        })
    return rows


def interleaved_ratio(rows: list[dict], name: str) -> tuple[float, int] | None:
    """``(median of the per-round rate ratios, rounds)`` of the interleaved benchmark ``name``:
    its first side (ours) over its second (the alternative), round by round."""
    for r in rows:
        if r["name"] == name and r["interleaved"]:
            (_, ours), (_, alt) = list(r["interleaved"].items())[:2]
            pairs = list(zip(ours["seconds"], alt["seconds"]))
            if pairs:
                return statistics.median([a / o for o, a in pairs]), len(pairs)
    return None


def table(rows: list[dict]) -> list[str]:
    lines = ["| kernel | input per round | ours (median) | ours, quartiles | alternative (median) | ours / alternative |",
             "|---|---|---|---|---|---|"]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    def order(group: str):
        first = groups[group][0]
        return (first["series"] or "", first["size"] or 0, _natural(group))

    for group in sorted(groups, key=order):
        members = groups[group]
        if all(r["interleaved"] for r in members):
            continue  # (whole rounds of two sides: the Targets table and the profile chart read them)
        ours = [r for r in members if r["role"] == "ours"]
        alts = [r for r in members if r["role"] != "ours"]
        best_alt = max(alts, key=lambda r: r["items"] / r["median"], default=None)
        for r in ours or members:
            rate = r["items"] / r["median"]
            gbs = f", {r['bytes'] / r['median'] / 1e9:.2f} GB/s" if r.get("bytes") else ""
            ours_txt = f"`{r['name']}`: {_rate(rate)} ({_per_item(r['median'] / r['items'])}/item{gbs})"
            rng = f"{_rate(r['items'] / r['q3'])} – {_rate(r['items'] / r['q1'])}"
            if best_alt is not None:
                alt_rate = best_alt["items"] / best_alt["median"]
                alt_txt = (f"`{best_alt['name']}` ({best_alt['role']}): {_rate(alt_rate)} "
                           f"({_per_item(best_alt['median'] / best_alt['items'])}/item)")
                ratio = f"{rate / alt_rate:.2f}×"
                for other in sorted(alts, key=lambda a: -a["items"] / a["median"])[1:]:
                    other_rate = other["items"] / other["median"]
                    alt_txt += f"<br>`{other['name']}`: {_rate(other_rate)}"
                    ratio += f"<br>{rate / other_rate:.2f}×"
            else:
                alt_txt, ratio = "—", "—"
            lines.append(f"| {group} | {r['items']:,} | {ours_txt} | {rng} | {alt_txt} | {ratio} |")
    return lines


def _ns(row: dict) -> float:
    return row["median"] / row["items"] * 1e9


def _find(rows: list[dict], group_prefix: str, name_prefix: str = "", role: str | None = "ours") -> list[dict]:
    return [r for r in rows if r["group"].startswith(group_prefix) and r["name"].startswith(name_prefix)
            and (role is None or r["role"] == role)]


def targets(rows: list[dict]) -> list[str]:
    """The issues' speed targets, each with the figure this run measured."""
    out = ["| target | measured in this run | held |", "|---|---|---|"]

    def line(target: str, measured: str, held: bool) -> None:
        out.append(f"| {target} | {measured} | {'yes' if held else '**no**'} |")

    for r in _find(rows, "batch, Arrow columns:"):
        m = re.search(r"\(Java (\d+) ns\)", r["group"])
        if m:
            sql = r["group"].removeprefix("batch, Arrow columns: ").split(" (Java")[0]
            line(f"batch selector `{sql}` ≤ {m.group(1)} ns/row (the broker's figure)",
                 f"{_ns(r):.1f} ns/row", _ns(r) <= int(m.group(1)))
    for r in _find(rows, "bloom positions, batch"):
        line(f"Bloom positions ≥ 30 M keys/s (`{r['name']}`)", _rate(r["items"] / r["median"]),
             r["items"] / r["median"] >= 30e6)
    for r in _find(rows, "bloom is_hit, 10M"):
        line("bitmap checks ≥ 1 G/s", _rate(r["items"] / r["median"]), r["items"] / r["median"] >= 1e9)
    for r in _find(rows, "scan_tags, 10M units"):
        gbs = r["bytes"] / r["median"] / 1e9
        line(f"CQ scan ≥ 10 GB/s ({r['group'].split(', ')[-1]})", f"{gbs:.1f} GB/s", gbs >= 10)
    for r in _find(rows, "parse + compile, no cache"):
        us = _ns(r) / 1e3
        line(f"parse + compile ≤ 50 µs (`{r['group'].split(': ', 1)[1]}`)", f"{us:.1f} µs", us <= 50)
    auto = _find(rows, "spark selector_match", "test_selector_match_auto")
    native = _find(rows, "spark selector_match", "test_native_column_predicate", role=None)
    if auto and native:
        share = (auto[0]["items"] / auto[0]["median"]) / (native[0]["items"] / native[0]["median"])
        line("`selector_match` ≥ 50 % of the hand-written native predicate", f"{share:.0%}", share >= 0.5)
    for r in _find(rows, "spark selector_column"):
        alt = [a for a in _find(rows, r["group"], role=None) if a["role"] != "ours"]
        if alt:
            share = (r["items"] / r["median"]) / (alt[0]["items"] / alt[0]["median"])
            sql = r["group"].removeprefix("spark selector_column ").rsplit(",", 1)[0]
            line(f"`selector_column` ≥ 90 % of hand-written (`{sql}`)", f"{share:.0%}", share >= 0.9)
    # issue 11 (the data path), each as ours / the alternative of the same run
    rate = {r["name"]: r["items"] / r["median"] for r in rows if r["median"]}
    # With an interleaved benchmark (each round: ours, then the alternative) the verdict is its
    # median per-round ratio: a burst of the machine's noise then falls on both sides of a round,
    # where the ratio of two tests' medians, run minutes apart, moves with each burst.
    paired = {
        ("test_read_messages_arrow_ours", "test_read_messages_parquet_pyarrow"):
            "test_interleaved_read_messages_profile",
        ("test_spark_full_read_ours", "test_spark_full_read_memory_arrow_source"): "test_interleaved_spark_full_read",
        ("test_consume_sql_layer2_columns_ours", "test_consume_sql_layer2_dicts_previous"): "test_interleaved_consume",
    }
    for ours, alt, goal, what in (
        ("test_read_messages_arrow_ours", "test_read_messages_parquet_pyarrow", 2.0,
         "store → Arrow, full `messages` schema, one thread ≥ 2× pyarrow reading a Parquet copy"),
        ("test_spark_full_read_ours", "test_spark_full_read_memory_arrow_source", 0.9,
         "Spark full `messages` read ≥ 90 % of an in-memory Arrow Python data source"),
        ("test_spark_full_read_ours", "test_spark_full_read_parquet", 0.6,
         "Spark full `messages` read ≥ 60 % of Spark reading the Parquet copy"),
        ("test_spark_group_in_reader_ours", "test_spark_group_parquet_selector_column", 1.5,
         "Spark SQL92 group, layer 2 in the reader ≥ 1.5× the Parquet copy filtered by `selector_column`"),
        ("test_spark_group_in_reader_projected_ours", "test_spark_group_parquet_selector_column", 1.5,
         "the same, the `rocketmq` read given a user schema of the two columns the count needs"),
        ("test_spark_projection_cq_columns_ours", "test_spark_projection_full_read", 5.0,
         "Spark projection of 4 ConsumeQueue columns ≥ 5× the full read"),
        ("test_consume_sql_layer2_columns_ours", "test_consume_sql_layer2_dicts_previous", 3.0,
         "`Store.consume` SQL92 group ≥ 3× the previous path (measured in the same run)"),
    ):
        if ours in rate and alt in rate:
            ratio = rate[ours] / rate[alt]
            pair = interleaved_ratio(rows, paired.get((ours, alt), ""))
            if pair is None:
                line(what, f"{ratio:.2f}×", ratio >= goal)
            else:
                line(what, f"{pair[0]:.2f}× interleaved ({pair[1]} rounds); {ratio:.2f}× by the medians",
                     pair[0] >= goal)
    # issue 25: the real broker's consumer of the group, timed by the harness (docs/testing.md)
    for r in _find(rows, "broker peer:", "test_broker_peer_store_consume"):
        ratio = (r["items"] / r["median"]) / peer_rate(r["peer"])
        line("`Store.consume` ≥ 5× a real consumer of the group receiving from the broker", f"{ratio:.1f}×", ratio >= 5)
    return out if len(out) > 2 else []


def peer_rate(peer: dict) -> float:
    """Messages of the topic per second a real consumer of the group got through."""
    return peer["messages"] / peer["seconds"]


def peer_section(rows: list[dict]) -> list[str]:
    """The real consumer's figure beside ours on the same store (scenario ``throughput``)."""
    mine = [r for r in rows if r["peer"]]
    if not mine:
        return []
    peer = mine[0]["peer"]
    out = ["## The real broker's consumer as the peer", "",
           (f"RocketMQ's push consumer of `{peer['group']}` (`{peer['expression']}`) received the "
           f"{peer['received']:,} matching messages of {peer['messages']:,} from a real broker in "
           f"{peer['seconds']:.1f} s; rmqfilter read the store that broker wrote, for the same group "
           "(each side delivers exactly what the consumer received)."), "",
           "| reader | messages of the topic / s | against the real consumer |", "|---|---|---|",
           f"| real consumer (broker + client, `tests/broker`) | {_rate(peer_rate(peer))} | 1.0× |"]
    for r in sorted(mine, key=lambda r: r["median"]):
        rate = r["items"] / r["median"]
        out.append(f"| `{r['name']}` | {_rate(rate)} | {rate / peer_rate(peer):.1f}× |")
    return out + [""]


def profile_chart(rows: list[dict], out_dir: Path) -> list[str]:
    """A stacked bar per side of the interleaved store -> Arrow benchmark: ns per row by part
    (medians over its rounds), ours split into the parts it timed."""
    row = next((r for r in rows if r["name"] == "test_interleaved_read_messages_profile" and r["interleaved"]), None)
    if row is None:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(profile chart skipped: install the `[bench]` extra for matplotlib)"]
    per_row = 1e9 / row["items"]
    sides = list(row["interleaved"].items())
    fig, ax = plt.subplots(figsize=(9.5, 3))
    colours = ["#4c72b0", "#dd8452", "#55a868", "#8172b3"]
    table = ["| side | part | ns per row (median of the rounds) |", "|---|---|---|"]
    for y, (side, log) in enumerate(reversed(sides)):
        whole = statistics.median(log["seconds"]) * per_row
        left = 0.0
        for i, (part, secs) in enumerate(log["parts"].items()):
            ns = statistics.median(secs) * per_row
            ax.barh(y, ns, left=left, color=colours[i % len(colours)], edgecolor="white", label=part)
            ax.text(left + ns / 2, y, f"{ns:.0f}", ha="center", va="center", fontsize=8, color="white")
            left += ns
            table.append(f"| {side} | {part} | {ns:.0f} |")
        if not log["parts"]:
            ax.barh(y, whole, color="#999999", edgecolor="white")
            ax.text(whole * 0.75, y, f"{whole:.0f}", ha="center", va="center", fontsize=8, color="white")
        table.append(f"| {side} | **whole read** | **{whole:.0f}** |")
        if y == 0 and len(sides) == 2:  # the alternative: ours must take at most half its time
            ax.axvline(whole / 2, color="black", linestyle="--", linewidth=1, label="target (2×): half its time")
    ax.set_yticks(range(len(sides)), [side for side, _ in reversed(sides)])
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_xlabel("ns per row (medians of the interleaved rounds)")
    ax.set_title(f"store → Arrow, full messages schema, one thread: where a row's time goes ({row['items']:,} rows)",
                 fontsize=9)
    fig.tight_layout()
    out_dir.mkdir(exist_ok=True)
    path = out_dir / "store_to_arrow_profile.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [*table, "", f"![store → Arrow profile](charts/{path.name})"]


def charts(rows: list[dict], out_dir: Path) -> list[str]:
    series: dict[str, list[dict]] = {}
    for row in rows:
        if row["series"] and row["size"]:
            series.setdefault(row["series"], []).append(row)
    if not series:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(charts skipped: install the `[bench]` extra for matplotlib)"]
    out_dir.mkdir(exist_ok=True)
    links = []
    for name, members in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(7, 4))
        by_label: dict[str, list[tuple[int, float]]] = {}
        for r in members:
            label = r["label"] or f"{r['name'].split('[')[0].removeprefix('test_')} ({r['role']})"
            by_label.setdefault(label, []).append((r["size"], r["items"] / r["median"]))
        for label, points in sorted(by_label.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("input size (items)")
        ax.set_ylabel("throughput (items/s, median)")
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        slug = "".join(c if c.isalnum() else "_" for c in name).strip("_").lower()
        path = out_dir / f"{slug}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        links.append(f"![{name}](charts/{path.name})")
    return links


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy

    return (f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {numpy.__version__}, {platform.system()} {platform.release()}")


def _script_env() -> dict[str, str]:
    """The environment a script runs in: this checkout's packages first."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


def script_unready(script: str) -> str | None:
    """Why ``script`` cannot run here (it has no ``--report`` option, or a tool it needs is missing), or None."""
    path = HERE / script
    if not path.exists():
        return f"`bench/{script}` does not exist"
    if script == "bench_object_storage.py":
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            import s3_server  # the tests' s3proxy helper (not a package)
        finally:
            sys.path.pop(0)
        missing = s3_server.missing_tools()  # (the jar itself it fetches with Maven, as `make s3proxy` does)
        if missing:
            return f"s3proxy cannot run here: {', '.join(missing)} missing"
    env = _script_env()
    helped = subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                            check=False)
    if helped.returncode != 0:
        return f"`bench/{script} --help` failed (exit {helped.returncode}): {helped.stderr.strip()[-300:]}"
    if "--report" not in helped.stdout:
        return f"`bench/{script}` has no `--report FILE` option yet"
    return None


def run_scripts(extra: dict[str, list[str]]) -> list[str]:
    """Run every whole-store script with ``--report`` and return the report's section: their fragments, or why
    each was skipped. ``extra``: per script, the arguments that replace its defaults (:data:`SCRIPTS`)."""
    lines = [SCRIPTS_BEGIN, "## Whole-store benchmarks", "",
             "Scripts of `bench/` that write a large store first, run by `bench/report.py` (not by pytest): each",
             "section below is what the script wrote with `--report`; `bench/report.py --scripts-only` reruns them.",
             ""]
    env = _script_env()
    for script, what, defaults in SCRIPTS:
        why = script_unready(script)
        if why is not None:
            print(f"skipping bench/{script}: {why}", file=sys.stderr)
            lines += [f"### {script.removeprefix('bench_').removesuffix('.py')}", "",
                      f"{what[0].upper()}{what[1:]}: not run in this report ({why}).", ""]
            continue
        argv = extra.get(script, defaults)
        with tempfile.TemporaryDirectory() as tmp:
            fragment = Path(tmp) / "fragment.md"
            cmd = [sys.executable, str(HERE / script), *argv, "--report", str(fragment)]
            print(f"running {' '.join(shlex.quote(c) for c in cmd[1:])}", file=sys.stderr)
            proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
            if proc.returncode != 0 or not fragment.exists():
                lines += [f"### {script.removeprefix('bench_').removesuffix('.py')}", "",
                          f"{what[0].upper()}{what[1:]}: `bench/{script} {shlex.join(argv)}` failed (exit {proc.returncode}); no figures.",
                          ""]
                continue
            lines += [fragment.read_text(encoding="utf-8").rstrip("\n"), ""]
    return [*lines, SCRIPTS_END, "", ""]


def scripts_section(text: str) -> list[str] | None:
    """The whole-store section of a report's text (markers included), or None."""
    if SCRIPTS_BEGIN not in text or SCRIPTS_END not in text:
        return None
    body = text[text.index(SCRIPTS_BEGIN):text.index(SCRIPTS_END) + len(SCRIPTS_END)]
    return [*body.split("\n"), ""]


def replace_scripts_section(out: Path, section: list[str]) -> None:
    """Write ``section`` in place of the whole-store section of the report ``out`` (before its reference
    section where it has none yet; the report alone where there is no report)."""
    text = out.read_text(encoding="utf-8") if out.exists() else "# Benchmark results\n"
    new = "\n".join(section)
    if scripts_section(text) is not None:
        text = text[:text.index(SCRIPTS_BEGIN)] + new.rstrip("\n") + text[text.index(SCRIPTS_END) + len(SCRIPTS_END):]
    elif "\n## Reference:" in text:
        at = text.index("\n## Reference:") + 1
        text = text[:at] + new + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + new
    out.write_text(text, encoding="utf-8")
    print(f"wrote the whole-store section of {out}")


def write_report(run: dict, out: Path, scripts: list[str] | None = None) -> None:
    """Write the report of ``run`` to ``out``, with the whole-store section ``scripts`` (None: the one ``out``
    holds now, if any)."""
    rows = summarise(run)
    date = run.get("datetime", dt.datetime.now(dt.timezone.utc).isoformat())[:10]
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `make bench` (`bench/report.py`) on {date}. Machine: {machine()}.",
        "",
        "Each row: the median over pytest-benchmark rounds, with the rates at the first and third",
        "quartile of ours' rounds. The alternative ran in the same session. Noise: the machine has two cores",
        "and other work may run beside the benchmarks; differences under ~20 % are not significant.",
        "",
        *table(rows),
        "",
    ]
    goals = targets(rows)
    if goals:
        lines += ["## Targets", "",
                  "Wall-clock medians of this run against the issues' targets; where one does not hold,",
                  "`bench/README.md` gives the reason and the CPU-time figures. Where a target has an",
                  "interleaved benchmark (each round runs ours, then the alternative), its median per-round",
                  "ratio decides, the ratio of the two separate tests' medians shown beside it.", "", *goals, ""]
    lines += peer_section(rows)
    if scripts is None and out.exists():
        scripts = scripts_section(out.read_text(encoding="utf-8"))
    lines += scripts or []
    profile = profile_chart(rows, out.parent / "charts")
    if profile:
        lines += ["## Where a store → Arrow read's time goes", "",
                  "`test_interleaved_read_messages_profile`: ours with timers around the decoder kernel and",
                  "body inflation (the rest: ConsumeQueue and ext columns, batch bookkeeping, Arrow arrays),",
                  "interleaved round by round with pyarrow's Parquet read of the copy.", "", *profile, ""]
    lines += [
        "## Reference: the broker's own figures (quoted, not measured by this report)",
        "",
        "| operation | Java, warm JIT |",
        "|---|---|",
        *[f"| {op} | {figure} |" for op, figure in QUOTED],
        "",
    ]
    links = charts(rows, out.parent / "charts")
    if links:
        lines += ["## Throughput against input size", "", *links, ""]
    out.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {out} ({len(rows)} benchmarks)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="report from a saved pytest-benchmark JSON instead of running")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--scripts-only", action="store_true",
                        help="run only the whole-store scripts and rewrite their section of the report")
    parser.add_argument("--script-args", action="append", default=[], metavar="SCRIPT=ARGS",
                        help="the arguments a whole-store script runs with instead of its defaults, e.g. "
                             "'bench_find.py=--messages 2000000' (repeatable)")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args(argv)
    extra = {}
    for item in args.script_args:
        script, sep, rest = item.partition("=")
        if not sep or script not in {name for name, _, _ in SCRIPTS}:
            parser.error(f"--script-args {item!r}: give SCRIPT=ARGS, SCRIPT one of {', '.join(n for n, _, _ in SCRIPTS)}")
        extra[script] = shlex.split(rest)
    if args.scripts_only:
        replace_scripts_section(args.out, run_scripts(extra))
        return 0
    run = json.loads(args.json.read_text()) if args.json else run_benchmarks(args.pytest_args)
    write_report(run, args.out, None if args.json else run_scripts(extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
