"""MkDocs hook: publish bench/charts/ beside the benchmarks page.

docs/benchmarks.md includes bench/RESULTS.md (the one home of every measured
figure) with pymdownx.snippets; the report links its charts as ``charts/*.png``.
Rather than keep a second copy of the images under docs/, this hook adds the
files under bench/charts/ to the site as ``charts/*.png``.
"""
from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

BENCH = Path(__file__).resolve().parents[2] / "bench"


def on_files(files: Files, config) -> Files:
    for chart in sorted((BENCH / "charts").glob("*.png")):
        files.append(File(f"charts/{chart.name}", str(BENCH), config["site_dir"], config["use_directory_urls"]))
    return files
