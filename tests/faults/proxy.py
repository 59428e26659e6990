"""A TCP proxy on 127.0.0.1 whose network can go silent: ``cut()`` and ``restore()``.

While cut, the proxy forwards nothing in either direction and closes nothing: the worker's
queries are sent and never answered, as through a network that drops packets without a reset.
The bytes held meanwhile go on when the network is restored. It runs an asyncio loop on a
thread of the test process.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class SilentProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._open.set()
        self._ready = threading.Event()
        self.port = 0
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self.upstream_ports: list[int] = []  # the proxy's side of each server connection
        self._thread = threading.Thread(target=self._serve, name="silent-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> asyncio.Server:
            server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            return server

        self.server = self.loop.run_until_complete(start())
        self._ready.set()
        self.loop.run_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        await self._open.wait()  # a connection made while cut hangs, as its SYN-ACK would
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        self.upstream_ports.append(up_writer.get_extra_info("sockname")[1])
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self._open.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self._open.wait()  # cut while this was on its way: hold it
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def cut(self) -> None:
        self.loop.call_soon_threadsafe(self._open.clear)

    def restore(self) -> None:
        self.loop.call_soon_threadsafe(self._open.set)

    def close(self) -> None:
        """Close every connection (so that the test database can be dropped), then stop."""

        async def shut() -> None:
            self.server.close()
            for writer in self._writers:
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
