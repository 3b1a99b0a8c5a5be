"""bench/report.py's whole-store section: each script run with ``--report`` and its fragment put in the section,
a script without the option skipped with the reason, and ``--scripts-only`` rewriting that section alone."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def report(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    (tmp_path / "bench_ok.py").write_text(
        "import argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--n', default='1')\n"
        "p.add_argument('--report')\n"
        "a = p.parse_args()\n"
        "open(a.report, 'w').write(f'### ok\\n\\nfigure {a.n}\\n')\n")
    (tmp_path / "bench_old.py").write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    monkeypatch.setattr(mod, "HERE", tmp_path)
    monkeypatch.setattr(mod, "SCRIPTS", [("bench_ok.py", "a script", ["--n", "2"]),
                                         ("bench_old.py", "an older script", [])])
    return mod


def test_fragments_and_skips(report):
    section = "\n".join(report.run_scripts({}))
    assert "### ok\n\nfigure 2" in section  # the script's default arguments
    assert "### old\n\nAn older script: not run in this report (`bench/bench_old.py` has no `--report FILE` " \
           "option yet)." in section
    assert "figure 7" in "\n".join(report.run_scripts({"bench_ok.py": ["--n", "7"]}))


def test_scripts_only_rewrites_its_section_alone(report, tmp_path):
    out = tmp_path / "RESULTS.md"
    out.write_text("# Benchmark results\n\nkernels\n\n## Reference: quoted\n\nrows\n", encoding="utf-8")
    assert report.main(["--scripts-only", "--out", str(out)]) == 0
    first = out.read_text(encoding="utf-8")
    assert first.index("kernels") < first.index("## Whole-store benchmarks") < first.index("## Reference: quoted")
    assert report.main(["--scripts-only", "--out", str(out), "--script-args", "bench_ok.py=--n 5"]) == 0
    second = out.read_text(encoding="utf-8")
    assert second == first.replace("figure 2", "figure 5") and second.count("## Whole-store benchmarks") == 1
    report.write_report({"benchmarks": []}, out)  # a report rebuilt from a saved run keeps the section
    assert "figure 5" in out.read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        report.main(["--scripts-only", "--out", str(out), "--script-args", "bench_nope.py=--x"])
