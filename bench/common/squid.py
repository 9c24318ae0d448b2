"""Squid as the HTTP forward proxy in front of a bench's upstream: what a cluster's
egress proxy is (``bench/link.py --proxy``).

On loopback, its own configuration and logs in a directory of its own (squid
started as root runs as Debian's ``proxy`` user, which must reach and write it),
no cache, ``CONNECT`` allowed to the given ports only, and a service name of its
own (it names squid's shared-memory segments).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from common.procs import BenchError, Proc, Procs, find_tool, free_port, wait_port

CONFIG = """http_port 127.0.0.1:{port}
pid_filename {dir}/squid.pid
access_log stdio:{dir}/access.log
cache_log {dir}/cache.log
cache_store_log none
cache deny all
coredump_dir {dir}
pinger_enable off
shutdown_lifetime 0 seconds
acl CONNECT method CONNECT
acl allowed_ports port {ports}
http_access deny CONNECT !allowed_ports
http_access allow localhost
http_access deny all
"""


class Squid:
    """A running squid: ``url`` is what ``-proxy`` takes; ``stop()`` ends it and
    removes its directory."""

    def __init__(self, procs: Procs, ports: list[int], cpu: int | str | None = None) -> None:
        binary = find_tool("squid") or (
            "/usr/sbin/squid" if os.access("/usr/sbin/squid", os.X_OK) else None
        )
        if binary is None:
            raise BenchError("squid is not installed (Debian: apt-get install squid)")
        self._procs = procs
        self.dir = Path(tempfile.mkdtemp(prefix="h2ping-bench-squid-"))
        self.port = free_port()
        conf = CONFIG.format(port=self.port, dir=self.dir, ports=" ".join(map(str, ports)))
        if os.geteuid() == 0:
            conf += "cache_effective_user proxy\n"
            self.dir.chmod(0o777)
        (self.dir / "squid.conf").write_text(conf)
        self.service = f"h2pingbench{self.port}"
        argv = [binary, "-N", "-n", self.service, "-f", str(self.dir / "squid.conf")]
        self.proc: Proc = procs.start("squid", argv, cpu=cpu)
        wait_port(self.port, self.proc, timeout=30.0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tunnels(self) -> int:
        """Tunnels squid has logged (one line each, when it ends)."""
        try:
            text = (self.dir / "access.log").read_text()
        except FileNotFoundError:
            return 0
        return sum(" CONNECT " in line and "TCP_TUNNEL/200" in line for line in text.splitlines())

    def stop(self) -> None:
        self._procs.stop(self.proc, timeout=15.0)
        for segment in Path("/dev/shm").glob(f"{self.service}-*"):
            segment.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)
