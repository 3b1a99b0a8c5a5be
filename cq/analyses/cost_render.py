"""The filtering-cost report as a terminal table and as one self-contained HTML page (inline SVG charts).

No plotting library: the charts are drawn as SVG here, so the page needs nothing but a browser
and the feature needs nothing beyond numpy. How to read the page: docs/cost.md.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence

from ..tags import EXPRESSION_TYPE_SQL92
from .cost import CostReport

__all__ = ["format_table", "render_html"]

#: The frame drawn around every chart (a person sees where a chart begins; a test finds it on screen).
FRAME = "#8c96a0"
_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948")


def _n(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}"
    return f"{v:,}"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.2%}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = []
    for n, r in enumerate([head, *rows]):
        lines.append("  ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


_GROUP_HEAD = ("group", "type", "units", "passed L1", "bloom FP", "delivered", "evals w/o bitmap",
               "evals with (pull)", "CL reads with", "CL MB w/o", "CL MB with", "ns/eval", "Java ns (quoted)")


def _group_rows(report: CostReport) -> list[tuple[str, ...]]:
    return _rows(report.groups)


#: a report over several stores: each broker's rows, the broker after the group
_BROKER_HEAD = ("group", "broker", *_GROUP_HEAD[1:])


def _broker_rows(report: CostReport) -> list[tuple[str, ...]]:
    return [(row[0], b.broker, *row[1:]) for b in report.brokers for row in _rows(b.groups)]


def _brokers_line(report: CostReport) -> str:
    return (f"{len(report.brokers)} brokers ({', '.join(b.broker for b in report.brokers)}): the counts above are "
            "their sums; each broker's own below")


def _missing_lines(report: CostReport) -> list[str]:
    """One line per broker lacking some of the report's groups (the brokers register different ones)."""
    return [f"{b.broker} lacks {', '.join(b.missing_groups)}: not registered there, so its store counts nothing "
            "for them (their rows above sum the brokers that have them)" for b in report.brokers if b.missing_groups]


def _rows(groups) -> list[tuple[str, ...]]:
    mb = 1 / (1 << 20)
    return [(
        g.group, g.expression_type, _n(g.units), _n(g.passed_consume_queue), _n(g.bloom_false_positives),
        _n(g.delivered), _n(g.evaluations_without_bitmap), _n(g.evaluations_with_bitmap),
        _n(g.commit_log_reads_with_bitmap), f"{g.commit_log_bytes_without_bitmap * mb:,.2f}",
        "-" if g.commit_log_bytes_with_bitmap is None else f"{g.commit_log_bytes_with_bitmap * mb:,.2f}",
        "-" if g.ns_per_evaluation is None else f"{g.ns_per_evaluation:,.0f}",
        _n(g.quoted_java_ns_per_evaluation),
    ) for g in groups]


