"""What the user data writes for the gateway agent (`delivery: live`). Pure: text in, text out.

API (wg_mesh.plan.userdata calls these; nothing here depends on the peer set or on any key):
- `package_files(kind) -> list[(path, text, mode)]`: the agent's modules for a source kind ("aws", "gcp", "file")
  as plain text under /usr/local/lib/wg-mesh/wgmesh_gateway/ (the package renamed; its imports are relative):
  MODULES plus that cloud's SOURCE_MODULES, without docstrings, comments and blank lines (`compact`; the code is
  unchanged, a test compares the syntax trees).
- `bundle(kind) -> (json bytes, sha256)`: the same modules as one bundle (wg_mesh.gateway.bootstrap), for a source
  with a `bundle_secret` (AWS: its user data ships only BOOT_MODULES and the bundle is a Secrets Manager secret) or a
  `bundle_file` (GCP: its user data ships FILE_BOOT_MODULES and the bundle as one file, BUNDLE_FILE);
  `bundle_value(kind) -> bytes`: its bzip2, the one value both hold (`bundle_base64`: as the SecretVersion's input and
  the b64 file take it). `bundled(source)`: whether its package comes as a bundle (a static site's: plain modules).
- `agent_config(site, source, poll_seconds=10, ha=None, *, trust) -> str`: /etc/wg-mesh/agent.json (0644, no
  secret); `source` is one of `aws_source(...)`, `gcp_source(...)`, `file_source()` (plain dicts); `trust` the
  object every document is checked against (wg_mesh.gateway.trust.parse_trust checks it here already): the agent
  refuses to start without it (exit 2).
- `config_file(site, source, poll_seconds) -> (path, text, mode)`, `unit_file() -> (path, text, mode)`.
- `unit_text() -> str`: wg-mesh-agent.service (After=wg-quick@wg0.service, Restart=always).
- `once_command(timeout_s=300, bundled=False) -> list[str]`: the argv cloud-init runs BEFORE `systemctl enable
  --now wg-quick@wg0` (bundled: installs the bundle first, from where agent.json says; then writes wg0.conf and the
  metrics mapping; exit 1 if no document could be applied in time).
- `files(site, source, poll_seconds) -> list[(path, text, mode)]`: the package (or its boot part) + config + unit; a
  `bundle_file` source's user data writes the bundle too (wg_mesh.plan.userdata.agent_extras).
After writing them: `systemctl daemon-reload`, the once command, wg-quick@wg0, then `systemctl enable --now UNIT`.

Size (`python -m bench.agent_size`): the whole package is ~14 KB gzip'd, too much for EC2's 16 KB next to the
metrics script and the readiness mark; the AWS boot part is ~3.5 KB, and the live AWS user data ~11.5 KB for any mesh.
As plain text the package passed GCE's 256 KiB for a metadata value in 2026-12 (269 KB of user data); as a bundle file
it is ~60 KB of base64 there, and the live GCP user data ~105 KB.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import io
import json
import re
import tokenize
from importlib import resources
from typing import Any

from . import bootstrap
from .trust import parse_trust

LIB_DIR = bootstrap.LIB_DIR
PACKAGE = bootstrap.PACKAGE
# The agent's import closure (agent -> apply -> peerset, sources -> document, mapping -> wgconf) and each source
# kind's own module (imported when agent.json names that kind); a test checks the closure.
MODULES = (
    "__init__.py", "wgconf.py", "relaytrust.py", "trust.py", "signed.py", "reresolve.py", "document.py", "mapping.py",
    "files.py",
    "hostplan.py", "txn.py", "peerset.py", "runner.py", "apply.py", "floor.py", "sources.py",
    "agentmetrics.py",
    "pmtu_probe.py", "pmtu_heal.py", "fallback.py", "pmtu.py",
    "ha.py", "ha_config.py", "ha_health.py", "ha_kick.py", "ha_routes.py", "ha_run.py", "rotation.py", "agentconfig.py",
    "agent.py",
)  # fmt: skip
# each cloud's source and HA adapter (ha_run imports the adapter of agent.json's ha.cloud only)
SOURCE_MODULES = {"aws": ("source_aws.py", "ha_aws.py"), "gcp": ("source_gcp.py", "ha_gcp.py"), "file": ()}
# What an AWS user data ships when the rest comes as a bundle: the bootstrap and what it imports.
BOOT_MODULES = ("__init__.py", "files.py", "sources.py", "source_aws.py", "bootstrap.py")
# What a GCP user data ships next to the bundle file: the bootstrap without the AWS source (a file needs no API).
FILE_BOOT_MODULES = ("__init__.py", "files.py", "sources.py", "bootstrap.py")
# Where a GCP user data writes the bundle (root's, next to the package: read-only to the agent, ProtectSystem=strict).
BUNDLE_FILE = f"{LIB_DIR}/{PACKAGE}.json.bz2"
# The package modules a standalone script (the metrics script; the re-resolver in user-data mode) takes in at ship
# time instead of importing them (`standalone`): files.py, the one way a gateway writes a file.
INLINED = ("files.py",)
_RELATIVE_IMPORT = re.compile(r"from \.(\w+) import \w+(, \w+)*")
FUTURE = "from __future__ import annotations"
CONFIG_PATH = "/etc/wg-mesh/agent.json"
ENVIRONMENT_FILE = "/etc/default/wg-mesh-agent"  # optional: AWS_ENDPOINT_URL, WG_MESH_SECRET_MANAGER_URL (the lab)
UNIT_NAME = "wg-mesh-agent.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
POLL_SECONDS = 10  # AWS and file sources; the issue asks for <= 15 s
DOCUMENT_PATH = "/etc/wg-mesh/document.json"  # static sites: the operator puts the secret stack outputs here
PRIVATE_KEY_PATH = "/etc/wg-mesh/private.key"


def module_source(name: str) -> str:
    return resources.files(__package__ or "wg_mesh.gateway").joinpath(name).read_text()


# Memoized: a pure function of its text, and the user data of every live gateway compacts the same ~25 modules (a
# third of a whole-program run's time before; ~30 distinct texts per process).
@functools.lru_cache(maxsize=128)
def compact(source: str) -> str:
    """The module without docstrings, comments and blank lines (a docstring that is a whole body becomes `pass`).

    Lines are only dropped or cut, never rewritten, so the result does not depend on the Python that renders it
    (ast.unparse would); blank lines inside a multi-line string stay, and so does a script's `#!` line."""
    lines = source.splitlines()
    drop: set[int] = set()
    replace: dict[int, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                end = first.end_lineno or first.lineno
                drop.update(range(first.lineno - 1, end))
                if len(node.body) == 1:
                    replace[first.lineno - 1] = " " * first.col_offset + "pass"
    cut: dict[int, int] = {}
    in_string: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and not (token.start == (1, 0) and token.string.startswith("#!")):
            cut[token.start[0] - 1] = token.start[1]
        elif token.type == tokenize.STRING and token.end[0] > token.start[0]:
            in_string.update(range(token.start[0], token.end[0]))  # 0-based rows after the string's first
    kept = []
    for row, line in enumerate(lines):
        if row in replace:
            line = replace[row]
        elif row in drop:
            continue
        if row in cut:
            line = line[: cut[row]].rstrip()
        if line.strip() or row in in_string:
            kept.append(line)
    return "\n".join(kept) + "\n"


def standalone(name: str) -> str:
    """Module `name` as a script that imports nothing of the package, as a gateway runs it: `compact`, and each
    top-level `from .files import ...` line replaced by files.py's compact code (INLINED; its `from __future__`
    line dropped: the script has its own, first). Lines dropped or inserted, never rewritten (the bytes do not depend
    on the Python that renders them); a test runs the result with a bare python3. ValueError for a relative import of
    anything else, or one that is not a single top-level line."""
    out: list[str] = []
    for line in compact(module_source(name)).splitlines():
        found = _RELATIVE_IMPORT.fullmatch(line)
        if found is None:
            if line.lstrip().startswith("from ."):
                raise ValueError(f"{name}: {line.strip()!r} cannot be inlined (one top-level line, no alias)")
            out.append(line)
            continue
        helper = f"{found.group(1)}.py"
        if helper not in INLINED:
            raise ValueError(f"{name}: imports {helper}, which a standalone script cannot carry ({', '.join(INLINED)})")
        out += [code for code in compact(module_source(helper)).splitlines() if code != FUTURE]
    return "\n".join(out) + "\n"


def modules(kind: str) -> tuple[str, ...]:
    if kind not in SOURCE_MODULES:
        raise ValueError(f"source kind {kind!r} is not one of {', '.join(SOURCE_MODULES)}")
    return (*MODULES, *SOURCE_MODULES[kind])


def package_files(kind: str, names: tuple[str, ...] | None = None) -> list[tuple[str, str, str]]:
    """The package's modules for a source kind (or just `names`), as the user data writes them."""
    chosen = modules(kind) if names is None else names
    return [(f"{LIB_DIR}/{PACKAGE}/{name}", compact(module_source(name)), "0644") for name in chosen]


@functools.cache  # pure: every live gateway's agent.json pins it, and its user data or secret holds its bzip2
def bundle(kind: str) -> tuple[bytes, str]:
    """The package for a source kind as a bundle (wg_mesh.gateway.bootstrap): its JSON text and SHA-256."""
    return bootstrap.encode({name: compact(module_source(name)) for name in modules(kind)})


# bzip2 must give every machine that runs `pulumi up` the same bytes for the same text: a GCP gateway's user data holds
# them (other bytes replace every GCP gateway, back and forth between two machines) and so does an AWS bundle secret
# (other bytes: a new secret version on every run). libbzip2 1.0.8 (Debian 12's, Ubuntu 24.04's, the venv's) gives
# BZIP2_REFERENCE for this sample, and `bundle_value` packs nothing where bz2 gives another.
def bzip2_sample() -> bytes:
    return json.dumps({"files": {f"m{i}.py": f"def f{i}(x):\n    return x * {i}\n" * 40 for i in range(30)}}).encode()


BZIP2_REFERENCE = "710ba173393390f00460e5dcc9afc7cd1453cff004dfb9e3bc5ea2a6bd8527b2"


@functools.cache
def bzip2_is_reference() -> bool:
    return hashlib.sha256(bootstrap.pack(bzip2_sample())).hexdigest() == BZIP2_REFERENCE


@functools.cache  # ~30 ms of bzip2 a kind, and every live user data render and size estimate needs it
def bundle_value(kind: str) -> bytes:
    """A bundle's value (wg_mesh.gateway.bootstrap.pack): bzip2, level 9, of `bundle(kind)`'s text; the bootstrap's
    `unpack` reads it back within its bounds, from an AWS site's bundle secret (a SecretBinary) or a GCP gateway's
    bundle file. ValueError past those bounds (VALUE_LIMIT: Secrets Manager's 65536 bytes; TEXT_LIMIT), or where this
    machine's bzip2 would not give the bytes every other machine gives (bzip2_is_reference)."""
    if not bzip2_is_reference():
        raise ValueError(
            "this Python's bz2 (libbzip2) compresses differently from libbzip2 1.0.8: the agent bundle in every GCP "
            "gateway's user data would differ from the one deployed, and replace them; run `pulumi up` with a Python "
            "linked against libbzip2 1.0.8 (Debian's and Ubuntu's python3 are)"
        )
    text, _ = bundle(kind)
    value = bootstrap.pack(text)
    if len(text) > bootstrap.TEXT_LIMIT or len(value) > bootstrap.VALUE_LIMIT:
        raise ValueError(
            f"the agent bundle is {len(value)} bytes of bzip2 ({len(text)} of text): over the bootstrap's bounds "
            f"({bootstrap.VALUE_LIMIT}, Secrets Manager's limit; {bootstrap.TEXT_LIMIT})"
        )
    return value


def bundle_base64(kind: str) -> str:
    """`bundle_value`, base64: the AWS SecretVersion's `secret_binary` input (the provider stores the decoded bytes:
    terraform-provider-aws internal/service/secretsmanager/secret_version.go, `secret_binary` is validated by
    verify.ValidBase64String and sent as inttypes.Base64Decode(v) in PutSecretValue's SecretBinary), and the content of
    a GCP user data's `encoding: b64` bundle file (cloud-init writes the decoded bytes:
    cloudinit/config/cc_write_files.py, extract_contents). Both therefore hold the same bytes, not this text."""
    return base64.b64encode(bundle_value(kind)).decode("ascii")


def bundled(source: dict[str, Any]) -> bool:
    """Whether the source's package comes as a bundle: from a secret (AWS) or a file the user data writes (GCP)."""
    return bool(source.get("bundle_secret") or source.get("bundle_file"))


def aws_source(
    region: str, document_secret: str, private_key_parameter: str, bundle_secret: str | None = None
) -> dict[str, Any]:
    """`bundle_secret`: the Secrets Manager secret holding the agent's bundle; the user data then ships only
    BOOT_MODULES (EC2's 16 KB)."""
    source = {
        "kind": "aws",
        "region": region,
        "document_secret": document_secret,
        "private_key_parameter": private_key_parameter,
    }
    return source if bundle_secret is None else {**source, "bundle_secret": bundle_secret}


def gcp_source(document_secret: str, private_key_secret: str, bundle_file: str | None = None) -> dict[str, Any]:
    """Both secrets: projects/<project>/secrets/<id>/versions/latest. `bundle_file` (BUNDLE_FILE): the agent's bundle,
    a file the user data writes; the user data then ships only FILE_BOOT_MODULES of the package (GCE's 256 KiB for a
    metadata value)."""
    source = {"kind": "gcp", "document_secret": document_secret, "private_key_secret": private_key_secret}
    return source if bundle_file is None else {**source, "bundle_file": bundle_file}


def file_source(document: str = DOCUMENT_PATH, private_key: str = PRIVATE_KEY_PATH) -> dict[str, Any]:
    return {"kind": "file", "document": document, "private_key": private_key}


def agent_config(
    site: str,
    source: dict[str, Any],
    poll_seconds: int = POLL_SECONDS,
    ha: dict[str, Any] | None = None,
    *,
    trust: dict[str, Any] | None = None,
) -> str:
    """`ha`: the gateway's high-availability settings (gateways: 2; /work/wt/HA.md, wg_mesh.plan.ha); absent otherwise.
    `trust`: agent.json's `trust` object (wg_mesh.gateway.trust: signing_key, scope, site, cidrs, overlay, address,
    masquerade), checked here (ValueError) so a bad one fails `pulumi up`, not the gateway. The agent needs it: an
    agent.json without one is a config error (exit 2); None only for the callers that do not write one yet."""
    body = {"site": site, "interface": "wg0", "poll_seconds": poll_seconds, "source": source}
    if ha is not None:
        body["ha"] = ha
    if trust is not None:
        if parse_trust(trust).site != site:
            raise ValueError(f"trust.site: {trust.get('site')!r} is not {site!r}")
        body["trust"] = trust
    if bundled(source):
        body["bundle_sha256"] = bundle(str(source["kind"]))[1]  # the pin: bootstrap refuses any other bundle
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


def config_file(
    site: str,
    source: dict[str, Any],
    poll_seconds: int = POLL_SECONDS,
    ha: dict[str, Any] | None = None,
    *,
    trust: dict[str, Any] | None = None,
) -> tuple[str, str, str]:
    return (CONFIG_PATH, agent_config(site, source, poll_seconds, ha, trust=trust), "0644")


# What the agent's unit mounts read-only inside the /etc/wg-mesh it may otherwise write (its metrics mapping,
# peers.json): agent.json, the trust anchor (the pinned signing key, the site's facts, the bundle's hash), and the INPUT
# policy the next boot loads (wg_mesh.plan.inputpolicy.RULES_PATH, RULES6_PATH; a test keeps them equal). "-": absent
# ones are skipped (a single host has no INPUT policy; without agent.json the agent exits 2 with its own message).
# systemd.exec(5): "Non-directory paths may be specified as well"; src/core/namespace.c applies the mounts sorted by
# path, parents first, and drops a nested entry only when its parent has the same mode, so the read-only file mounts
# win over the writable directory. Each is its own mount point then: the agent can neither write it (EROFS) nor
# rename or unlink it (EBUSY); it reads agent.json once, at start, so a new one counts from the next start, as ever.
READ_ONLY_PATHS = (CONFIG_PATH, "/etc/wg-mesh/input.rules", "/etc/wg-mesh/input6.rules")


# The sandbox every wg-mesh root service shares (the agent here; wg_mesh.plan.metrics' service, node-exporter's drop-in
# and, without its first two lines, wg-quick@wg0's, which needs /dev/net/tun: wg_mesh.plan.render): no home directories,
# private /tmp and /dev, no kernel modules, logs, cgroups, clock or hostname, other processes' /proc hidden, no
# namespaces, realtime, set-uid files, personality changes or writable-executable memory, native system calls only; a
# filtered call fails with EPERM instead of killing the process.
PRIVATE_DEVICES = """PrivateDevices=yes
PrivateMounts=yes
"""
SANDBOX_BASE = """ProtectHome=yes
PrivateTmp=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallErrorNumber=EPERM
"""
SANDBOX = PRIVATE_DEVICES + SANDBOX_BASE


# The unit's sandbox (`systemd-analyze security --offline=yes`: 2.1, was 6.1; tests/test_units_sandbox.py holds it
# at <= 4.0). What the agent still may do, and why:
# - root, with only CAP_NET_ADMIN (wg, ip addresses/routes/MTU, iptables, net.ipv4 sysctls) and CAP_NET_RAW (ping:
#   path-MTU probes and the HA tunnel probe open a raw ICMP socket unless the image's net.ipv4.ping_group_range
#   admits root, which is not ours to rely on; iptables-legacy's raw socket). Root for the files it writes, all
#   root's (/etc/wireguard 0700, /etc/wg-mesh, /var/lib/wg-mesh and node-exporter's textfile directory, which the
#   package ships root:root 0755): no CAP_DAC_OVERRIDE. No capability can be regained (NoNewPrivileges).
# - the host's network (no PrivateNetwork/IPAddressDeny): it configures it, fetches from the cloud's APIs over
#   HTTPS (any address: regional endpoints) and serves /healthz; AF_NETLINK (ip, wg, iptables-nft), AF_UNIX
#   (wireguard-go's UAPI socket under /run/wireguard, the journal), AF_INET/AF_INET6 (HTTPS, ping, /healthz).
# - writes only where listed, and never its own trust anchor (READ_ONLY_PATHS); /proc/sys read-only except net/ipv4
#   (its hooks: ip_forward, send_redirects, rp_filter). /run/wireguard stays writable for `wg` on wireguard-go (a
#   connect() to its socket), /run/xtables.lock for iptables-legacy's lock; "-": missing paths are skipped.
# - @system-service system calls: it runs ip, wg, wg-quick strip (bash), iptables, sysctl and ping (which calls
#   capset to drop its capabilities: so not ~@privileged).
def unit_text() -> str:
    return f"""[Unit]
Description=wg-mesh agent: applies this gateway's peer document to wg0 (wg syncconf, routes, MTU)
Wants=network-online.target
After=network-online.target wg-quick@wg0.service

[Service]
Type=simple
EnvironmentFile=-{ENVIRONMENT_FILE}
Environment=PYTHONPATH={LIB_DIR}
ExecStart=/usr/bin/python3 -m {PACKAGE}.agent --config {CONFIG_PATH}
Restart=always
RestartSec=5
CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=-/etc/wireguard -/etc/wg-mesh -/var/lib/prometheus/node-exporter -/run/wireguard -/run/xtables.lock
ReadOnlyPaths={" ".join(f"-{path}" for path in READ_ONLY_PATHS)}
ProtectKernelTunables=yes
ReadWritePaths=/proc/sys/net/ipv4
StateDirectory=wg-mesh
{SANDBOX}RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallFilter=@system-service

[Install]
WantedBy=multi-user.target
"""


def unit_file() -> tuple[str, str, str]:
    return (UNIT_PATH, unit_text(), "0644")


def once_command(timeout_s: int = 300, bundled: bool = False) -> list[str]:
    """Through sh so that the first run sees the same optional environment file as the service; `bundled`: the
    bootstrap installs the package first, from the secret or the file agent.json names (and a failed install stops the
    step: the agent is not there)."""
    run = f"PYTHONPATH={LIB_DIR} exec python3 -m {PACKAGE}.agent --config {CONFIG_PATH} --once --timeout {timeout_s}"
    if bundled:
        boot = f"python3 -m {PACKAGE}.bootstrap --config {CONFIG_PATH} --timeout {timeout_s} --lib {LIB_DIR}"
        run = f"PYTHONPATH={LIB_DIR} {boot} && {run}"
    return ["sh", "-c", f"set -a; if [ -r {ENVIRONMENT_FILE} ]; then . {ENVIRONMENT_FILE}; fi; {run}"]


def files(
    site: str,
    source: dict[str, Any],
    poll_seconds: int = POLL_SECONDS,
    ha: dict[str, Any] | None = None,
    *,
    trust: dict[str, Any] | None = None,
) -> list[tuple[str, str, str]]:
    kind = str(source.get("kind"))
    if source.get("bundle_secret"):
        package = package_files(kind, BOOT_MODULES)
    elif source.get("bundle_file"):
        package = package_files(kind, FILE_BOOT_MODULES)
    else:
        package = package_files(kind)
    return [*package, config_file(site, source, poll_seconds, ha, trust=trust), unit_file()]
