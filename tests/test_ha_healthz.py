"""/healthz under abuse (issue 20): idle, slow, oversized and surplus connections. The server is one thread; a
connection is a socket with a deadline and a bounded buffer, so none of them costs a thread, and a probe that comes
after them is still answered."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from wg_mesh.gateway.ha_health import MAX_CONNECTIONS, HealthServer, answer

CLIENT_TIMEOUT_S = 30  # a client that would wait longer has found a server that never closes: the test fails


@pytest.fixture
def server() -> Iterator[HealthServer]:
    state = {"status": (200, "active")}
    running = HealthServer(0, lambda: state["status"], host="127.0.0.1")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S)
    sock.settimeout(CLIENT_TIMEOUT_S)
    return sock


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def get(port: int, request: bytes = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") -> bytes:
    with connect(port) as sock:
        sock.sendall(request)
        return read_all(sock)


def test_200_idle_connections_take_no_thread_and_a_probe_is_still_answered(server: HealthServer) -> None:
    before = set(threading.enumerate())
    idle = [connect(server.port) for _ in range(200)]
    try:
        reply = get(server.port)
        assert reply.startswith(b"HTTP/1.0 200 OK\r\n") and reply.endswith(b"\r\n\r\nactive\n")
        # no thread started meanwhile (the old server held one per connection: 200 more); a set, not a count: another
        # test's daemon thread in this process may end meanwhile (an order-dependent failure when it was a count)
        assert not set(threading.enumerate()) - before
        assert len(server.connections) <= MAX_CONNECTIONS
        # the oldest idle ones were closed to make room, at once
        assert idle[0].recv(1) == b""
    finally:
        for sock in idle:
            sock.close()


def test_surplus_connections_close_the_oldest() -> None:
    running = HealthServer(0, lambda: (200, "active"), host="127.0.0.1", max_connections=4)
    running.start()
    try:
        first, *rest = [connect(running.port) for _ in range(4)]
        assert get(running.port).startswith(b"HTTP/1.0 200 ")  # the fifth: the first makes room
        assert first.recv(1) == b""
        for sock in (first, *rest):
            sock.close()
    finally:
        running.stop()


def test_a_slow_client_is_closed_at_its_deadline() -> None:
    running = HealthServer(0, lambda: (200, "active"), host="127.0.0.1", timeout_s=0.2)
    running.start()
    try:
        with connect(running.port) as sock:
            sock.sendall(b"GET /heal")  # and nothing more
            assert read_all(sock) == b""  # closed without an answer (a hang would raise TimeoutError)
    finally:
        running.stop()


def test_an_oversized_request_is_refused_after_a_bounded_read(server: HealthServer) -> None:
    with connect(server.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 4096)
        reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.0 431 ")


def test_answers(server: HealthServer) -> None:
    assert get(server.port, b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 404 ")
    assert get(server.port, b"POST /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 405 ")
    assert get(server.port, b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.0 400 ")
    head = get(server.port, b"HEAD /healthz HTTP/1.0\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 ") and head.endswith(b"\r\n\r\n")
    assert get(server.port, b"GET /healthz?x=1 HTTP/1.0\n\n").endswith(b"active\n")


def test_a_failing_status_closes_that_connection_and_the_server_lives_on() -> None:
    calls = []

    def status() -> tuple[int, str]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 503, "standby"

    running = HealthServer(0, status, host="127.0.0.1", timeout_s=0.5)
    running.start()
    try:
        assert get(running.port) == b""
        assert get(running.port).endswith(b"standby\n")
    finally:
        running.stop()


def test_answer_is_pure() -> None:
    assert answer(b"GET /healthz HTTP/1.1", lambda: (503, "unhealthy: wg0 down")).endswith(b"unhealthy: wg0 down\n")
    assert answer(b"GET /healthz", lambda: (200, "active")).startswith(b"HTTP/1.0 400 ")
