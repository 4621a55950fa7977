"""The GCP side of an HA gateway (docs/ha.md section 6), and the one copy of the static-address move.

Standard library only. Compute Engine REST API v1 (https://cloud.google.com/compute/docs/reference/rest/v1/):
instances.get, deleteAccessConfig (query: accessConfig, networkInterface), addAccessConfig (query:
networkInterface; body: an AccessConfig with natIP); addresses.get (`users`: the instances using the address);
zoneOperations, polled by their selfLink until status DONE; regionBackendServices.getHealth (body: {"group": the
instance group's URL}; answer: healthStatus[].healthState HEALTHY/UNHEALTHY for each instance of the group).
`Compute` and `move_address` are also the readiness gate's (wg_mesh.gcpgate imports them): one mechanism.

On a gateway: the token of the instance's service account and its own name and zone come from the metadata server
(computeMetadata/v1/instance/service-accounts/default/token, instance/name, instance/zone, with
`Metadata-Flavor: Google`; GCE_METADATA_HOST overrides the host, as for Google's client libraries and
wg_mesh.gateway.source_gcp); WG_MESH_COMPUTE_ENDPOINT overrides the API base (the lab's model, the tests).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from .ha import NONE, HaConfig

COMPUTE = "https://compute.googleapis.com/compute/v1/"
LINK = "https://www.googleapis.com/compute/v1/"  # the form of selfLinks and of the URLs the API takes in bodies
NAT_NAME = "external-nat"  # the access config name gcloud and the console use
OPERATION_TIMEOUT_S = 300.0
HTTP_TIMEOUT_S = 30.0
METADATA_URL = "http://169.254.169.254"


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


class GcpHa:
    """One gateway's calls (docs/ha.md 6.3). Routes need no call: the ILB follows the health check."""

    def __init__(self, config: HaConfig, metadata: Metadata | None = None, base: str = "") -> None:
        self.config = config
        self.metadata = metadata or Metadata()
        endpoint = base or os.environ.get("WG_MESH_COMPUTE_ENDPOINT") or COMPUTE
        self.api = Compute(self.metadata.token, endpoint, poll_s=0.2, timeout_s=5.0)
        self.instance = self.metadata.instance(config.project)
        self.address = f"projects/{config.project}/regions/{config.region}/addresses/{config.address}"
        service = f"projects/{config.project}/regions/{config.region}/backendServices/{config.backend_service}"
        self.health_path = f"{service}/getHealth"

    def group_url(self, gateway: str) -> str:
        zone, name = self.config.group(gateway)
        return f"{LINK}projects/{self.config.project}/zones/{zone}/instanceGroups/{name}"

    def holder(self) -> str:
        users = self.api.call("GET", self.address).get("users", [])
        if any(_same(u, self.instance) for u in users):
            return "me"
        return "other" if users else NONE

    def other_health(self) -> str | None:
        """Google's view of the other gateway: HEALTHY if an instance of its group is, UNHEALTHY if all reported
        are not, None when Google reports none (yet)."""
        answer = self.api.call("POST", self.health_path, body={"group": self.group_url(self.config.other)})
        states = [s.get("healthState") for s in answer.get("healthStatus", [])]
        if not states:
            return None
        return "HEALTHY" if "HEALTHY" in states else "UNHEALTHY"

    def take_address(self) -> None:
        move_address(self.api, self.instance, self.address)

    def reconcile(self, ranges: Iterable[str], may_write: Callable[[], bool]) -> list[str]:
        """The address to us when nobody holds it (the routes follow the ILB's health check, not us). Never from
        another VM: without a lease, only a claim (Google saw that VM unhealthy) may take it from a holder."""
        if not may_write() or self.holder() != NONE:
            return []
        self.take_address()
        return [f"address {self.config.address}"]
