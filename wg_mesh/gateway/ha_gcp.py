"""The GCP side of an HA gateway (docs/ha.md section 6), and the one copy of the static-address move.

Standard library only. Compute Engine REST API v1 (https://cloud.google.com/compute/docs/reference/rest/v1/):
instances.get, deleteAccessConfig (query: accessConfig, networkInterface), addAccessConfig (query:
networkInterface; body: an AccessConfig with natIP); addresses.get (`users`: the instances using the address);
zoneOperations, polled by their selfLink until status DONE; regionBackendServices.getHealth (body: {"group": the
instance group's URL}; answer: healthStatus[].healthState HEALTHY/UNHEALTHY for each instance of the group).
`Compute` and `move_address` are also the readiness gate's (wg_mesh.tools.gcpgate imports them): one mechanism.

On a gateway: the token of the instance's service account and its own name and zone come from the metadata server
(computeMetadata/v1/instance/service-accounts/default/token, instance/name, instance/zone, with
`Metadata-Flavor: Google`; GCE_METADATA_HOST overrides the host, as for Google's client libraries and
wg_mesh.gateway.source_gcp); WG_MESH_COMPUTE_ENDPOINT overrides the API base (the lab's model, the tests).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from .ha import NONE
from .ha_config import HaConfig

COMPUTE = "https://compute.googleapis.com/compute/v1/"
LINK = "https://www.googleapis.com/compute/v1/"  # the form of selfLinks and of the URLs the API takes in bodies
NAT_NAME = "external-nat"  # the access config name gcloud and the console use
OPERATION_TIMEOUT_S = 300.0
HTTP_TIMEOUT_S = 30.0
METADATA_URL = "http://169.254.169.254"
# A standby judges a holder by Google's verdict only once it has seen that VM hold the address this long (the
# machine's settle_s counts from the first "other", whichever VM it was; a replacement makes it another VM).
SETTLE_S = 3.0
ORPHAN_WAIT_S = 5.0  # gateway b's wait before it claims from a holder in no group (a goes first: GcpHa.other_health)


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Compute:
    """Plain REST against the Compute Engine API with a bearer token (`token()` is asked on every call)."""

    def __init__(
        self,
        token: Callable[[], str],
        base: str = COMPUTE,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = 1.0,
        timeout_s: float = HTTP_TIMEOUT_S,
    ) -> None:
        self.token, self.base, self.sleep = token, base.rstrip("/") + "/", sleep
        self.poll_s, self.timeout_s = poll_s, timeout_s

    def url(self, path_or_link: str) -> str:
        """A resource path (`projects/...`) or a selfLink (`https://www.googleapis.com/compute/v1/projects/...`)."""
        return self.base + resource_path(path_or_link)

    def call(
        self, method: str, path: str, query: dict[str, str] | None = None, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        url = self.url(path) + (f"?{urllib.parse.urlencode(query)}" if query else "")
        request = urllib.request.Request(
            url,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer: dict[str, Any] = json.loads(response.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")[:500]) from None

    def run(self, method: str, path: str, query: dict[str, str], body: dict[str, Any] | None = None) -> None:
        """Start a zonal operation and wait until it is DONE; RuntimeError when it failed."""
        operation = self.call(method, path, query, body)
        give_up = time.monotonic() + OPERATION_TIMEOUT_S
        while operation.get("status") != "DONE":
            if time.monotonic() > give_up:
                raise TimeoutError(f"{path}: operation {operation.get('name')} not done in {OPERATION_TIMEOUT_S} s")
            self.sleep(self.poll_s)
            operation = self.call("GET", operation["selfLink"])
        if operation.get("error"):
            raise RuntimeError(f"{path} failed: {json.dumps(operation['error'])[:500]}")


def instance_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/instances/{name}"


def resource_path(path_or_link: str) -> str:
    """`projects/...` from a selfLink (`https://www.googleapis.com/compute/v1/projects/...`) or a path."""
    return path_or_link.split("/compute/v1/", 1)[-1]


def _same(link: str, path: str) -> bool:
    return resource_path(link) == path


def move_address(api: Compute, instance: str, address: str) -> float:
    """Give the static address to `instance`, taking it off whichever VM holds it. Returns the seconds between the
    old holder losing it and the new VM having it (0 when there was no holder or nothing to do). Idempotent."""
    ip = api.call("GET", address)["address"]
    nic = api.call("GET", instance)["networkInterfaces"][0]
    if any(c.get("natIP") == ip for c in nic.get("accessConfigs", [])):
        return 0.0
    # The new VM's ephemeral address first: it serves nothing yet, and a NIC takes one access config.
    for config in nic.get("accessConfigs", []):
        query = {"accessConfig": config["name"], "networkInterface": nic["name"]}
        api.run("POST", f"{instance}/deleteAccessConfig", query)
    released = None
    for user in api.call("GET", address).get("users", []):
        if _same(user, instance):
            continue
        for holder_nic in api.call("GET", user)["networkInterfaces"]:
            for config in holder_nic.get("accessConfigs", []):
                if config.get("natIP") == ip:
                    released = time.monotonic()
                    query = {"accessConfig": config["name"], "networkInterface": holder_nic["name"]}
                    api.run("POST", f"{resource_path(user)}/deleteAccessConfig", query)
    body = {"name": NAT_NAME, "type": "ONE_TO_ONE_NAT", "natIP": ip}
    api.run("POST", f"{instance}/addAccessConfig", {"networkInterface": nic["name"]}, body)
    return 0.0 if released is None else time.monotonic() - released


# --- on the gateway ------------------------------------------------------------------------------------------


class Metadata:
    """The instance's metadata server: its name, zone and service-account token (cached until near expiry)."""

    def __init__(self, base: str = "") -> None:
        host = os.environ.get("GCE_METADATA_HOST")
        self.base = (base or (f"http://{host}" if host else METADATA_URL)).rstrip("/")
        self._token, self._expires = "", 0.0

    def get(self, path: str) -> str:
        request = urllib.request.Request(
            f"{self.base}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"}
        )
        with urllib.request.urlopen(request, timeout=2.0) as response:
            return str(response.read().decode())

    def token(self) -> str:
        if time.monotonic() >= self._expires:
            answer = json.loads(self.get("instance/service-accounts/default/token"))
            self._token = str(answer["access_token"])
            self._expires = time.monotonic() + max(0.0, float(answer.get("expires_in", 0)) - 60)
        return self._token

    def instance(self, project: str) -> str:
        """This VM's resource path (instance/zone answers `projects/NUMBER/zones/ZONE`)."""
        zone = self.get("instance/zone").rsplit("/", 1)[-1]
        return instance_path(project, zone, self.get("instance/name"))


