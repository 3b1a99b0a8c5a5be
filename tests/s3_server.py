"""A real S3-compatible server on loopback for the object-storage tests (docs/object-storage.md).

s3proxy (org.gaul:s3proxy, Apache-2.0) from Maven Central with its ``filesystem`` back end: a Java
process serving the S3 API over a local directory. ``python tests/s3_server.py fetch`` (the
Makefile's ``s3proxy`` target) puts its jar in ``build/s3proxy/``; :func:`start` runs it on a free
loopback port with credentials made up for the session.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = "2.6.0"
ARTIFACT = f"org.gaul:s3proxy:{VERSION}:jar:jar-with-dependencies"
JAR_DIR = ROOT / "build" / "s3proxy"
JAR = JAR_DIR / f"s3proxy-{VERSION}-jar-with-dependencies.jar"
#: pyarrow's AWS SDK signs uploads with checksums s3proxy 2.6 rejects (XAmzContentSHA256Mismatch);
#: "when required" is what both accept (docs/object-storage.md#uploading-a-store).
CLIENT_ENV = {"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED",
              "AWS_RESPONSE_CHECKSUM_VALIDATION": "WHEN_REQUIRED", "AWS_EC2_METADATA_DISABLED": "true"}


#: A request as s3proxy logs it at debug level (:func:`start` with ``log_requests``): its method and URL.
_REQUEST_LINE = re.compile(r"S3ProxyHandler:\d+ \|::\] request: Request\((\w+) (\S+)\)@")


def missing_tools() -> list[str]:
    """The tools fetching or running s3proxy needs that this machine lacks."""
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


def fetch() -> Path:
    """The s3proxy jar, fetched from Maven Central with Maven once (quick when present)."""
    if JAR.exists():
        return JAR
    JAR_DIR.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}",
                           f"-DoutputDirectory={JAR_DIR}"], check=False, cwd=JAR_DIR,
                          capture_output=True, text=True)
    if proc.returncode or not JAR.exists():
        raise RuntimeError(f"mvn dependency:copy of {ARTIFACT} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return JAR


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    """A running s3proxy: its endpoint, the credentials it accepts, and its process."""

    endpoint: str
    access_key: str
    secret_key: str = field(repr=False)
    basedir: Path
    proc: subprocess.Popen = field(repr=False)
    log: Path = field(repr=False)

    def env(self, *, secret_key: str | None = None) -> dict[str, str]:
        """The environment a client reads its credentials from (pyarrow's AWS SDK), with the
        checksum settings s3proxy accepts; ``secret_key`` replaces the right one (to be denied)."""
        return {**CLIENT_ENV, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key if secret_key is None else secret_key}

    def requests(self) -> list[tuple[str, str]]:
        """Every request the server has answered so far, ``(method, URL)`` in order, from its log: the
        server's own count, to check a client's against (needs :func:`start` with ``log_requests``)."""
        return _REQUEST_LINE.findall(self.log.read_text(errors="replace"))

    def filesystem(self, **kwargs):
        """A pyarrow S3FileSystem for this server, with explicit credentials (uploads, set-up)."""
        import pyarrow.fs as pafs  # lazy: only the tests that upload need it

        host = self.endpoint.split("://", 1)[1]
        return pafs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key, endpoint_override=host,
                                 scheme="http", region="us-east-1", allow_bucket_creation=True, **kwargs)

    def upload(self, local: Path, bucket: str, prefix: str) -> str:
        """Upload directory ``local`` under ``s3://bucket/prefix`` (one object per file); its URI."""
        fs = self.filesystem()
        with contextlib.suppress(OSError):
            fs.create_dir(bucket)
        for path in sorted(Path(local).rglob("*")):
            if path.is_file():
                key = f"{bucket}/{prefix}/{path.relative_to(local).as_posix()}"
                with fs.open_output_stream(key) as out:
                    out.write(path.read_bytes())
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        """Stop the server (its process only) and wait for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(basedir: Path, *, timeout: float = 120.0, log_requests: bool = False) -> S3Server:
    """Start s3proxy on a free loopback port over ``basedir`` (its filesystem back end), with
    credentials made up now; returns once it answers. The caller stops it. ``log_requests``: the server
    logs each request it answers (its debug level; :meth:`S3Server.requests` reads them)."""
    jar = fetch()
    port = _free_port()
    basedir.mkdir(parents=True, exist_ok=True)
    access, secret = "rmqfilter-" + secrets.token_hex(4), secrets.token_hex(16)
    conf = basedir.parent / f"s3proxy-{port}.conf"
    conf.write_text("\n".join([
        f"s3proxy.endpoint=http://127.0.0.1:{port}", "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={access}", f"s3proxy.credential={secret}",
        "jclouds.provider=filesystem", f"jclouds.filesystem.basedir={basedir}", ""]), encoding="utf-8")
    log = basedir.parent / f"s3proxy-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar",
                                 str(jar), "--properties", str(conf)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "LOG_LEVEL": "debug" if log_requests else "info"})
    server = S3Server(f"http://127.0.0.1:{port}", access, secret, basedir, proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"s3proxy exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"s3proxy did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit("usage: python tests/s3_server.py fetch")
    if missing_tools():
        print(f"s3proxy: {', '.join(missing_tools())} missing; the object-storage tests will skip", file=sys.stderr)
        sys.exit(1 if os.environ.get("CI") else 0)
    print(fetch())
