"""Hosts stood in by network namespaces: each worker alone in one, PostgreSQL over a veth.

``Hosts(n)`` makes ``n`` network namespaces (``ip netns add``), each joined to the root
namespace by a veth pair with a /30 of its own inside ``10.213.K.0/24`` (``K`` a third octet no
address of this machine uses, searched from the process id on): the root side is
``10.213.K.(4i+1)``, the namespace's ``10.213.K.(4i+2)``. Nothing else is routed: a process in
namespace ``i`` reaches only its own loopback and the root side of its veth. PostgreSQL listens
on 127.0.0.1 alone and is not reconfigured: a forwarder process in the root namespace (``python
-m bench.netns forward``, asyncio) listens on each root-side address, port 5432, and relays
each connection to 127.0.0.1:5432. So a worker in a namespace makes the trip a worker on
another host would make to a proxy in front of its database: a veth (a kernel network stack on
each side) and one more user-space hop.

Every namespace and link is named ``djjobs<pid>n<i>`` / ``dj<pid>h<i>`` (the creating process's
id) and removed when ``Hosts`` closes, on an exception too, and at exit (``atexit``, and on
SIGTERM). Names left by a process that is gone (killed with -9) are removed the next time.
Needs root (``CAP_NET_ADMIN``) and ``ip`` (iproute2).

Usage (the forwarder, which ``Hosts`` starts by itself)::

    python -m bench.netns forward --to 127.0.0.1:5432 10.213.7.1 10.213.7.5
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "djjobs"
NETWORK = "10.213"
PORT = 5432


def available() -> str | None:
    """Why namespaces cannot be made here, or ``None`` if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need `ip` (iproute2)"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def _ip(*args: str, namespace: str | None = None) -> None:
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def _remove(namespace: str, link: str) -> None:
    # Deleting the namespace deletes its end of the veth, and with it the pair; the root end is
    # deleted too in case the namespace was made and the move of the peer failed.
    subprocess.run(["ip", "link", "delete", link], capture_output=True)
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True)


def remove_orphans() -> list[str]:
    """Remove the namespaces and links of creators that are gone; return their names."""
    removed = []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for match in re.finditer(rf"^{PREFIX}(\d+)n(\d+)", names, re.MULTILINE):
        pid, index = match.groups()
        if not Path(f"/proc/{pid}").exists():
            _remove(match.group(0), f"dj{pid}h{index}")
            removed.append(match.group(0))
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for match in re.finditer(r"^\d+: (dj(\d+)h\d+)[@:]", links, re.MULTILINE):
        if not Path(f"/proc/{match.group(2)}").exists():
            subprocess.run(["ip", "link", "delete", match.group(1)], capture_output=True)
            removed.append(match.group(1))
    return removed


def _free_octet() -> int:
    used = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    taken = {int(m) for m in re.findall(rf"\b{NETWORK}\.(\d+)\.", used)}
    # Searched from a point of this process's own, so that two runs starting together on one
    # machine are unlikely to pick the same /24 before either has made its addresses.
    start = os.getpid() % 254
    for step in range(254):
        octet = (start + step) % 254 + 1
        if octet not in taken:
            return octet
    raise RuntimeError(f"no free {NETWORK}.K.0/24 on this machine")


