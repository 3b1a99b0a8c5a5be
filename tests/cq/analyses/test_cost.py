"""rmqfilter cost / cq.analyses.cost: every number checked against an independent plain-Python count.

The store here has many SQL92 groups registered on one topic, so its 112-bit bitmaps are crowded
and Bloom false positives really occur; the count walks every unit with ``read_message``,
``ConsumeQueueExt.get`` and ``Selector.evaluate`` (no batch kernel), as the spec states the rules.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest
from helpers import DATA

import bloom
import cq
import rmqfilter
import selector
from cq.analyses.cost import CostGroup, filter_cost, predicted_fp_rate
from cq.analyses.cost_render import FRAME, render_html

TOPIC = "CostTopic"
N_MESSAGES = 1200
STORE_MS = 1_700_000_000_000
# 24 groups "v >= i": a message with v = 30 matches all of them, so bitmaps hold up to 72 of 112 bits
V_GROUPS = {f"GID_V{i:02d}": f"v >= {i}" for i in range(24)}
OTHER_GROUPS = {
    "GID_TAGS": "TAGS IN ('T1', 'T2')",
    "GID_NULL": "w > 1",  # w is never set: UNKNOWN, never delivered
}
LATE = ("GID_LATE", "color = 'red'")  # registered half-way: older bitmaps lack its bits


def _messages(rng, n, first):
    for i in range(first, first + n):
        tag = rng.integers(0, 5)
        props = {"v": str(int(rng.integers(0, 32))), "color": ("red", "blue")[int(rng.integers(0, 2))]}
        yield {"topic": TOPIC if i % 5 else "PlainTopic", "queue_id": i % 2, "body": b"x" * int(rng.integers(1, 300)),
               "properties": props, "tags": f"T{tag}" if tag else None, "born_timestamp": STORE_MS + i,
               "store_timestamp": STORE_MS + i}


@pytest.fixture(scope="module")
def many_groups_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost") / "store"
    rng = np.random.default_rng(15)
    with cq.StoreWriter(root, enable_ext=True, commit_log_file_size=1 << 18) as w:
        for g, sql in {**V_GROUPS, **OTHER_GROUPS}.items():
            w.register_group(TOPIC, g, sql, born_time=STORE_MS - 1)
        w.append_many(_messages(rng, N_MESSAGES // 2, 0))
        w.register_group(TOPIC, *LATE, born_time=STORE_MS + N_MESSAGES // 2 - 1)
        w.append_many(_messages(rng, N_MESSAGES // 2, N_MESSAGES // 2))
    return root


def _registered():
    return {**V_GROUPS, **OTHER_GROUPS, LATE[0]: LATE[1]}


def independent_count(root, topic, groups: dict[str, tuple[str, int]]):
    """Per group: units, passed layer 1, Bloom false positives, delivered, CommitLog bytes read
    with the bitmap — one unit at a time, straight from the spec's rules."""
    store = cq.Store(root)
    bf = bloom.BloomFilter()
    out = {g: Counter() for g in groups}
    compiled = {g: selector.compile(sql) for g, (sql, _) in groups.items()}
    for q in store.queue_ids(topic):
        ext = store.ext(topic, q)
        for u in store.consume_queue(topic, q).read():
            msg = store.commit_log.read_message(int(u["commit_log_offset"]))
            unit = ext.get(int(u["tags_code"])) if ext is not None else None
            for g, (_, born) in groups.items():
                try:
                    match = compiled[g].evaluate(msg.properties) is True
                except selector.SelectorEvaluationError:
                    match = False
                c = out[g]
                c["units"] += 1
                if unit is None or unit.filter_bitmap is None or not unit.msg_store_time > born:
                    passed, hit = True, False
                else:
                    bits = unit.filter_bitmap
                    hit = all(bits[p >> 3] >> (p & 7) & 1 for p in bf.calc_bit_positions(f"{g}#{topic}"))
                    passed = hit
                c["passed"] += passed
                c["fp"] += hit and not match
                c["delivered"] += passed and match
                c["bytes_with"] += int(u["size"]) if passed else 0
                c["bytes_without"] += int(u["size"])
    store.close()
    return out


