"""The kick after a promotion (wg_mesh.gateway.ha_kick): which peers are stale, and the schedule (a second after the
promotion, every second, only while some peer has no handshake since, at most `for_s`)."""

from __future__ import annotations

from wg_mesh.gateway.ha_kick import Kick, stale_peers

HEAD = "priv\tpub\t51820\toff\n"


def dump(**handshakes: int) -> str:
    return HEAD + "".join(f"{k}\t(none)\t1.2.3.4:51820\t10.9.0.0/16\t{t}\t0\t0\t25\n" for k, t in handshakes.items())


def test_stale_peers_are_those_without_a_handshake_since_the_promotion_second() -> None:
    text = dump(A=0, B=999, C=1000, D=1001)
    assert stale_peers(text, 1000.7) == ["A", "B"]  # 1 s resolution: a handshake within the promotion's second is fresh
    assert stale_peers(HEAD, 1000.0) == []
    assert stale_peers(HEAD + "garbage line\n", 1000.0) == []


def test_the_kick_starts_a_second_after_the_promotion_and_ends_when_all_are_fresh() -> None:
    kick = Kick(every_s=1.0, for_s=20.0)
    assert kick.due(0.0, dump(A=0)) == []  # no promotion yet
    kick.promoted(10.0, 1000.2)
    assert kick.due(10.5, dump(A=0, B=0)) == []  # the promotion's own ping is in flight
    assert kick.due(11.0, dump(A=0, B=0)) == ["A", "B"]
    assert kick.due(11.5, dump(A=0, B=0)) == []
    assert kick.due(12.0, dump(A=1001, B=0)) == ["B"]  # A answered: never touched again
    assert kick.due(13.0, dump(A=1001, B=1002)) == []  # all fresh: the kick ends
    assert kick.due(14.0, dump(A=1001, B=0)) == []  # a later stale peer is WireGuard's own business


def test_the_kick_is_bounded_and_stops_at_a_demotion() -> None:
    kick = Kick(every_s=1.0, for_s=5.0)
    kick.promoted(0.0, 1000.0)
    kicked = [t for t in range(1, 10) if kick.due(float(t), dump(A=0))]
    assert kicked == [1, 2, 3, 4, 5]
    kick.promoted(100.0, 2000.0)
    assert kick.due(101.0, dump(A=0)) == ["A"]
    kick.stop()
    assert kick.due(102.0, dump(A=0)) == []
