"""Squid (Debian's) as the HTTP forward proxy in front of the test servers: what a
cluster's egress proxy is. Started by the test on a free loopback port, with its
own configuration, logs and optional Basic credentials in the test's directory.

The tunnel's idle timeout is ``read_timeout``: squid closes a CONNECT tunnel on
which nothing was read from the server for that long, as an appliance's idle
timer would. Squid writes a tunnel's access-log line when the tunnel ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import pathlib
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from ..conftest import free_port
from . import find_binary, running_process

#: Squid's helper that checks Basic credentials against an htpasswd-style file.
NCSA_AUTH = "/usr/lib/squid/basic_ncsa_auth"

CONFIG = """
http_port 127.0.0.1:{port}
pid_filename {dir}/squid.pid
access_log stdio:{dir}/access.log
cache_log {dir}/cache.log
cache_store_log none
cache deny all
coredump_dir {dir}
pinger_enable off
shutdown_lifetime 0 seconds
# The tunnel's idle timeout: nothing read from the server this long closes it.
read_timeout {idle_timeout:g} seconds
client_lifetime 1 hour
acl CONNECT method CONNECT
acl allowed_ports port {ports}
http_access deny CONNECT !allowed_ports
{auth}
http_access allow localhost
http_access deny all
"""

AUTH = """auth_param basic program {helper} {dir}/passwd
auth_param basic realm h2ping-tests
auth_param basic children 2
acl authenticated proxy_auth REQUIRED
http_access deny !authenticated"""


@dataclass
class Squid:
    port: int
    workdir: pathlib.Path
    credentials: tuple[str, str] | None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The proxy's URL, with its credentials when it wants some."""
        if self.credentials is None:
            return f"http://{self.address}"
        user, password = self.credentials
        return f"http://{user}:{password}@{self.address}"

    def access_log(self) -> str:
        """What squid logged so far (a tunnel's line comes when it ends)."""
        try:
            return (self.workdir / "access.log").read_text()
        except FileNotFoundError:
            return ""

    def connects(self) -> list[str]:
        """The access log's CONNECT lines."""
        return [line for line in self.access_log().splitlines() if " CONNECT " in line]


def _crypt(password: str) -> str:
    """An MD5-crypt hash (``$1$``) of ``password``, by the system's crypt(3), which
    is also what basic_ncsa_auth checks it with."""
    name = ctypes.util.find_library("crypt")
    if name is None:
        raise RuntimeError("no libcrypt to hash the test proxy's password")
    library = ctypes.CDLL(name)
    library.crypt.restype = ctypes.c_char_p
    library.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = "$1$" + secrets.token_hex(4) + "$"
    hashed: bytes | None = library.crypt(password.encode(), salt.encode())
    if not hashed or not hashed.startswith(b"$1$"):
        raise RuntimeError("crypt(3) made no MD5-crypt hash")
    return hashed.decode()


@contextlib.asynccontextmanager
async def run_squid(
    ports: Iterable[int],
    *,
    credentials: tuple[str, str] | None = None,
    idle_timeout: float = 120.0,
) -> AsyncIterator[Squid]:
    """Squid on a free loopback port, allowing CONNECT to ``ports`` only (any other
    is answered 403), asking for ``credentials`` (Basic) when given."""
    binary = find_binary("squid", "squid", "/usr/sbin/squid")
    # Its own directory under /tmp: started as root, squid runs as Debian's "proxy"
    # user (it refuses to run as root), which must reach and write it; a test's
    # tmp_path lies under a directory only root may enter.
    with tempfile.TemporaryDirectory(prefix="h2ping-squid-") as name:
        workdir = pathlib.Path(name)
        auth = ""
        if credentials is not None:
            if not os.access(NCSA_AUTH, os.X_OK):
                raise AssertionError(f"squid's {NCSA_AUTH} is missing: reinstall squid")
            user, password = credentials
            (workdir / "passwd").write_text(f"{user}:{_crypt(password)}\n")
            (workdir / "passwd").chmod(0o644)
            auth = AUTH.format(helper=NCSA_AUTH, dir=workdir)
        port = free_port()
        conf = CONFIG.format(
            port=port,
            dir=workdir,
            idle_timeout=idle_timeout,
            ports=" ".join(str(p) for p in ports) or "1",
            auth=auth,
        )
        if os.geteuid() == 0:
            conf += "cache_effective_user proxy\n"
            workdir.chmod(0o777)
        (workdir / "squid.conf").write_text(conf)
        # -N: in the foreground, no daemon; -f: this configuration only; -n: a
        # service name of its own, which names its shared-memory segments (two
        # squids of one name cannot run at once).
        service = f"h2pingtest{port}"
        argv = [binary, "-N", "-n", service, "-f", str(workdir / "squid.conf")]
        try:
            async with running_process(argv, port, workdir, timeout=30.0):
                yield Squid(port, workdir, credentials)
        finally:
            for segment in pathlib.Path("/dev/shm").glob(f"{service}-*"):  # a killed one's
                segment.unlink(missing_ok=True)