def independent_replay(root, topic, groups: list[tuple[str, str]], f: int, n: int):
    """(false positives, negatives) with bitmaps rebuilt one message at a time by BitsArray/hash_to."""
    store = cq.Store(root)
    bf = bloom.BloomFilter(f, n)
    datas = [bf.generate(f"{g}#{topic}") for g, _ in groups]
    compiled = [selector.compile(sql) for _, sql in groups]
    fp = neg = 0
    for q in store.queue_ids(topic):
        for u in store.consume_queue(topic, q).read():
            props = store.commit_log.read_message(int(u["commit_log_offset"])).properties
            match = []
            for c in compiled:
                try:
                    match.append(c.evaluate(props) is True)
                except selector.SelectorEvaluationError:
                    match.append(False)
            bits = bloom.BitsArray(bf.m)
            for d, hit in zip(datas, match):
                if hit:
                    bf.hash_to(d, bits)
            for d, hit in zip(datas, match):
                if not hit:
                    neg += 1
                    fp += bf.is_hit(d, bits)
    store.close()
    return fp, neg


@pytest.fixture(scope="module")
def report(many_groups_store):
    return filter_cost(many_groups_store, TOPIC, fp_target=0.02)


def test_per_group_numbers_equal_the_independent_count(many_groups_store, report):
    reg = _registered()
    born = {g: STORE_MS - 1 for g in reg} | {LATE[0]: STORE_MS + N_MESSAGES // 2 - 1}
    expected = independent_count(many_groups_store, TOPIC, {g: (reg[g], born[g]) for g in reg})
    assert [g.group for g in report.groups] == list(reg)
    assert sum(c["fp"] for c in expected.values()) > 50, "the fixture must produce Bloom false positives"
    for g in report.groups:
        e = expected[g.group]
        assert (g.units, g.passed_consume_queue, g.bloom_false_positives, g.delivered) == (
            e["units"], e["passed"], e["fp"], e["delivered"]), g.group
        assert g.evaluations_without_bitmap == e["units"]
        assert g.evaluations_with_bitmap == e["passed"] == g.commit_log_reads_with_bitmap
        assert (g.commit_log_bytes_with_bitmap, g.commit_log_bytes_without_bitmap) == (e["bytes_with"],
                                                                                       e["bytes_without"])
    assert report.dispatch_evaluations == report.messages * len(reg)
    assert report.group("GID_NULL").delivered == 0
    # the late group's old bitmaps are not trusted (isMsgInLive): those units pass layer 1 untested
    late = report.group(LATE[0])
    assert late.bloom_tested < late.units


def test_numbers_equal_store_consume_stats(many_groups_store, report):
    store = cq.Store(many_groups_store)
    for g in report.groups:
        result = store.consume(TOPIC, g.group)  # the registration in consumerFilter.json
        delivered = sum(1 for _ in result)
        st = result.stats
        assert (st.units_scanned, st.passed_consume_queue, st.bloom_false_positives, st.delivered) == (
            g.units, g.passed_consume_queue, g.bloom_false_positives, g.delivered) == (
            g.units, g.passed_consume_queue, g.bloom_false_positives, delivered)
    store.close()


def test_ext_bytes_are_the_bitmaps_the_store_holds(many_groups_store, report):
    store = cq.Store(many_groups_store)
    units = [store.ext(TOPIC, q).get(int(a)) for q in store.queue_ids(TOPIC)
             for a in store.consume_queue(TOPIC, q).read()["tags_code"]]
    assert report.ext["bitmap_bytes"] == sum(u.bit_map_size for u in units) == 14 * len(units)
    assert report.ext["unit_bytes"] == sum(u.size for u in units)
    store.close()


@pytest.mark.parametrize("f,n,steps", [(20, 32, (1, 6, 27)), (10, 64, (27,)), (33, 8, (27,))])
def test_replay_equals_an_independent_rebuild(many_groups_store, report, f, n, steps):
    reg = list(_registered().items())
    by_groups = {x["groups"]: x for x in report.fp_by_groups}
    by_config = {(c["f"], c["n"]): c for c in report.fp_by_config}
    for s in steps:
        fp, neg = independent_replay(many_groups_store, TOPIC, reg[:s], f, n)
        got = by_groups[s] if (f, n) == (20, 32) else by_config[(f, n)]
        assert got["groups"] == s
        assert (got["false_positives"], got["negatives"]) == (fp, neg)
    # more groups sharing the bits: more false positives, as the Bloom math says
    rates = [x["fp_rate"] for x in report.fp_by_groups if x["fp_rate"] is not None]  # v >= 0 alone: no negatives
    assert rates[-1] > rates[0] and report.fp_by_groups[-1]["false_positives"] > 0
    assert report.fp_by_groups[-1]["predicted_fp_rate"] > report.fp_by_groups[1]["predicted_fp_rate"]


def test_prediction_formula():
    # one matching group (x=1) in an 8-bit map with k=1: a non-member hits with probability 1/8
    assert predicted_fp_rate(1, 8, np.array([1])) == pytest.approx(1 / 8)
    # k=3, m=112, x=20: (1 - (1 - 1/112)^60)^3
    assert predicted_fp_rate(3, 112, np.array([20])) == pytest.approx((1 - (1 - 1 / 112) ** 60) ** 3)
    assert predicted_fp_rate(3, 112, np.array([0, 20]), np.array([1, 3])) == pytest.approx(
        3 * (1 - (1 - 1 / 112) ** 60) ** 3 / 4)


def test_target_picks_the_smallest_bitmap_under_it(report):
    choice = report.fp_target_choice
    assert choice is not None and choice["fp_rate"] <= 0.02 and choice["predicted_fp_rate"] <= 0.02
    smaller = [c for c in report.fp_by_config if c["bitmap_bytes"] < choice["bitmap_bytes"]]
    assert all(c["fp_rate"] > 0.02 or c["predicted_fp_rate"] > 0.02 for c in smaller)


def test_verdict_and_timing(report):
    v = report.verdict
    saved = sum(g.evaluations_without_bitmap - g.evaluations_with_bitmap for g in report.groups)
    assert v["pull_evaluations_saved"] == saved and v["dispatch_evaluations_added"] == report.dispatch_evaluations
    assert v["pays_in_evaluations"] == (saved > report.dispatch_evaluations)
    assert ("does not pay" in v["summary"]) == (not v["pays_in_evaluations"])
    assert all(g.ns_per_evaluation and g.ns_per_evaluation > 0 for g in report.groups)
    assert report.measurement["machine"]["selector_engine"] == selector.ENGINE
    assert report.quoted["ns_per_evaluation"]["a > 5"] == 14


def test_tag_group_and_golden_store():
    groups = [CostGroup("GID_SQL_A", "a > 5 AND b = 'abc'"), CostGroup("T", "TagA || TagB", "TAG", registered=False)]
    r = filter_cost(DATA / "golden_store", "GoldenFilterTopic", groups, timing=False)
    store = cq.Store(DATA / "golden_store")
    for g, how in (("GID_SQL_A", {"sql": "a > 5 AND b = 'abc'"}), ("T", {"tags": "TagA || TagB"})):
        result = store.consume("GoldenFilterTopic", g, **how)
        n = sum(1 for _ in result)
        row = r.group(g)
        assert (row.passed_consume_queue, row.delivered, row.client_filtered) == (
            result.stats.passed_consume_queue, n, result.stats.client_filtered)
    assert r.registered_groups == ["GID_SQL_A"] and r.group("T").evaluations_without_bitmap == 0
    store.close()


def test_bloom_filter_is_the_named_default_and_no_bloom_is_a_clear_error():
    """cost's bloom_filter defaults to DEFAULT_BLOOM (the broker's BloomFilter()); NO_BLOOM cannot replay
    bitmaps, so it is a ValueError naming the cost report, not a silent default."""
    from cq.filter.subscription import DEFAULT_BLOOM, NO_BLOOM

    groups = [CostGroup("GID_SQL_A", "a > 5 AND b = 'abc'")]
    args = (DATA / "golden_store", "GoldenFilterTopic", groups)
    def answer(**kw):
        d = filter_cost(*args, timing=False, **kw).to_dict()
        return {k: v for k, v in d.items() if k not in ("seconds", "machine")}

    plain = answer()
    assert plain["groups"][0]["passed_consume_queue"] > 0
    for bf in (DEFAULT_BLOOM, bloom.BloomFilter()):
        assert answer(bloom_filter=bf) == plain
    with pytest.raises(ValueError, match="the cost report needs the broker's Bloom filter"):
        filter_cost(*args, timing=False, bloom_filter=NO_BLOOM)


# ------------------------------------------------------------------ CLI
def _cli(argv, capsys):
    code = rmqfilter.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_has_every_documented_number(many_groups_store, tmp_path, capsys, report):
    path = tmp_path / "cost.json"
    code, out, _ = _cli(["cost", many_groups_store, "--topic", TOPIC, "--all-groups", "--no-timing",
                         "--f", 10, "--n", 64, "--json", path], capsys)
    assert code == 0 and "Verdict:" in out and "GID_V00" in out
    doc = json.loads(path.read_text())
    assert doc["topic"] == TOPIC and doc["dispatch_evaluations"] == report.dispatch_evaluations
    for g, mine in zip(doc["groups"], report.groups):
        for key in ("group", "units", "passed_consume_queue", "bloom_false_positives", "delivered",
                    "evaluations_without_bitmap", "evaluations_with_bitmap"):
            assert g[key] == getattr(mine, key)
    assert [(c["f"], c["n"]) for c in doc["fp_by_config"]] == [(20, 32), (10, 64)]


def test_cli_one_group_and_explicit_groups(many_groups_store, capsys):
    code, out, _ = _cli(["cost", many_groups_store, "--topic", TOPIC, "--group", "GID_V03", "--tag-group", "T",
                         "T1 || T2", "--no-timing"], capsys)
    assert code == 0 and "GID_V03" in out and "\nT " in out and "GID_V04 " not in out


@pytest.mark.parametrize("argv,needle", [
    (["--group", "GID_NOPE"], "GID_NOPE"),
    (["--sql-group", "G", "a >"], "selector"),
    (["--all-groups", "--f", "0", "--n", "32"], "f must be"),
    (["--all-groups", "--f", "20"], "pairs"),
    (["--all-groups", "--fp-target", "150%"], "fp-target"),
    ([], "name the groups"),
])
def test_cli_bad_input_exits_2(many_groups_store, capsys, argv, needle):
    code, _, err = _cli(["cost", many_groups_store, "--topic", TOPIC, *argv], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_cli_all_groups_without_registrations_exits_2(capsys):
    code, _, err = _cli(["cost", DATA / "golden_store", "--topic", "GoldenFilterTopic", "--all-groups"], capsys)
    assert code == 2 and "no SQL92 group is registered" in err and "consumerFilter.json" in err


def test_cli_unknown_topic_exits_2(many_groups_store, capsys):
    code, _, err = _cli(["cost", many_groups_store, "--topic", "Nope", "--all-groups"], capsys)
    assert code == 2 and "'Nope'" in err


def test_topic_without_ext_units_reports_layer_2_costs_and_exits_2(tmp_path, capsys):
    root = tmp_path / "noext"
    with cq.StoreWriter(root, commit_log_file_size=1 << 16) as w:
        for i in range(50):
            w.append("T", b"b", properties={"a": str(i)}, store_timestamp=STORE_MS + i)
    path = tmp_path / "c.json"
    code, out, err = _cli(["cost", root, "--topic", "T", "--sql-group", "G", "a > 9", "--json", path,
                           "--no-timing"], capsys)
    assert code == 2 and "no ConsumeQueueExt units" in err and "cannot be evaluated" in err
    doc = json.loads(path.read_text())
    g = doc["groups"][0]
    assert doc["bitmap_available"] is False and doc["dispatch_evaluations"] is None
    assert (g["passed_consume_queue"], g["delivered"], g["evaluations_without_bitmap"],
            g["evaluations_with_bitmap"]) == (50, 40, 50, None)
    assert "layer-2-only" in out or "Layer-2-only" in out
    with pytest.raises(cq.analyses.cost.NoExtUnitsError) as exc:
        filter_cost(root, "T", [CostGroup("G", "a > 9")], raise_without_ext=True, timing=False)
    assert exc.value.report.group("G").delivered == 40


# ------------------------------------------------------------------ the page, as a person sees it
def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_html_page_renders_its_charts_in_a_browser(report, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("the HTML report is checked in a real headless browser and none is installed "
                    "(Debian: apt-get install chromium; .ci/run installs it)")
    image = pytest.importorskip("PIL.Image", reason="reading the screenshot needs Pillow (the test extra)")
    page = tmp_path / "cost.html"
    text = render_html(report)
    page.write_text(text, encoding="utf-8")
    assert "<script" not in text and "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,5200", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    pixels = np.asarray(image.open(shot).convert("RGB")).astype(np.int16)
    charts = text.count("<svg")
    assert charts == 5
    frame = np.array([int(FRAME[i:i + 2], 16) for i in (1, 3, 5)])
    is_frame = np.abs(pixels - frame).sum(axis=2) < 12
    # a chart's frame is a box: its top and bottom edges are long runs of frame-coloured pixels
    edges = np.flatnonzero(is_frame.sum(axis=1) > 600)
    edges = [run[0] for run in np.split(edges, np.flatnonzero(np.diff(edges) > 2) + 1) if len(run)]
    assert len(edges) == 2 * charts, f"expected {charts} chart frames on screen, found {len(edges) / 2}"
    # inside each frame: real ink in the palette's first two colours (bars, lines), not a blank box
    palette = [np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)]) for c in ("#4e79a7", "#f28e2b")]
    for top, bottom in zip(edges[::2], edges[1::2]):
        region = pixels[top + 2:bottom - 1]
        ink = [(np.abs(region - c).sum(axis=2) < 30).sum() for c in palette]
        assert min(ink) > 300, f"chart at rows {top}-{bottom} is nearly blank: {ink} pixels of each colour"
        assert (np.abs(region - 255).sum(axis=2) > 30).mean() > 0.02, f"chart at rows {top}-{bottom} is empty"


