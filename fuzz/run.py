"""Build the extensions with AddressSanitizer + UBSan and run every fuzz target for a bounded time.

Usage (what ``make fuzz`` runs)::

    .venv/bin/python fuzz/run.py [--seconds 60] [TARGET ...]

The sanitized build goes to ``build/asan`` (the in-place extensions used by the
tests are untouched). Each target runs under libFuzzer (atheris) with its seed
corpus from ``fuzz/seeds/<target>`` (made from the conformance files and the
golden store by ``fuzz/seeds.py``) and a working corpus in ``build/fuzz-corpus``.
Crashes land in ``fuzz/crashes/``; each one found becomes a regression test.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASAN_LIB = ROOT / "build" / "asan"
SAN_FLAGS = "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g -O1"


def targets() -> list[str]:
    return sorted(p.stem.removeprefix("fuzz_") for p in (ROOT / "fuzz").glob("fuzz_*.py"))


def build() -> None:
    env = dict(os.environ, CFLAGS=SAN_FLAGS, LDFLAGS="-fsanitize=address,undefined")
    shutil.rmtree(ROOT / "build" / "asan-tmp", ignore_errors=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build", "--build-base", "build/asan-tmp",
                    "--build-lib", str(ASAN_LIB), "--force"], cwd=ROOT, env=env, check=True)


def sanitizer_env() -> dict[str, str]:
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                             check=True).stdout.strip()
    return dict(
        os.environ,
        PYTHONPATH=str(ASAN_LIB),
        LD_PRELOAD=libasan,
        ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:handle_segv=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
    )


def run(target: str, seconds: int) -> tuple[int, int, str]:
    corpus = ROOT / "build" / "fuzz-corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = ROOT / "fuzz" / "seeds" / target
    crashes = ROOT / "fuzz" / "crashes"
    crashes.mkdir(exist_ok=True)
    cmd = [sys.executable, str(ROOT / "fuzz" / f"fuzz_{target}.py"), f"-max_total_time={seconds}",
           "-rss_limit_mb=4096", "-timeout=10", f"-artifact_prefix={crashes}/{target}-", str(corpus)]
    if seeds.is_dir():
        cmd.append(str(seeds))
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=sanitizer_env(), capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (ROOT / "build" / f"fuzz-{target}.log").write_text(log)
    done = re.findall(r"Done (\d+) runs in (\d+) second", log)
    runs = int(done[-1][0]) if done else int((re.findall(r"#(\d+)\s", log) or ["0"])[-1])
    return proc.returncode, runs, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="time per target (default 60)")
    parser.add_argument("--no-build", action="store_true", help="reuse build/asan")
    parser.add_argument("targets", nargs="*", help=f"targets (default all: {', '.join(targets())})")
    args = parser.parse_args(argv)
    if not args.no_build:
        build()
    if not (ROOT / "fuzz" / "seeds").is_dir():
        subprocess.run([sys.executable, str(ROOT / "fuzz" / "seeds.py")], cwd=ROOT, check=True)
    failed = 0
    for target in args.targets or targets():
        code, runs, log = run(target, args.seconds)
        verdict = "ok" if code == 0 else f"FAILED (exit {code}, see build/fuzz-{target}.log)"
        print(f"{target:<12} {runs:>10,} executions in {args.seconds}s  {verdict}", flush=True)
        if code:
            failed += 1
            print("\n".join(log.splitlines()[-30:]), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