# The active's /healthz answers 200 only while it *knows* it holds the static address (docs/ha.md 6.3, "A stale
# ex-active"): a holder read said "me", and since then no gap longer than WITNESS_S passed without either another such
# read or a /healthz answer. Google marks a backend UNHEALTHY after `unhealthy_threshold` failed probes
# `check_interval_sec` apart (2 x 1 s, wg_mesh.plan.ha.HEALTH_CHECK, which a test compares with this), and only then may
# the standby take the address: a gateway that was frozen (SIGSTOP, a stalled VM) or cut off from the probers and
# the API for longer may have lost it, and must read that it holds it before it answers 200 again. While the probes
# keep arriving and get 200, Google sees it healthy, so nobody can have claimed: a Compute API outage alone keeps it
# serving.
WITNESS_S = 2.0
# An active takes an address that nobody holds only after seeing it unheld this long: a claim in flight
# (deleteAccessConfig on the holder, then addAccessConfig on the claimer, each a zonal operation) shows the address
# unheld for a moment, and the old holder must not take it back then (GCP documents no duration for the operations).
UNHELD_TAKE_S = 10.0


class Witness:
    """Whether this gateway may answer 200 (WITNESS_S above). Thread-safe: the tick reads, /healthz asks."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = WITNESS_S) -> None:
        self.clock, self.window_s = clock, window_s
        self.lock = threading.Lock()
        self.holds = False
        self.last = -1e9

    def read(self, holder: str) -> None:
        """A holder read that answered ("me", "other", "none"); failed reads tell nothing and are not reported."""
        with self.lock:
            self.holds, self.last = holder == "me", self.clock()

    def serving(self) -> bool:
        """Asked by every /healthz: True extends the chain (a probe that got 200 kept Google's verdict HEALTHY)."""
        with self.lock:
            now = self.clock()
            if not self.holds or now - self.last > self.window_s:
                self.holds = False  # until a read says "me" again
                return False
            self.last = now
            return True


class GcpHa:
    """One gateway's calls (docs/ha.md 6.3). Routes need no call: the ILB follows the health check."""

    def __init__(
        self,
        config: HaConfig,
        metadata: Metadata | None = None,
        base: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config, self.clock = config, clock
        self.metadata = metadata or Metadata()
        endpoint = base or os.environ.get("WG_MESH_COMPUTE_ENDPOINT") or COMPUTE
        self.api = Compute(self.metadata.token, endpoint, poll_s=0.2, timeout_s=5.0)
        self.instance = self.metadata.instance(config.project)
        self.address = f"projects/{config.project}/regions/{config.region}/addresses/{config.address}"
        service = f"projects/{config.project}/regions/{config.region}/backendServices/{config.backend_service}"
        self.health_path = f"{service}/getHealth"
        self.witness = Witness(clock)
        self.users: list[str] = []  # the address's users at the last holder read
        self.unheld_since: float | None = None
        self.orphan_since: float | None = None  # the holder is in no group of the site since (gateway b's wait)
        self.judged: list[str] = []  # the holder other_health judges, and since when
        self.judged_since = 0.0

    def group_url(self, gateway: str) -> str:
        zone, name = self.config.group(gateway)
        return f"{LINK}projects/{self.config.project}/zones/{zone}/instanceGroups/{name}"

    def holder(self) -> str:
        self.users = [str(u) for u in self.api.call("GET", self.address).get("users", [])]
        answer = "me" if any(_same(u, self.instance) for u in self.users) else "other" if self.users else NONE
        self.witness.read(answer)
        if answer != NONE:
            self.unheld_since = None
        elif self.unheld_since is None:
            self.unheld_since = self.clock()
        return answer

    def serving(self) -> bool:
        """/healthz may answer 200 (the Witness): an active that does not know it holds the address answers 503."""
        return self.witness.serving()

    def group_health(self, gateway: str) -> dict[str, str]:
        """Google's view of a gateway's instance group: member instance path -> HEALTHY / UNHEALTHY."""
        answer = self.api.call("POST", self.health_path, body={"group": self.group_url(gateway)})
        return {resource_path(str(s.get("instance", ""))): str(s.get("healthState")) for s in
                answer.get("healthStatus", [])}  # fmt: skip

    def other_health(self) -> str | None:
        """Google's view of the gateway that holds the address (the last holder read's), wherever it is: HEALTHY or
        UNHEALTHY as Google reports it in either group; None when Google reports it nowhere yet, or while the holder
        is new to us (SETTLE_S).

        A holder that is in neither group is no backend (a replaced gateway: `pulumi up` put its replacement in its
        group, once ready; wg_mesh.gcp): nothing sends the VPC's traffic to it, so it is UNHEALTHY for the claim, at
        once for gateway a and after `ORPHAN_WAIT_S` for b, so that a replacement of the active takes the address
        and the partner does not race it (one move)."""
        holders = [resource_path(u) for u in self.users if not _same(u, self.instance)]
        if not holders:
            return None
        now = self.clock()
        if holders != self.judged:  # a new holder: Google's verdict on it may still be from before it served 200
            self.judged, self.judged_since, self.orphan_since = holders, now, None
        if now - self.judged_since < SETTLE_S:
            return None
        # the other gateway's group first (where the holder is in a steady pair: one getHealth a tick), then ours
        seen = self.group_health(self.config.other)
        if not any(h in seen for h in holders):
            seen = self.group_health(self.config.gateway)
        states = [seen[h] for h in holders if h in seen]
        if states:
            self.orphan_since = None
            return "HEALTHY" if "HEALTHY" in states else "UNHEALTHY"
        self.orphan_since = now if self.orphan_since is None else self.orphan_since
        wait = 0.0 if self.config.gateway == "a" else ORPHAN_WAIT_S
        return "UNHEALTHY" if now - self.orphan_since >= wait else None

    def take_address(self) -> None:
        move_address(self.api, self.instance, self.address)
        self.witness.read("me")

    def reconcile(self, ranges: Iterable[str], may_write: Callable[[], bool]) -> list[str]:
        """The address to us when nobody has held it for UNHELD_TAKE_S (the routes follow the ILB's health check,
        not us). Never from another VM: without a lease, only a claim (Google saw that VM unhealthy, or it is in no
        group) may take it from a holder."""
        if not may_write() or self.holder() != NONE:
            return []
        if self.unheld_since is None or self.clock() - self.unheld_since < UNHELD_TAKE_S:
            return []
        self.take_address()
        return [f"address {self.config.address}"]