@pytest.mark.spark
def test_spark_variant_gives_the_same_report(spark, many_groups_store, report):
    from pyspark_udfs.cost import filter_cost_spark

    on_spark = filter_cost_spark(spark, many_groups_store, TOPIC, fp_target=0.02, timing=False, partition_units=150)
    numbers = ("units", "passed_consume_queue", "bloom_tested", "bloom_false_positives", "delivered",
               "evaluations_without_bitmap", "evaluations_with_bitmap", "commit_log_bytes_with_bitmap")
    assert [[getattr(g, k) for k in numbers] for g in on_spark.groups] == \
        [[getattr(g, k) for k in numbers] for g in report.groups]
    def rounded(x):  # the predicted rates are float sums taken in another order
        return json.loads(json.dumps(x), parse_float=lambda v: round(float(v), 12))

    assert rounded([on_spark.dispatch_evaluations, on_spark.ext, on_spark.fp_by_groups, on_spark.fp_by_config,
                    on_spark.fp_target_choice]) == rounded([report.dispatch_evaluations, report.ext,
                                                            report.fp_by_groups, report.fp_by_config,
                                                            report.fp_target_choice])


def test_sample_store_registered_groups_equal_consume(tmp_path):
    from cq.writer.sample import SAMPLE_GROUPS, generate_sample_store

    info = generate_sample_store(tmp_path / "sample", messages=3000, seed=3)
    r = filter_cost(info.root, info.main_topic, timing=False)  # the groups of config/consumerFilter.json
    assert [g.group for g in r.groups] == [g for g, _ in SAMPLE_GROUPS] == r.registered_groups
    store = cq.Store(info.root)
    for g in r.groups:
        result = store.consume(info.main_topic, g.group)
        n = sum(1 for _ in result)
        assert (g.passed_consume_queue, g.bloom_false_positives, g.delivered) == (
            result.stats.passed_consume_queue, result.stats.bloom_false_positives, n)
        assert g.born_time == store.registered_filter(info.main_topic, g.group).born_time
    store.close()
