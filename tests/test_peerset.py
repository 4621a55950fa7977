"""wg_mesh.gateway.peerset: whole peers added or removed as `wg set` commands, so the peers that stay keep their
AllowedIPs (a `wg syncconf` re-sets them, and wireguard-go drops a packet looked up meanwhile); anything else None."""

from __future__ import annotations

from wg_mesh.gateway.peerset import peer_commands
from wg_mesh.gateway.txn import WgPeer, WgState

A, B, C = ("A" * 43 + "=", "B" * 43 + "=", "C" * 43 + "=")
RUNNING = WgState("k" * 43 + "=", "p" * 43 + "=", 51820, "off", {
    A: WgPeer(A, ("10.1.0.0/16", "10.200.0.1/32"), "198.51.100.1:51820", 25),
    B: WgPeer(B, ("10.2.0.0/16",), "198.51.100.2:51820", 25),
})  # fmt: skip


def config(*peers: tuple[str, str, str], key: str = "k" * 43 + "=", port: int = 51820, extra: str = "") -> str:
    text = f"[Interface]\nPrivateKey = {key}\nListenPort = {port}\n{extra}"
    for public, ips, endpoint in peers:
        text += f"\n[Peer]\nPublicKey = {public}\nAllowedIPs = {ips}\nEndpoint = {endpoint}\nPersistentKeepalive = 25\n"
    return text


KEPT_A = (A, "10.200.0.1/32, 10.1.0.0/16", "198.51.100.1:51820")
KEPT_B = (B, "10.2.0.0/16", "198.51.100.2:51820")


def test_a_peer_added_and_one_removed_touch_only_those_peers() -> None:
    added = peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_B, (C, "10.3.0.0/16", "198.51.100.3:51820")))
    assert added == [["wg", "set", "wg0", "peer", C, "allowed-ips", "10.3.0.0/16", "persistent-keepalive", "25",
                      "endpoint", "198.51.100.3:51820"]]  # fmt: skip
    assert peer_commands("wg0", RUNNING, config(KEPT_A)) == [["wg", "set", "wg0", "peer", B, "remove"]]
    assert peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_B)) == []
    moved = peer_commands("wg0", RUNNING, config(KEPT_A, (B, "10.2.0.0/16", "203.0.113.2:51820")))
    assert moved == [["wg", "set", "wg0", "peer", B, "endpoint", "203.0.113.2:51820"]]


def test_anything_else_is_left_to_syncconf() -> None:
    assert peer_commands("wg0", RUNNING, config(KEPT_A, (B, "10.2.0.0/16, 10.4.0.0/16", "x:1"))) is None
    assert peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_B, key="n" * 43 + "=")) is None
    assert peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_B, port=51821)) is None
    assert peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_B, extra="FwMark = 1\n")) is None
    assert peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_A)) is None  # a peer twice
    assert peer_commands("wg0", RUNNING, config(KEPT_A, KEPT_B) + "PresharedKey = x\n") is None
    assert peer_commands("wg0", RUNNING, "garbage") is None
