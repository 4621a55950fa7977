"""The one mechanism that carries a cloud model's state into the lab's namespaces for an HA site (docs/ha.md 11),
shared by the AWS model (awsmodel.py: moto's EIP holder and route targets) and the GCP model (gcpmodel.py: the
VM whose access config holds the static address, and the ILB's next hop): the internet namespace's 1:1 NAT of the
site's public address to the holder (haplan.nat_rules, atomically) and the VPC router's remote routes (the workload
host's routes, haplan.route_targets), each applied only when it changed.
"""

from __future__ import annotations

from typing import Any

from wg_mesh.lab.fabric.haplan import HaSite, route_targets
from wg_mesh.lab.fabric.netns import run
from wg_mesh.lab.fabric.networks import apply_nat


class Applier:
    """One site's last applied state: `holder` (letter of the gateway with the public address, None: nobody),
    `routes` (remote range -> the private address of its target, None: none)."""

    def __init__(self, ha: HaSite) -> None:
        self.ha = ha
        self.holder: str | None = None
        self.routes: dict[str, str | None] = {}
        self.moves = 0

    def apply(self, holder: str | None, routes: dict[str, str | None]) -> bool:
        changed = False
        if holder != self.holder:
            self.moves += 1
            apply_nat(self.ha, holder, self.moves)
            self.holder, changed = holder, True
        if routes != self.routes:
            for argv in route_targets(self.ha, routes):
                run(["ip", "-n", self.ha.host_ns, *argv])
            self.routes, changed = routes, True
        return changed

    def event(self) -> dict[str, Any]:
        letters = {cidr: self.ha.by_private(target) if target else None for cidr, target in self.routes.items()}
        return {"site": self.ha.site, "holder": self.holder, "routes": letters, "moves": self.moves}