class Hosts:
    """``count`` network namespaces, each with a veth to the root one, and the forwarder."""

    def __init__(self, count: int, *, upstream: str = "127.0.0.1:5432") -> None:
        if count > 63:
            raise ValueError("at most 63 namespaces fit in one /24 of /30s")
        self.count = count
        self.upstream = upstream
        self.names: list[tuple[str, str]] = []  # (namespace, root-side link)
        self.root_side: list[str] = []
        self.inside: list[str] = []
        self.forwarder: subprocess.Popen[str] | None = None
        self._closed = False
        self._sigterm: Any = None

    def __enter__(self) -> Hosts:
        atexit.register(self.close)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            # atexit does not run on a plain SIGTERM: make it an exit, so that it does.
            self._sigterm = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _make(self) -> None:
        remove_orphans()
        octet = _free_octet()
        pid = os.getpid()
        for i in range(self.count):
            namespace, link, peer = f"{PREFIX}{pid}n{i}", f"dj{pid}h{i}", f"dj{pid}p{i}"
            self.names.append((namespace, link))
            host, inside = f"{NETWORK}.{octet}.{4 * i + 1}", f"{NETWORK}.{octet}.{4 * i + 2}"
            _ip("netns", "add", namespace)
            _ip("link", "add", link, "type", "veth", "peer", "name", peer, "netns", namespace)
            _ip("addr", "add", f"{host}/30", "dev", link)
            _ip("link", "set", link, "up")
            _ip("link", "set", "lo", "up", namespace=namespace)
            _ip("addr", "add", f"{inside}/30", "dev", peer, namespace=namespace)
            _ip("link", "set", peer, "up", namespace=namespace)
            self.root_side.append(host)
            self.inside.append(inside)
        self.forwarder = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.netns",
                "forward",
                "--to",
                self.upstream,
                *self.root_side,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.forwarder.stdout is not None
        line = self.forwarder.stdout.readline()
        if not line.startswith("forwarding"):
            raise RuntimeError(f"the forwarder did not start: {line!r}")

    def prefix(self, i: int) -> list[str]:
        """The command prefix that runs a program in namespace ``i``."""
        return ["ip", "netns", "exec", self.names[i][0]]

    def database_url(self, i: int, url: str) -> str:
        """``url`` (a PostgreSQL one) as seen from namespace ``i``: through its forwarder."""
        parsed = urlparse(url)
        netloc = parsed.netloc.rsplit("@", 1)
        auth = f"{netloc[0]}@" if len(netloc) == 2 else ""
        return parsed._replace(netloc=f"{auth}{self.root_side[i]}:{PORT}").geturl()

    def forwarded(self) -> dict[str, int]:
        """Connections the forwarder took so far, by the address they came from (asks it)."""
        if self.forwarder is None or self.forwarder.poll() is not None:
            return {}
        self.forwarder.send_signal(signal.SIGUSR1)
        assert self.forwarder.stdout is not None
        line = self.forwarder.stdout.readline().strip()
        counts: dict[str, int] = {}
        for part in line.removeprefix("connections").split():
            address, _, n = part.partition("=")
            counts[address] = int(n)
        return counts

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
        if self.forwarder is not None and self.forwarder.poll() is None:
            self.forwarder.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.forwarder.wait(10)
            if self.forwarder.poll() is None:
                self.forwarder.kill()
                self.forwarder.wait()
        for namespace, link in self.names:
            _remove(namespace, link)


# -- the forwarder ----------------------------------------------------------------------------


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _forward(listen: list[str], upstream: tuple[str, int]) -> None:
    counts: dict[str, int] = {}

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")[0]
        counts[peer] = counts.get(peer, 0) + 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

    servers = [await asyncio.start_server(accept, address, PORT) for address in listen]
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(
        signal.SIGUSR1,
        lambda: print(
            "connections " + " ".join(f"{a}={n}" for a, n in sorted(counts.items())), flush=True
        ),
    )
    print(f"forwarding {' '.join(listen)} to {upstream[0]}:{upstream[1]}", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.netns")
    commands = parser.add_subparsers(dest="command", required=True)
    forward = commands.add_parser("forward", help="relay ADDRESS:5432 to --to")
    forward.add_argument("--to", default="127.0.0.1:5432")
    forward.add_argument("listen", nargs="+", help="root-side addresses to listen on")
    commands.add_parser("clean", help="remove the namespaces of runs that are gone")
    args = parser.parse_args(argv)
    if args.command == "clean":
        for name in remove_orphans():
            print(f"removed {name}")
        return 0
    host, _, port = args.to.rpartition(":")
    asyncio.run(_forward(args.listen, (host, int(port))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