def format_table(report: CostReport) -> str:
    """The report as text for a terminal."""
    r = report
    out = [f"Filtering cost of topic {r.topic} in {r.store}",
           (f"{r.messages:,} messages ({r.units:,} ConsumeQueue units, {r.commit_log_missing:,} no longer in the "
           f"CommitLog); Bloom filter f={r.bloom['f']} n={r.bloom['n']} (k={r.bloom['k']}, m={r.bloom['m']}, "
           f"{r.bloom['bitmap_bytes']} bytes per bitmap)"),
           f"registered SQL92 groups on the topic: {len(r.registered_groups)}"
           + (f" ({', '.join(r.registered_groups[:8])}{', ...' if len(r.registered_groups) > 8 else ''})"
              if r.registered_groups else ""),
           ""]
    if not r.bitmap_available:
        out += [("The topic has no ConsumeQueueExt units: the bitmap cannot be evaluated on this store. "
                "Layer-2-only costs below; the replay shows what bitmaps would do."), ""]
    out.append(_table(_GROUP_HEAD, _group_rows(r), left=2))
    if r.brokers:
        out += ["", _brokers_line(r) + ":", _table(_BROKER_HEAD, _broker_rows(r), left=3), *_missing_lines(r)]
    out.append("")
    out.append(f"dispatch evaluations (every message x every registered group): {_n(r.dispatch_evaluations)}"
               + ("" if r.dispatch_cpu_ms is None else f", {r.dispatch_cpu_ms:.3g} ms measured CPU"))
    out.append(f"ConsumeQueueExt: {r.ext['units']:,} units, {r.ext['unit_bytes']:,} bytes, of which bitmaps "
               f"{r.ext['bitmap_bytes']:,} bytes in {r.ext['bitmaps']:,} units")
    if r.fp_by_groups:
        out += ["", "Bloom false-positive rate against registered groups (bitmaps rebuilt in memory):",
                _table(("groups", "false pos", "negatives", "measured", "predicted"),
                       [(str(x["groups"]), _n(x["false_positives"]), _n(x["negatives"]), _pct(x["fp_rate"]),
                         _pct(x["predicted_fp_rate"])) for x in r.fp_by_groups])]
    if r.fp_by_config:
        out += ["", f"... and against f/n, all {len(r.registered_groups)} groups:",
                _table(("f", "n", "k", "m", "bytes", "measured", "predicted", ""),
                       [(str(c["f"]), str(c["n"]), str(c["k"]), str(c["m"]), str(c["bitmap_bytes"]),
                         _pct(c["fp_rate"]), _pct(c["predicted_fp_rate"]), "store" if c.get("store") else "")
                        for c in r.fp_by_config], left=0)]
    m = r.measurement
    out += ["", (f"ns/eval: measured here ({m['what']}; {m['messages']:,} messages; {m['machine']['cpu']}, "
                f"{m['machine']['cores']} cores, Python {m['machine']['python']}, engine "
                f"{m['machine']['selector_engine']}). Java ns: {r.quoted['what']}:")]
    out += [f"  {ns:>4} ns  {sql}" for sql, ns in r.quoted["ns_per_evaluation"].items()]
    out += ["", "Verdict: " + r.verdict["summary"]]
    return "\n".join(out)


# ------------------------------------------------------------------ SVG
def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">'
            f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="#ffffff" stroke="{FRAME}"/>'
            + "".join(body) + "</svg>")


def _nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for step in (1, 2, 2.5, 5, 10):
        if v <= step * exp:
            return step * exp
    return 10 * exp


def _axis(x0: int, y0: int, w: int, h: int, top: float, fmt) -> list[str]:
    out = [f'<line x1="{x0}" y1="{y0}" x2="{x0 + w}" y2="{y0}" stroke="#333"/>',
           f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 - h}" stroke="#333"/>']
    for i in range(5):
        v = top * i / 4
        y = y0 - h * i / 4
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{fmt(v)}</text>')
    return out


def _legend(x: int, y: int, names: Sequence[str]) -> list[str]:
    out = []
    for i, name in enumerate(names):
        out.append(f'<rect x="{x}" y="{y + 16 * i}" width="12" height="12" fill="{_COLORS[i % len(_COLORS)]}"/>')
        out.append(f'<text x="{x + 18}" y="{y + 16 * i + 10}" font-size="12">{html.escape(name)}</text>')
    return out


