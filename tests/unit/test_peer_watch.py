"""worker/liveness.py's PeerWatch: a peer is dead when its registry heartbeat stops moving
for dead_after, timed on the watcher's clock; the peer's own clock never matters."""

from __future__ import annotations

from deepagents.worker.liveness import PeerWatch


def test_a_peer_is_dead_after_its_heartbeat_stops_moving_and_reported_once() -> None:
    watch = PeerWatch("me", dead_after_s=3.0)
    assert watch.silent({"me": 1, "peer": 100}, now=0.0) == []
    assert watch.silent({"me": 2, "peer": 200}, now=1.0) == []  # it beats
    assert watch.silent({"me": 3, "peer": 200}, now=3.9) == []
    assert watch.silent({"me": 4, "peer": 200}, now=4.0) == [("peer", 3.0)]
    watch.exposed("peer")
    assert watch.silent({"me": 5, "peer": 200}, now=9.0) == []  # its entries are out already


def test_a_peer_that_beats_again_is_watched_afresh() -> None:
    watch = PeerWatch("me", dead_after_s=3.0)
    watch.silent({"peer": 100}, now=0.0)
    assert watch.silent({"peer": 100}, now=3.0) == [("peer", 3.0)]
    watch.exposed("peer")
    assert watch.silent({"peer": 900}, now=4.0) == []  # woke (a pause): alive again
    assert watch.silent({"peer": 900}, now=7.5) == [("peer", 3.5)]


def test_a_skewed_clock_or_an_old_timestamp_does_not_make_a_live_peer_dead() -> None:
    watch = PeerWatch("me", dead_after_s=3.0)
    # Its clock is an hour behind: its values are old, but they move.
    for tick in range(10):
        assert watch.silent({"peer": tick - 3_600_000}, now=float(tick)) == []


def test_the_watcher_never_judges_itself_and_forgets_peers_gone_from_the_registry() -> None:
    watch = PeerWatch("me", dead_after_s=1.0)
    watch.silent({"me": 1, "peer": 1}, now=0.0)
    assert watch.silent({"me": 1}, now=5.0) == []
    assert watch.silent({"me": 1, "peer": 1}, now=6.0) == []  # back: watched from now
