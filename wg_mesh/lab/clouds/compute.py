"""A small Compute Engine API and GCE metadata server: the GCP readiness gate's and HA agent's tests serve it on
127.0.0.1 (tests/gce_fake.py), the lab's GCP model (gcpmodel.py) in its cloud namespace for HA sites.

No Compute Engine emulator exists (not on PyPI, not from Google), so this follows the documented REST protocol of
the few calls the gate makes (https://cloud.google.com/compute/docs/reference/rest/v1/instances: get,
getGuestAttributes, addAccessConfig, deleteAccessConfig; addresses.get; zoneOperations, DONE on their second read)
and the guest side's guest-attributes PUT (https://cloud.google.com/compute/docs/metadata/manage-guest-attributes).
It enforces what makes the order matter on GCP: an external address is on one VM at a time, a network interface
takes one access config, and guest attributes need `enable-guest-attributes: TRUE`.

For HA (issue 11, wg_mesh.gateway.ha_gcp) it also models, each rule from Google's reference:
- VMs in several zones of the region (`Vm.zone`; instances and zoneOperations are zonal resources:
  https://cloud.google.com/compute/docs/reference/rest/v1/instances, .../zoneOperations);
- `regionBackendServices.getHealth` (POST .../regions/R/backendServices/BS/getHealth, body {"group": URL of an
  instance group}; answer {"healthStatus": [{"instance": URL, "healthState": "HEALTHY"|"UNHEALTHY"}]}:
  https://cloud.google.com/compute/docs/reference/rest/v1/regionBackendServices/getHealth). Groups map to their
  member VMs (`Cloud.groups`); the state is `Cloud.health` (set by the test, or by a prober model such as the lab's:
  Google's probers decide it, the API only reports it); a group of no VM (or of an unknown one) is a 404;
- the metadata server's instance/name, instance/zone (`projects/NUMBER/zones/ZONE`) and
  instance/service-accounts/default/token ({"access_token", "expires_in", "token_type"}), only with
  `Metadata-Flavor: Google` (https://cloud.google.com/compute/docs/metadata/querying-metadata), answered for
  `Cloud.metadata_of` or the VM a server was started for (`serve(cloud, metadata_of=NAME)`).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "test-token"
PROJECT, ZONE, REGION = "proj", "europe-west3-a", "europe-west3"
LINK = "https://www.googleapis.com/compute/v1/"


@dataclass
class Vm:
    name: str
    nat_ip: str | None  # its one access config, or none
    status: str = "RUNNING"
    guest_attributes_enabled: bool = True
    attributes: dict[str, str] = field(default_factory=dict)  # "namespace/key" -> value
    zone: str = ""  # "": the cloud's zone


@dataclass
class Cloud:
    vms: dict[str, Vm] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # name -> static IP
    metadata_of: str = ""  # which VM the metadata server answers for
    events: list[str] = field(default_factory=list)  # access-config changes, in order
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail: set[str] = field(default_factory=set)  # "deleteAccessConfig:NAME" etc.: operations that end in an error
    lock: threading.Lock = field(default_factory=threading.Lock)
    project: str = PROJECT
    zone: str = ZONE
    groups: dict[str, list[str]] = field(default_factory=dict)  # instance group name -> member VM names
    health: dict[str, str] = field(default_factory=dict)  # VM name -> HEALTHY / UNHEALTHY (the probers' verdict)
    calls: list[str] = field(default_factory=list)  # "METHOD path" of every Compute API call, in order
    tokens: set[str] = field(default_factory=lambda: {TOKEN})  # the bearer tokens admitted (service accounts')

    def holder(self, ip: str) -> Vm | None:
        return next((vm for vm in self.vms.values() if vm.nat_ip == ip), None)


def _instance_json(vm: Vm, cloud: Cloud) -> dict[str, Any]:
    configs = [{"name": "external-nat", "type": "ONE_TO_ONE_NAT", "natIP": vm.nat_ip}] if vm.nat_ip else []
    return {
        "kind": "compute#instance",
        "name": vm.name,
        "status": vm.status,
        "selfLink": f"{LINK}projects/{cloud.project}/zones/{vm.zone or cloud.zone}/instances/{vm.name}",
        "networkInterfaces": [{"name": "nic0", "accessConfigs": configs}],
    }


class Handler(BaseHTTPRequestHandler):
    cloud: Cloud
    metadata_vm: str = ""  # the VM this server's metadata answers for (default: cloud.metadata_of)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any] | str = "") -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"code": status, "message": message}})

    def _operation(self, kind: str, target: str, problem: str | None, zone: str = "") -> None:
        name = f"operation-{len(self.cloud.operations)}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "name": name,
            "operationType": kind,
            "targetLink": target,
            "status": "RUNNING",
            "selfLink": f"{LINK}projects/{self.cloud.project}/zones/{zone or self.cloud.zone}/operations/{name}",
            "reads": 0,
        }
        if problem:
            op["error"] = {"errors": [{"code": "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", "message": problem}]}
        self.cloud.operations[name] = op
        self._send(200, {k: v for k, v in op.items() if k not in ("reads", "error")})

    def do_PUT(self) -> None:  # the guest's metadata server
        path = urllib.parse.urlsplit(self.path).path
        prefix = "/computeMetadata/v1/instance/guest-attributes/"
        if self.headers.get("Metadata-Flavor") != "Google" or not path.startswith(prefix):
            return self._error(403, "Metadata-Flavor: Google required")
        value = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        with self.cloud.lock:
            vm = self.cloud.vms[self.cloud.metadata_of]
            if not vm.guest_attributes_enabled:
                return self._error(403, "Guest attributes endpoint access is disabled.")
            vm.attributes[path[len(prefix) :]] = value
        self._send(200)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization", "").removeprefix("Bearer ") not in self.cloud.tokens:
            self._error(401, "Request had invalid authentication credentials.")
            return False
        return True

    def _metadata(self, path: str) -> None:
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._error(403, "Metadata-Flavor: Google required")
        vm = self.cloud.vms[self.metadata_vm or self.cloud.metadata_of]
        answers = {
            "instance/name": vm.name,
            "instance/zone": f"projects/123456789/zones/{vm.zone or self.cloud.zone}",
            "instance/service-accounts/default/token": json.dumps(
                {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
            ),
        }
        if path not in answers:
            return self._error(404, "not found")
        return self._send(200, answers[path])

    def do_GET(self) -> None:
        if self.path.startswith("/computeMetadata/v1/"):
            return self._metadata(urllib.parse.urlsplit(self.path).path.removeprefix("/computeMetadata/v1/"))
        if not self._authorized():
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.removeprefix("/compute/v1/").split("/")
        self.cloud.calls.append(f"GET {'/'.join(parts)}")
        with self.cloud.lock:
            if parts[:3] == ["projects", self.cloud.project, "zones"] and parts[4] == "instances":
                vm = self.cloud.vms.get(parts[5])
                if vm is not None and (vm.zone or self.cloud.zone) != parts[3]:
                    vm = None
                if vm is None:
                    return self._error(404, f"The resource '{parts[5]}' was not found")
                if parts[6:] == ["getGuestAttributes"]:
                    path = query.get("queryPath", "")
                    namespace, key = path.split("/", 1)
                    if path not in vm.attributes:
                        return self._error(404, f"The resource '{path}' of type 'Guest Attribute' was not found.")
                    item = {"namespace": namespace, "key": key, "value": vm.attributes[path]}
                    return self._send(200, {"queryPath": path, "queryValue": {"items": [item]}})
                return self._send(200, _instance_json(vm, self.cloud))
            if parts[4] == "operations":
                op = self.cloud.operations[parts[5]]
                op["reads"] += 1
                if op["reads"] >= 2:
                    op["status"] = "DONE"
                return self._send(200, {k: v for k, v in op.items() if k != "reads"})
            if parts[4] == "addresses":
                ip = self.cloud.addresses[parts[5]]
                holder = self.cloud.holder(ip)
                users = [_instance_json(holder, self.cloud)["selfLink"]] if holder else []
                return self._send(200, {"address": ip, "status": "IN_USE" if holder else "RESERVED", "users": users})
        self._error(404, "not found")

    def do_POST(self) -> None:
        if not self._authorized():
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.removeprefix("/compute/v1/").split("/")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        self.cloud.calls.append(f"POST {'/'.join(parts)}")
        if parts[2:3] == ["regions"] and parts[4] == "backendServices" and parts[6:] == ["getHealth"]:
            return self._health(str(body.get("group", "")))
        with self.cloud.lock:
            vm, verb = self.cloud.vms[parts[5]], parts[6]
            problem = None
            if f"{verb}:{vm.name}" in self.cloud.fail:
                problem = "injected failure"
            elif query.get("networkInterface") != "nic0":
                return self._error(400, "networkInterface required")
            elif verb == "deleteAccessConfig":
                if vm.nat_ip is None or query.get("accessConfig") != "external-nat":
                    problem = "no such access config"
                else:
                    self.cloud.events.append(f"{vm.name} -{vm.nat_ip}")
                    vm.nat_ip = None
            elif verb == "addAccessConfig":
                holder = self.cloud.holder(body.get("natIP", ""))
                if vm.nat_ip is not None:
                    problem = "At most one access config currently supported."
                elif holder is not None:
                    problem = f"External IP address: {body['natIP']} is already in-use."
                else:
                    vm.nat_ip = body["natIP"]
                    self.cloud.events.append(f"{vm.name} +{vm.nat_ip}")
            else:
                return self._error(404, "not found")
            self._operation(verb, _instance_json(vm, self.cloud)["selfLink"], problem, vm.zone or self.cloud.zone)

    def _health(self, group: str) -> None:
        name = group.rsplit("/instanceGroups/", 1)[-1] if "/instanceGroups/" in group else ""
        with self.cloud.lock:
            members = [self.cloud.vms[m] for m in self.cloud.groups.get(name, []) if m in self.cloud.vms]
            if not members:
                return self._error(404, f"The resource '{group}' was not found")
            status = [
                {
                    "instance": _instance_json(vm, self.cloud)["selfLink"],
                    "healthState": self.cloud.health.get(vm.name, "UNHEALTHY"),
                }
                for vm in members
            ]
        self._send(200, {"kind": "compute#backendServiceGroupHealth", "healthStatus": status})


def serve(cloud: Cloud, metadata_of: str = "", host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"cloud": cloud, "metadata_vm": metadata_of})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
