"""A lean HTTP/1.1 keep-alive client for the load generator: asyncio streams with h11's state machine.

The load generator shares the machine with the server it measures, so its CPU per request counts against the
server's. httpx 0.28's async client spent about ten times this client's CPU per request (more still with 32
connections in one pool), enough that on two cores the clients, not the server, set the pace of a tiny model.
h11 (what uvicorn parses HTTP with when httptools is absent) on a bare asyncio stream does only what a
benchmark client needs: keep-alive POSTs of a JSON body.
"""

from __future__ import annotations

import asyncio

import h11


class Connection:
    """One keep-alive connection: :meth:`post` sends a request and returns ``(status, headers, body)``."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._h11 = h11.Connection(h11.CLIENT)

    @classmethod
    def to(cls, url: str) -> "Connection":
        """A connection to ``http://HOST:PORT``."""
        host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        return cls(host, int(port))

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        # A keep-alive connection the server closed while it sat idle (uvicorn closes them after 5 s) is replaced
        # before it is used, not discovered by a failed request.
        if self._writer is None or self._h11.our_state is h11.MUST_CLOSE or self._reader.at_eof():
            await self.close()
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            self._h11 = h11.Connection(h11.CLIENT)
        headers = [("Host", f"{self.host}:{self.port}"), ("Content-Type", "application/json"),
                   ("Content-Length", str(len(body)))]
        self._writer.write(self._h11.send(h11.Request(method="POST", target=path, headers=headers))
                           + self._h11.send(h11.Data(data=body)) + self._h11.send(h11.EndOfMessage()))
        status, answer_headers, chunks = 0, {}, []
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                data = await self._reader.read(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                self._h11.receive_data(data)
            elif isinstance(event, h11.Response):
                status = event.status_code
                answer_headers = {k.decode().lower(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the server closed the connection")
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
        return status, answer_headers, b"".join(chunks)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            self._writer = self._reader = None
