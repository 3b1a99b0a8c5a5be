"""Build the extensions with AddressSanitizer + UBSan and run every fuzz target for a bounded time.

Usage (what ``make fuzz`` runs)::

    .venv/bin/python fuzz/run.py [--seconds 60] [TARGET ...]

Each target runs in two phases:

1. coverage-guided fuzzing (libFuzzer through atheris, Python coverage
   feedback) over the normal in-place build, seeded from ``fuzz/seeds/<target>``
   (made from the conformance files and the golden store by ``fuzz/seeds.py``),
   growing a working corpus in ``build/fuzz-corpus/<target>``;
2. every input of that corpus replayed through the extensions rebuilt with
   AddressSanitizer + UBSan in ``build/asan`` (the in-place extensions used by
   the tests are untouched).

The phases are separate because atheris's coverage feedback goes blind when
GCC's libasan is preloaded (its corpus stays at one input), and the clang
runtime that would combine them is not part of this toolchain. Crashes land in
``fuzz/crashes/``; each one found becomes a regression test.
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


def _libfuzzer(target: str, args: list[str], env: dict[str, str], log_name: str) -> tuple[int, str]:
    crashes = ROOT / "fuzz" / "crashes"
    crashes.mkdir(exist_ok=True)
    cmd = [sys.executable, str(ROOT / "fuzz" / f"fuzz_{target}.py"), "-rss_limit_mb=4096", "-timeout=10",
           f"-artifact_prefix={crashes}/{target}-", *args]
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (ROOT / "build" / log_name).write_text(log)
    return proc.returncode, log


def run(target: str, seconds: int) -> dict:
    """Fuzz one target (phase 1), then replay its corpus under the sanitizers (phase 2)."""
    corpus = ROOT / "build" / "fuzz-corpus" / target
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = ROOT / "fuzz" / "seeds" / target
    plain_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD")}
    args = [f"-max_total_time={seconds}", str(corpus)] + ([str(seeds)] if seeds.is_dir() else [])
    code, log = _libfuzzer(target, args, plain_env, f"fuzz-{target}.log")
    done = re.findall(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)", log)
    runs, cov, _, corp = (int(x) for x in done[-1]) if done else (0, 0, 0, 0)
    result = {"target": target, "code": code, "runs": runs, "cov": cov, "corpus": corp, "log": log}
    if code:
        return result
    inputs = sum(1 for _ in corpus.iterdir())
    code, log = _libfuzzer(target, ["-runs=0", str(corpus)], sanitizer_env(), f"fuzz-{target}-asan.log")
    result.update(code=code, replayed=inputs, log=log)
    return result


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
        r = run(target, args.seconds)
        verdict = "ok" if r["code"] == 0 else f"FAILED (exit {r['code']}, see build/fuzz-{target}*.log)"
        print(f"{target:<10} {r['runs']:>9,} executions in {args.seconds}s, coverage {r['cov']} edges, "
              f"corpus {r['corpus']}; {r.get('replayed', 0):,} inputs replayed under ASan+UBSan: {verdict}",
              flush=True)
        if r["code"]:
            failed += 1
            print("\n".join(r["log"].splitlines()[-30:]), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
