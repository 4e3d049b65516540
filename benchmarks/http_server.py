"""``bert-compress serve`` in a child process on a free loopback port, for the load benchmark and the tests.

The server is started with ``--port 0`` (the kernel picks a free port, so no other process can take it between
choosing and binding), its address read from uvicorn's "running on" line, and it is used once ``/ready`` says
the model is warmed up. Every wait is bounded in time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from compress.core.errors import CompressError

RUNNING = re.compile(r"Uvicorn running on http://([0-9.]+):(\d+)")


class ServerProcess:
    """A ``serve`` child process: ``url`` once started; :meth:`stop` sends SIGTERM and returns its exit code."""

    def __init__(self, model: str | os.PathLike, flags: Sequence[str] = (), launcher: Sequence[str] | None = None,
                 env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None, start_timeout: float = 120.0):
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="bert-compress-serve-", suffix=".log", delete=False)
        command = [*(launcher or [sys.executable, "-m", "compress"]), "serve", str(model), "--host", "127.0.0.1",
                   "--port", "0", *flags]
        self.process = subprocess.Popen(command, stdout=self.log_file, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                        stdin=subprocess.DEVNULL)
        self.pid = self.process.pid
        self.url = self._wait_started(start_timeout)
        self.wait_ready(start_timeout)

    def log(self) -> str:
        return Path(self.log_file.name).read_text(encoding="utf-8", errors="replace")

    def _wait_started(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = RUNNING.search(self.log())
            if found:
                return f"http://{found.group(1)}:{found.group(2)}"
            if self.process.poll() is not None:
                raise CompressError(f"serve exited with {self.process.returncode} before listening:\n"
                                    f"{self.log()[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise CompressError(f"serve did not listen within {timeout:.0f} s:\n{self.log()[-3000:]}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/ready", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self.process.poll() is not None:
                raise CompressError(f"serve exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.05)
        self.kill()
        raise CompressError(f"serve was not ready within {timeout:.0f} s:\n{self.log()[-3000:]}")

    def rss_bytes(self) -> int:
        """The server's resident memory now (Linux ``/proc``)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise CompressError(f"no VmRSS for process {self.pid}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code once it has stopped (killed past ``timeout``, and then an error)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise CompressError(f"serve did not stop within {timeout:.0f} s of SIGTERM:\n{self.log()[-3000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.process.poll() is None:
                self.stop(30)
        finally:
            self.kill()
            self.log_file.close()
            os.unlink(self.log_file.name)
