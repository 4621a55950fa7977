"""The lab's clouds for `delivery: live`: the stores a gateway's agent reads, and what `pulumi up` writes into them.

* AWS: a moto server (`python -m moto.server`, the AWS API emulator) in the lab's cloud namespace
  `<prefix>-cloud`, wired to the internet namespace like any public endpoint; the gateways reach it through their
  VPC router and 1:1 NAT. Documents and the agent's bundle go to Secrets Manager, private keys to SSM Parameter
  Store SecureStrings, with boto3 (`awsctl.py`, a process in that namespace).
* GCP: a GCE metadata server per GCP gateway at 169.254.169.254:80 inside the gateway's namespace (its service
  account's token), and Secret Manager's REST API in the cloud namespace, which holds documents and private keys
  (`gce.py`; their data are files written here). The gateway's service account token is the only accessor of its
  site's secrets.
* static: /etc/wg-mesh/document.json and /etc/wg-mesh/private.key (0600) in the gateway's own mount namespace,
  as the operator would copy them from the stack outputs.

Where each site's store is (secret names, files) is read from the site's own /etc/wg-mesh/agent.json
in its rendered user data: the lab never repeats the program's naming. The agents get the endpoints only by
configuration: /etc/default/wg-mesh-agent (the unit's EnvironmentFile), which this module writes into each gateway.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Interface
from pathlib import Path, PurePosixPath
from typing import IO, Any

import wg_mesh
from wg_mesh.config import MeshConfig
from wg_mesh.gateway import document, ship
from wg_mesh.lab.clouds import gce
from wg_mesh.lab.fabric.netns import LabError, Node, netns_id, run, tool_env
from wg_mesh.lab.fabric.networks import ip, veth
from wg_mesh.lab.fabric.plan import LabPlan
from wg_mesh.lab.machines import cloudinit
from wg_mesh.lab.machines.build import BuiltLab
from wg_mesh.plan import live, signing

AGENT_CONFIG = PurePosixPath("/etc/wg-mesh/agent.json")
AGENT_ENV = PurePosixPath("/etc/default/wg-mesh-agent")
# The cloud APIs' public address: the last /30 of the transit range (sites take it from the bottom).
CLOUD_INTERNET, CLOUD_API = IPv4Interface("198.19.255.253/30"), IPv4Interface("198.19.255.254/30")
CLOUD_IF = "cloudapi"
MOTO_PORT, SECRET_MANAGER_PORT = 5000, 8080
AWS_ENDPOINT = f"http://{CLOUD_API.ip}:{MOTO_PORT}"
SECRET_MANAGER_URL = f"http://{CLOUD_API.ip}:{SECRET_MANAGER_PORT}"
REPO_ROOT = str(Path(wg_mesh.__file__).resolve().parent.parent)
START_TIMEOUT_S = 30.0


def agent_configs(user_data: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """site -> its agent.json, for the sites whose user data installs the agent (`delivery: live`)."""
    found = {}
    for site, text in user_data.items():
        for f in cloudinit.interpret(text).files:
            if f.path == AGENT_CONFIG:
                found[site] = json.loads(f.content)
    return found


def documents(
    cfg: MeshConfig,
    plan: LabPlan,
    public_keys: Mapping[str, str],
    sites: Iterable[str],
    key_at: Mapping[str, int] | None = None,
    *,
    scope: str,
    serial: int,
    seed: bytes,
) -> dict[str, str]:
    """Each site's signed peer document for the mesh made of `sites` (as `pulumi up` with only those sites would write:
    wg_mesh.plan.live.signed_document), with this `serial`, signed with the lab mesh's `seed`; `key_at`: sites whose key
    is announced from that moment (their own document and their peers' entries)."""
    names, key_at = set(sites), key_at or {}
    sub = cfg.model_copy(update={"sites": [s for s in cfg.sites if s.name in names]})
    directory = {name: address for name, address in plan.directory(public_keys, key_at).items() if name in names}
    now = time.time()  # a cloud gateway's document expires (wg_mesh.plan.live.expires), as `pulumi up` signs it
    return {
        name: signing.sign(
            live.peer_document(
                sub,
                name,
                directory,
                public_keys[name],
                scope=scope,
                serial=serial,
                key_at=key_at.get(name),
                not_after=live.expires(cfg.site(name), now),
            ),
            seed,
        )
        for name in names
    }


def published_generation(text: str, trust: Mapping[str, Any]) -> int | None:
    """The generation of a document the lab published for the site of `trust` (agent.json's), or None when the
    site's agent would refuse it: the agent's own decoder decides (no serial floor: the lab's bookkeeping only)."""
    try:
        return document.decode(text, document.parse_trust(trust)).generation
    except ValueError:  # DocumentError too
        return None


def agent_env(source: Mapping[str, Any]) -> str:
    """/etc/default/wg-mesh-agent for a site whose agent reads `source` (the lab's endpoints, dummy credentials)."""
    if source["kind"] == "aws":
        lines = [f"AWS_ENDPOINT_URL={AWS_ENDPOINT}", "AWS_ACCESS_KEY_ID=lab", "AWS_SECRET_ACCESS_KEY=lab"]
        lines.append("AWS_EC2_METADATA_DISABLED=true")
    elif source["kind"] == "gcp":
        lines = [f"WG_MESH_SECRET_MANAGER_URL={SECRET_MANAGER_URL}"]
    else:
        lines = []
    return "".join(f"{line}\n" for line in ["# written by the wg-mesh lab: its cloud endpoints", *lines])


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)
        out.write(data)
    tmp.replace(path)


