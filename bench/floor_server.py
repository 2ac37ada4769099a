"""`python -m bench.floor_server`: the floors' bare grpc.aio server, in its own process.

It does nothing but answer: Stream sends `messages` Blobs of `payload_bytes` bytes each (a new
message object per send, as a real service builds one per event), Ping answers at once. Once
listening it writes one JSON line `{"msg": "floor serving", "port": N}` to stderr, like
`behest serve` does, and it stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator

import grpc

from behest import event_loop
from behest.config import Settings
from bench._floor import floor_pb2, floor_pb2_grpc


class Floor(floor_pb2_grpc.FloorServiceServicer):
    """The least a grpc.aio service can do per message."""

    async def Stream(
        self, request: floor_pb2.Count, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[floor_pb2.Blob]:
        payload = b"x" * request.payload_bytes
        for sequence in range(1, request.messages + 1):
            yield floor_pb2.Blob(sequence=sequence, payload=payload)

    async def Ping(
        self, request: floor_pb2.PingRequest, context: grpc.aio.ServicerContext
    ) -> floor_pb2.PingResponse:
        return floor_pb2.PingResponse()


async def serve(listen: str) -> None:
    server = grpc.aio.server()
    floor_pb2_grpc.add_FloorServiceServicer_to_server(Floor(), server)
    port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = {"msg": "floor serving", "port": port, "event_loop": event_loop.name()}
    print(json.dumps(ready), file=sys.stderr, flush=True)
    await stop.wait()
    await server.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.floor_server")
    parser.add_argument("--listen", default="127.0.0.1:0")
    # The same event loop as the behest servers it is compared with (BEHEST_USE_UVLOOP).
    event_loop.run(serve(parser.parse_args().listen), use_uvloop=Settings.load().use_uvloop)


if __name__ == "__main__":
    main()
