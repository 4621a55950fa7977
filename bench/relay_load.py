"""What a relayed site's pinned relay costs the agent: `python -m bench.relay_load [--partners 8,64,512] [--ranges K]
[--runs R]` (no root, seconds).

For each partner count N, a relayed site's agent.json pins its relay and N partners, each with K ranges (its overlay
/32 and K-1 LANs; K = 2 by default; N*K at most 1,024, what the config and a document's relay entry allow), and the
median of R runs of
- `load_config`: agent.json read and checked (trust.relay: no two pinned ranges overlap; issue 33 item 6: every
  range against every other before, quadratic in N*K, ~10-14 s at N = 64, K = 65);
- `decode`: a signed document whose relay peer carries the relay's and min(N*K, 1,022) partner ranges, checked
  against the pin (each entry inside a pinned range, no other peer on a partner's range; quadratic before too);
- the baseline in the same run: json.loads of the same agent.json text, so a figure reads as "k json.loads".
Prints a table, the ratio per pinned range (flat when linear), and one JSON line per N.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import ipaddress
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.stats import print_rows

SITE, RELAY = "office", "relay"
OVERLAY = ipaddress.IPv4Network("100.96.0.0/16")
SEED = bytes(range(32))


def _key(name: str) -> str:
    return base64.b64encode(hashlib.sha256(name.encode()).digest()).decode()


def _ranges(index: int, count: int) -> list[str]:
    """Site `index`'s overlay /32 and count-1 LANs (disjoint /24s in 10.0.0.0/8 by index)."""
    lans = [f"10.{(index * 64 + k) // 256 % 256}.{(index * 64 + k) % 256}.0/24" for k in range(count - 1)]
    return [f"{OVERLAY.network_address + 10 + index}/32", *lans]


def relayed_site(partners: int, per_partner: int) -> tuple[str, str]:
    """(agent.json, a signed document) of a relayed site pinning `partners` partners of `per_partner` ranges."""
    from wg_mesh.gateway import ship
    from wg_mesh.gateway.document import MAX_ALLOWED_IPS, encode_body
    from wg_mesh.gateway.wgconf import InterfacePlan, Peer
    from wg_mesh.plan import signing

    own = ["10.250.0.0/24"]
    relay_ranges = [f"{OVERLAY.network_address + 2}/32", "10.251.0.0/24"]
    pinned = {f"p{i}": _ranges(i, per_partner) for i in range(partners)}
    trust = {
        "signing_key": signing.verify_key_b64(SEED), "scope": "wg-mesh/bench", "site": SITE, "cidrs": own,
        "overlay": str(OVERLAY), "address": f"{OVERLAY.network_address + 1}/16", "masquerade": False,
        "cloud": "static", "relay": {"site": RELAY, "ranges": relay_ranges, "partners": pinned},
    }  # fmt: skip
    config = ship.agent_config(SITE, ship.file_source(), trust=trust)
    carried = [r for ranges in pinned.values() for r in ranges][: MAX_ALLOWED_IPS - len(relay_ranges)]
    relay = Peer(RELAY, _key(RELAY), tuple(relay_ranges + carried), "198.51.100.2:51820", 25)
    other = Peer(
        "cloud", _key("cloud"), (f"{OVERLAY.network_address + 3}/32", "10.252.0.0/16"), "198.51.100.3:51820", 25
    )
    plan = InterfacePlan(SITE, trust["address"], 51820, 1420, 1380, False, (relay, other))
    body = encode_body(plan, _key(SITE), scope="wg-mesh/bench", serial=int(time.time()))
    return config, signing.sign(body, SEED)


def _median(runs: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(partners: int, per_partner: int, runs: int) -> dict[str, Any]:
    from wg_mesh.gateway.agentconfig import load_config
    from wg_mesh.gateway.document import decode

    config_text, document = relayed_site(partners, per_partner)
    config = load_config(config_text)
    assert config.trust is not None
    trust = config.trust
    decode(document, trust)  # it passes: the figure is a real check, not a refusal
    baseline = _median(runs, lambda: json.loads(config_text))
    load = _median(runs, lambda: load_config(config_text))
    check = _median(runs, lambda: decode(document, trust))
    pinned = partners * per_partner
    return {
        "partners": partners, "ranges_per_partner": per_partner, "pinned_ranges": pinned,
        "json_loads_s": baseline, "load_config_s": load, "decode_s": check,
        "load_per_json_loads": load / baseline, "load_us_per_pinned_range": 1e6 * load / pinned,
        "decode_us_per_pinned_range": 1e6 * check / pinned,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_load", description=__doc__.split("\n")[0])
    parser.add_argument("--partners", default="8,64,512", help="partner counts, comma-separated")
    parser.add_argument("--ranges", type=int, default=2, help="ranges per partner (its /32 and LANs), 1..65")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    rows = [measure(int(n), args.ranges, args.runs) for n in args.partners.split(",")]
    columns = [("partners", "partners", ""), ("pinned", "pinned_ranges", ""), ("json.loads s", "json_loads_s", ".5f"),
               ("load_config s", "load_config_s", ".4f"), ("x json", "load_per_json_loads", ".0f"),
               ("us/range", "load_us_per_pinned_range", ".1f"), ("decode s", "decode_s", ".4f"),
               ("us/range", "decode_us_per_pinned_range", ".1f")]  # fmt: skip
    print_rows(rows, columns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