def wait_for_log(path: Path, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and marker in path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


@dataclass
class Published:
    site: str
    generation: int | None  # None: the text is not a valid document (the corrupt-document step)
    at: float  # time.monotonic() when the store held it


class ControlPlane:
    """Start with `start()` (once the lab's namespaces exist, before the gateways are attached); `provision_files`
    gives a starting gateway its environment file and, for a static site, its files; `provision_network` a GCP
    gateway its metadata server; `publish_*` change the stores.
    Every process is started here with its pid recorded in the lab's state; the lab's teardown ends them."""

    def __init__(self, lab: BuiltLab, configs: Mapping[str, Mapping[str, Any]], signing_seed: bytes) -> None:
        self.lab = lab
        self.configs = dict(configs)
        self.signing_seed = signing_seed  # the lab mesh's (LabKeys.signing): its verify key is in every agent.json
        self.serial = 1  # every publish() one more, as `pulumi up`'s counters (wg_mesh.tools.serial)
        self.netns = f"{lab.plan.prefix}-cloud"
        self.root = lab.state.log_dir / "control-plane"
        self.tokens = {site: secrets.token_urlsafe(24) for site, c in configs.items() if c["source"]["kind"] == "gcp"}
        self._aws: subprocess.Popen[str] | None = None
        self._static: dict[str, dict[str, tuple[bytes, int]]] = {}  # not yet started: path -> (data, mode)
        self._bundled: set[str] = set()  # AWS sites whose agent bundle secret exists
        self._metadata: dict[str, tuple[int, int]] = {}  # GCP site -> the netns its metadata server serves in

    def kind(self, site: str) -> str:
        return str(self.configs[site]["source"]["kind"])

    def _log(self, name: str) -> IO[str]:
        return (self.lab.state.log_dir / f"{name}.log").open("a")

    def _track(self, proc: subprocess.Popen[Any], netns: str, what: str) -> None:
        self.lab.state.track(proc.pid, netns, what)

    def start(self) -> None:
        state, inet = self.lab.state, self.lab.plan.internet_ns
        state.namespaces.append(self.netns)  # recorded before it exists: teardown removes it
        state.save()
        run(["ip", "netns", "add", self.netns])
        ip(self.netns, "link", "set", "lo", "up")
        veth(inet, CLOUD_IF, self.netns, "eth0", 1500)
        ip(inet, "address", "add", CLOUD_INTERNET, "dev", CLOUD_IF)
        ip(self.netns, "address", "add", CLOUD_API, "dev", "eth0")
        ip(self.netns, "route", "add", "default", "via", CLOUD_INTERNET.ip)
        cloud = Node(self.netns)
        env = {"PYTHONPATH": REPO_ROOT}
        kinds = {self.kind(site) for site in self.configs}
        if "aws" in kinds:
            with self._log("moto") as log:
                moto = subprocess.Popen(
                    cloud.wrap([sys.executable, "-m", "moto.server", "-H", str(CLOUD_API.ip), "-p", str(MOTO_PORT)]),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=tool_env(),
                    start_new_session=True,
                )  # fmt: skip
            self._track(moto, self.netns, "moto server")
            self._aws = subprocess.Popen(
                cloud.wrap([sys.executable, "-m", "wg_mesh.lab.clouds.awsctl", AWS_ENDPOINT]),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log("awsctl"), text=True,
                env=tool_env(env), start_new_session=True,
            )  # fmt: skip
            self._track(self._aws, self.netns, "aws control plane (boto3)")
            ready = self._aws_reply()
            if not ready.get("ok"):
                raise LabError(f"moto did not start: {ready.get('error')} (see {state.log_dir}/moto.log)")
        if "gcp" in kinds:
            self._serve(cloud, "secretmanager", self.root / "secrets", str(CLOUD_API.ip), SECRET_MANAGER_PORT)
            for site, token in self.tokens.items():
                write_atomic(self.root / "gce" / site / "token", token.encode(), 0o600)

    def _serve(self, node: Node, name: str, root: Path, *address: str | int) -> int:
        root.mkdir(parents=True, exist_ok=True)
        kind = name.split("-")[0]
        (self.lab.state.log_dir / f"{name}.log").unlink(missing_ok=True)  # served again: wait for the new one
        with self._log(name) as log:
            proc = subprocess.Popen(
                node.wrap([sys.executable, "-m", "wg_mesh.lab.clouds.gce", kind, str(root), *map(str, address)]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True,
                env=tool_env({"PYTHONPATH": REPO_ROOT}), start_new_session=True,
            )  # fmt: skip
        self._track(proc, node.netns, f"{kind} server")
        if not wait_for_log(self.lab.state.log_dir / f"{name}.log", "listening", START_TIMEOUT_S):
            raise LabError(f"the lab's {name} server did not start (see {self.lab.state.log_dir}/{name}.log)")
        return proc.pid

    def _aws_reply(self) -> dict[str, Any]:
        assert self._aws is not None and self._aws.stdout is not None
        line = self._aws.stdout.readline()
        return json.loads(line) if line else {"ok": False, "error": "the AWS control plane process ended"}

    def aws_request(self, op: str, region: str, name: str, value: str) -> dict[str, Any]:
        """One of awsctl.py's operations (what `pulumi up` does to an AWS resource), done: its answer; LabError if
        refused."""
        return self._aws_call(op, region, name, value)

    def _aws_call(self, op: str, region: str, name: str, value: str) -> dict[str, Any]:
        assert self._aws is not None and self._aws.stdin is not None
        self._aws.stdin.write(json.dumps({"op": op, "region": region, "name": name, "value": value}) + "\n")
        self._aws.stdin.flush()
        reply = self._aws_reply()
        if not reply.get("ok"):
            raise LabError(f"AWS {op} {name}: {reply.get('error')}")
        return reply

    # --- what a gateway finds when it starts ------------------------------------------------------------------

    def provision(self, site: str, node: Node) -> None:
        """Both of the below for a gateway in `node` (a namespace gateway about to run its user data)."""
        self.provision_network(site, node.netns)
        self.provision_files(site, node.path)

    def provision_files(self, site: str, path: Callable[[str], Path]) -> None:
        """Before the user data's commands run: the lab's endpoints in the agent's EnvironmentFile; a static
        site's files as the operator placed them. `path` maps a path in the gateway to the lab's (a namespace
        gateway's mount namespace, or a booted one's root before it is launched)."""
        write_atomic(path(str(AGENT_ENV)), agent_env(self.configs[site]["source"]).encode(), 0o644)
        for file, (data, mode) in self._static.pop(site, {}).items():
            write_atomic(path(file), data, mode)

    def provision_network(self, site: str, netns: str) -> None:
        """A GCP gateway's metadata server at 169.254.169.254:80 in its network namespace `netns` (a booted
        gateway's own, once it exists: again after a reboot, whose container has a new one)."""
        if site not in self.tokens:
            return
        served = netns_id(netns)
        if served is None:
            raise LabError(f"{site}: no network namespace {netns} to serve its metadata in")
        if self._metadata.get(site) == served:
            return
        self.serve_metadata(netns, f"metadata-{site}", self.root / "gce" / site)
        self._metadata[site] = served

    def serve_metadata(self, netns: str, name: str, root: Path) -> int:
        """A metadata server at 169.254.169.254:80 in `netns` serving the files under `root`; its pid."""
        ip(netns, "address", "add", f"{gce.METADATA_ADDRESS}/32", "dev", "lo")
        return self._serve(Node(netns), name, root)

    def _static_file(self, site: str, path: str, data: bytes) -> None:
        machine = self.lab.machines[site]
        try:
            node = machine.node
        except LabError:  # not started yet: placed by provision()
            self._static.setdefault(site, {})[path] = (data, 0o600)
            return
        write_atomic(node.path(path), data, 0o600)

    # --- what `pulumi up` writes -------------------------------------------------------------------------------

    def publish_agent(self, site: str) -> None:
        """An AWS site's agent bundle (wg_mesh.gateway.bootstrap), the value the program stores, once per site."""
        source = self.configs[site]["source"]
        if source.get("bundle_secret") and site not in self._bundled:
            self._aws_call("secret-binary", source["region"], source["bundle_secret"], ship.bundle_base64("aws"))
            self._bundled.add(site)

    def publish_key(self, site: str, private_key: str) -> None:
        source = self.configs[site]["source"]
        if source["kind"] == "aws":
            self._aws_call("parameter", source["region"], source["private_key_parameter"], private_key)
        elif source["kind"] == "gcp":
            self._gcp_version(site, source["private_key_secret"], private_key.encode())
        else:
            self._static_file(site, source["private_key"], private_key.encode() + b"\n")

    def _gcp_version(self, site: str, name: str, data: bytes) -> None:
        """A new version of the Secret Manager secret `name` (projects/P/secrets/S/versions/latest), readable by the
        site's service account's token only (the program's SecretIamMember)."""
        _, project, _, secret, _, _ = name.split("/")
        base = self.root / "secrets" / project / secret
        versions = [int(p.name) for p in base.glob("[0-9]*") if p.name.isdigit()]
        write_atomic(base / str(max(versions, default=0) + 1), data, 0o600)
        write_atomic(base / "accessors", f"{self.tokens[site]}\n".encode(), 0o600)

    def publish_document(self, site: str, text: str) -> Published:
        source = self.configs[site]["source"]
        if source["kind"] == "aws":
            self._aws_call("secret", source["region"], source["document_secret"], text)
        elif source["kind"] == "gcp":
            self._gcp_version(site, source["document_secret"], text.encode())
        else:
            self._static_file(site, source["document"], text.encode())
        return Published(site, published_generation(text, self.configs[site]["trust"]), time.monotonic())

    def publish(
        self,
        cfg: MeshConfig,
        private_keys: Mapping[str, str],
        public_keys: Mapping[str, str],
        sites: Iterable[str],
        key_at: Mapping[str, int] | None = None,
    ) -> dict[str, Published]:
        """`pulumi up` for the mesh made of `sites`: every key first (a rotated key is in its store before any
        document names its public half), then every document, signed, with a serial above every earlier one (a
        counter changes when a document\'s content does; the lab\'s changes every time, which the agents accept;
        `key_at`: announced keys, see `documents`)."""
        names = [s.name for s in cfg.sites if s.name in set(sites)]
        if not names:  # a fabric started with no agent to feed (the HA fabric test): nothing to publish
            return {}
        for name in names:
            self.publish_agent(name)
            self.publish_key(name, private_keys[name])
        self.serial += 1
        scopes = {str(self.configs[name]["trust"]["scope"]) for name in names}
        if len(scopes) != 1:
            raise LabError(f"the sites' agent.json name {len(scopes)} scopes, not one: {sorted(scopes)}")
        docs = documents(cfg, self.lab.plan, public_keys, names, key_at, scope=scopes.pop(), serial=self.serial,
                         seed=self.signing_seed)  # fmt: skip
        return {name: self.publish_document(name, docs[name]) for name in names}