def bar_chart(title: str, labels: Sequence[str], series: dict[str, Sequence[float]], unit: str) -> str:
    """Grouped bars: one group of bars per label, one bar per series."""
    width, height, x0, y0 = 860, 340, 80, 260
    w, h = width - x0 - 260, 220
    top = _nice_max(max([v for vals in series.values() for v in vals if v is not None] or [0]))
    body = [(f'<text x="{width / 2}" y="20" font-size="15" text-anchor="middle" font-weight="bold">'
            f'{html.escape(title)}</text>')]
    body += _axis(x0, y0, w, h, top, lambda v: f"{v:,.3g}")
    body.append(f'<text x="16" y="{y0 - h / 2}" font-size="11" transform="rotate(-90 16 {y0 - h / 2})" '
                f'text-anchor="middle">{html.escape(unit)}</text>')
    slot = w / max(1, len(labels))
    bw = slot * 0.8 / max(1, len(series))
    for gi, label in enumerate(labels):
        for si, (_name, vals) in enumerate(series.items()):
            v = vals[gi] or 0
            bh = h * v / top
            x = x0 + gi * slot + slot * 0.1 + si * bw
            body.append(f'<rect x="{x:.1f}" y="{y0 - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                        f'fill="{_COLORS[si % len(_COLORS)]}"><title>{html.escape(label)}: {v:,}</title></rect>')
        text = label if len(label) <= 18 else label[:17] + "…"
        cx = x0 + gi * slot + slot / 2
        body.append(f'<text x="{cx:.1f}" y="{y0 + 14}" font-size="11" text-anchor="end" '
                    f'transform="rotate(-30 {cx:.1f} {y0 + 14})">{html.escape(text)}</text>')
    body += _legend(x0 + w + 20, 40, list(series))
    return _svg(width, height, body, title)


def line_chart(title: str, xs: Sequence[float], series: dict[str, Sequence[float | None]], xlabel: str,
               ylabel: str) -> str:
    """Lines with point markers over a shared x axis (None values are left out)."""
    width, height, x0, y0 = 860, 340, 80, 280
    w, h = width - x0 - 260, 240
    vals = [v for s in series.values() for v in s if v is not None]
    top = _nice_max(max(vals or [0]))
    xmin, xmax = min(xs or [0]), max(xs or [1])
    span = (xmax - xmin) or 1

    def px(x):
        return x0 + w * (x - xmin) / span

    body = [(f'<text x="{width / 2}" y="20" font-size="15" text-anchor="middle" font-weight="bold">'
            f'{html.escape(title)}</text>')]
    body += _axis(x0, y0, w, h, top, lambda v: f"{v * 100:.3g}%" if top <= 1 else f"{v:,.3g}")
    for x in sorted(set(xs)) if len(set(xs)) <= 12 else [xmin, xmin + span / 4, xmin + span / 2,
                                                          xmin + 3 * span / 4, xmax]:
        body.append(f'<text x="{px(x):.1f}" y="{y0 + 16}" font-size="11" text-anchor="middle">{x:,.0f}</text>')
    body.append(f'<text x="{x0 + w / 2}" y="{y0 + 36}" font-size="12" text-anchor="middle">'
                f'{html.escape(xlabel)}</text>')
    body.append(f'<text x="16" y="{y0 - h / 2}" font-size="11" transform="rotate(-90 16 {y0 - h / 2})" '
                f'text-anchor="middle">{html.escape(ylabel)}</text>')
    for si, (_name, ys) in enumerate(series.items()):
        color = _COLORS[si % len(_COLORS)]
        pts = [(px(x), y0 - h * y / top) for x, y in zip(xs, ys) if y is not None]
        if len(pts) > 1:
            body.append('<polyline fill="none" stroke-width="3" stroke="' + color + '" points="'
                        + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        for a, b in pts:
            body.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="4" fill="{color}"/>')
    body += _legend(x0 + w + 20, 40, list(series))
    return _svg(width, height, body, title)


# ------------------------------------------------------------------ HTML
_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
.verdict { background: #fff8e1; border-left: 4px solid #f2b01e; padding: 8px 12px; }
.warn { background: #fdecea; border-left: 4px solid #e15759; padding: 8px 12px; }
figure { margin: 12px 0; } figcaption { font-size: 13px; color: #555; max-width: 860px; }
code { background: #f3f3f3; padding: 0 3px; }
"""


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    h = "".join(f'<th class="{"l" if i < left else ""}">{html.escape(c)}</th>' for i, c in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{html.escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: CostReport) -> str:
    """One self-contained HTML page: the tables, the charts (inline SVG) and how to read them."""
    r = report
    e = html.escape
    parts = [(f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Filtering cost: {e(r.topic)}"
             f"</title><style>{_CSS}</style></head><body>"),
             f"<h1>What broker-side filtering costs on topic <code>{e(r.topic)}</code></h1>",
             (f"<p>Store <code>{e(r.store)}</code>: {r.messages:,} messages in the topic's ConsumeQueues "
             f"({r.commit_log_missing:,} units whose CommitLog record is gone). The broker filters in two layers: "
             "<b>layer 1</b> looks only at the ConsumeQueue unit (the tag hash code, or for SQL92 groups the Bloom "
             "bitmap in the ConsumeQueueExt unit, built at dispatch when <code>enableCalcFilterBitMap</code> and "
             "<code>enableConsumeQueueExt</code> are on); <b>layer 2</b> reads the CommitLog record and evaluates "
             "the SQL92 selector. Without the bitmap every unit reaches layer 2; with it, the dispatcher "
             "(<code>CommitLogDispatcherCalcBitMap</code>) evaluates every registered group's selector on every "
             f"message once, and pulls only evaluate what layer 1 lets through. Bloom filter: f={r.bloom['f']}, "
             f"n={r.bloom['n']}, so k={r.bloom['k']} bits per group in a {r.bloom['m']}-bit "
             f"({r.bloom['bitmap_bytes']}-byte) bitmap shared by {len(r.registered_groups)} registered group(s).</p>")]
    if not r.bitmap_available:
        parts.append("<p class='warn'>This topic has no ConsumeQueueExt units, so the store keeps no bitmap and "
                     "the bitmap cannot be evaluated here: the table shows layer-2-only costs. The replay charts "
                     "show what bitmaps would do if the broker built them.</p>")
    parts.append(f"<p class='verdict'><b>Verdict.</b> {e(r.verdict['summary'])}</p>")
    parts.append("<h2>Per group</h2>")
    parts.append(_html_table(_GROUP_HEAD, _group_rows(r), left=2))
    if r.brokers:
        parts.append(f"<h2>Per broker</h2><p>{e(_brokers_line(r))}.</p>")
        parts.append(_html_table(_BROKER_HEAD, _broker_rows(r), left=3))
        parts += [f"<p class=\"missing\">{e(line)}.</p>" for line in _missing_lines(r)]
    parts.append(f"<p>Dispatch evaluations (every message × every registered group): "
                 f"<b>{_n(r.dispatch_evaluations)}</b>"
                 + ("" if r.dispatch_cpu_ms is None else f", {r.dispatch_cpu_ms:.3g} ms of measured CPU")
                 + f". ConsumeQueueExt: {r.ext['units']:,} units, {r.ext['unit_bytes']:,} bytes, of which "
                 f"bitmaps {r.ext['bitmap_bytes']:,} bytes.</p>")
    names = [g.group for g in r.groups]
    sql_groups = [g for g in r.groups if g.expression_type == EXPRESSION_TYPE_SQL92]
    charts: list[tuple[str, str]] = []
    if sql_groups:
        series = {"without bitmap (pull)": [g.evaluations_without_bitmap for g in sql_groups]}
        if r.bitmap_available:
            series["with bitmap (pull)"] = [g.evaluations_with_bitmap for g in sql_groups]
            series["dispatch share"] = [r.messages for _ in sql_groups]
        charts.append((bar_chart("Selector evaluations per group", [g.group for g in sql_groups], series,
                                 "evaluations"),
                       ("Evaluations of each group's selector at pull without the bitmap (every unit) and with "
                       "it (units layer 1 passes); the dispatch share is what building the bitmap costs per "
                       "registered group (one evaluation per message).")))
    cost_series = {"CommitLog MB read w/o bitmap": [g.commit_log_bytes_without_bitmap / (1 << 20) for g in r.groups]}
    if r.bitmap_available:
        cost_series["CommitLog MB read with bitmap"] = [(g.commit_log_bytes_with_bitmap or 0) / (1 << 20)
                                                        for g in r.groups]
    charts.append((bar_chart("CommitLog bytes read per group at pull", names, cost_series, "MB"),
                   "What each group's pulls read from the CommitLog: layer 2 needs the whole record."))
    if any(g.ns_per_evaluation for g in r.groups):
        cpu = {"CPU ms w/o bitmap": [g.cpu_ms_without_bitmap or 0 for g in sql_groups]}
        if r.bitmap_available:
            cpu["CPU ms with bitmap (pull)"] = [g.cpu_ms_with_bitmap or 0 for g in sql_groups]
        charts.append((bar_chart("Selector CPU per group (measured)", [g.group for g in sql_groups], cpu, "ms"),
                       "Evaluations × the measured nanoseconds per evaluation of the group's selector."))
    if r.fp_by_groups:
        xs = [x["groups"] for x in r.fp_by_groups]
        charts.append((line_chart("Bloom false-positive rate vs registered groups", xs, {
            "measured": [x["fp_rate"] for x in r.fp_by_groups],
            "predicted": [x["predicted_fp_rate"] for x in r.fp_by_groups]},
            "registered SQL92 groups sharing the bitmap", "false-positive rate"),
            ("Bitmaps rebuilt in memory from the selectors' answers with the first 1..N registered groups "
            "(the store is not written). Measured: units whose group bits are all set although the selector "
            "is not TRUE, over all units whose selector is not TRUE. Predicted: (1 − (1 − 1/m)^(k·x))^k "
            "averaged over those units, x = groups matching the unit.")))
    if r.fp_by_config:
        cs = sorted(r.fp_by_config, key=lambda c: c["bitmap_bytes"])
        charts.append((line_chart("Bloom false-positive rate vs bitmap size (all registered groups)",
                                  [c["bitmap_bytes"] for c in cs],
                                  {"measured": [c["fp_rate"] for c in cs],
                                   "predicted": [c["predicted_fp_rate"] for c in cs]},
                                  "bitmap bytes per ConsumeQueueExt unit", "false-positive rate"),
                       "The same replay with other f/n (bitMapLengthConsumeQueueExt follows m)."))
    parts.append("<h2>Charts</h2>")
    parts += [f"<figure>{svg}<figcaption>{e(cap)}</figcaption></figure>" for svg, cap in charts]
    if r.fp_by_groups:
        parts.append("<h2>False positives against registered groups</h2>")
        parts.append(_html_table(("groups", "false positives", "negatives", "measured", "predicted",
                                  "dispatch evaluations"),
                                 [(x["groups"], _n(x["false_positives"]), _n(x["negatives"]), _pct(x["fp_rate"]),
                                   _pct(x["predicted_fp_rate"]), _n(x["dispatch_evaluations"]))
                                  for x in r.fp_by_groups], left=0))
    if r.fp_by_config:
        parts.append("<h2>False positives against f/n</h2>")
        parts.append(_html_table(("f", "n", "k", "m", "bitmap bytes", "measured", "predicted", ""),
                                 [(c["f"], c["n"], c["k"], c["m"], c["bitmap_bytes"], _pct(c["fp_rate"]),
                                   _pct(c["predicted_fp_rate"]), "this store" if c.get("store") else "")
                                  for c in r.fp_by_config], left=0))
    m = r.measurement
    parts.append("<h2>Measured and quoted CPU</h2>")
    parts.append(f"<p><b>Measured</b> here: {e(m['what'])}, on {m['messages']:,} messages of this topic; "
                 f"{e(str(m['machine']['cpu']))}, {m['machine']['cores']} cores, Python "
                 f"{e(m['machine']['python'])}, selector engine {e(m['machine']['selector_engine'])}. "
                 f"<b>Quoted</b>: {e(r.quoted['what'])}.</p>")
    parts.append(_html_table(("selector (quoted)", "Java ns per evaluation"),
                             list(r.quoted["ns_per_evaluation"].items())))
    parts.append("<p>Columns: <i>passed L1</i> units layer 1 let through; <i>bloom FP</i> of those, Bloom hits "
                 "whose selector is not TRUE; <i>delivered</i> what the group receives; <i>evals</i> selector "
                 "evaluations at pull; <i>CL</i> CommitLog records/bytes read at pull. Tag groups have no "
                 "selector: their layer 1 is the tag code.</p></body></html>")
    return "".join(parts)
