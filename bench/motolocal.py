"""moto (the AWS API emulator) in server mode on loopback, in a thread of this process: the AWS API that the gateway
agent's tests and the benchmarks without root (bench/ha_claim.py, bench/ha_routes.py) talk to. The lab's own moto runs
as a process in the cloud namespace instead (controlplane.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

FAKE_CREDENTIALS = (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"))


@contextmanager
def moto_server(*, as_default: bool = False) -> Iterator[str]:
    """A fresh moto server on 127.0.0.1 (a free port) while the block runs; its endpoint URL.

    `as_default`: also this process's AWS endpoint from now on (AWS_ENDPOINT_URL, left set after the block), with fake
    credentials where none are set, for code that makes its own clients (the agent's)."""
    from moto.server import ThreadedMotoServer

    if as_default:
        for name, value in FAKE_CREDENTIALS:
            os.environ.setdefault(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        if as_default:
            os.environ["AWS_ENDPOINT_URL"] = url
        yield url
    finally:
        server.stop()
