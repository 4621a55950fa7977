"""A gateway's user data: rendered once (`render.cloud_config`), delivered per cloud, and kept under each cloud's limit.

- AWS: at most 16 KB of user data "in raw form, before it is base64-encoded" (EC2 user guide, "Instance user
  data"). The `#cloud-config` text grows by about 420 bytes a peer and crossed that at 16-18 sites, so AWS
  gets it gzip'd (cloud-init uncompresses gzip'd user data: cloud-init docs, "User data formats") through the
  instance's `user_data_base64` (pulumi-aws: "gzip-encoded user data must be base64-encoded and passed via this
  argument"). The gzip is zopfli's (a pinned library that carries its own DEFLATE encoder), byte-identical on
  every machine: the system zlib is not (zlib and zlib-ng give different bytes), and different bytes would
  replace the gateway.
- GCP: the `user-data` metadata value is plain text, at most 262144 bytes (256 KiB) per value (Compute API,
  Metadata items: "their size must be less than or equal to 262144 bytes"). delivery: live carries the agent's
  package as one bundle file (base64 of bzip2: wg_mesh.gateway.bootstrap), as plain text it no longer fits.
- Static sites: the text is a stack output; no limit of ours.

`size_problems` estimates every gateway's delivered size before anything exists (public addresses and keys
are unknown then): with the longest address (255.255.255.255) and random 44-character keys, which is what
real ones are, so the estimate is what `pulumi up` sends to within a few bytes of compression noise.
`validate` and the program both refuse a mesh over a limit; the AWS component checks the real bytes again.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Mapping
from importlib import resources
from typing import Any

import zopfli.gzip

from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
from wg_mesh.gateway import ship
from wg_mesh.plan import inputpolicy, live, metrics, rearmunit, render, reresolveunit, topology
from wg_mesh.plan.topology import PeerAddress

AWS_USER_DATA_LIMIT = 16384  # bytes, raw (here: gzip'd) before base64
GCP_METADATA_VALUE_LIMIT = 262144  # bytes per metadata value
LIMITS = {"aws": AWS_USER_DATA_LIMIT, "gcp": GCP_METADATA_VALUE_LIMIT}
WORST_CASE_IP = "255.255.255.255"


READY_SCRIPT_PATH = "/usr/local/sbin/wg-mesh-ready"
READY_PACKED = "readymark.py.gz.b64"
READY_SOURCE = "readymark.py"
READY_PACKAGE = "python3-botocore"  # Ubuntu's: SigV4 and the instance role's IMDSv2 credentials for wg-mesh-ready
# Ubuntu's PyNaCl (libsodium): the agent verifies each document's Ed25519 signature with it. In noble's main, not
# universe: https://packages.ubuntu.com/noble/python/python3-nacl, "python3-nacl (1.5.0-4build1)" with no
# [universe] mark, where e.g. noble's libnacl-dev is marked "[universe]"; the same PyNaCl 1.5 API as the program's.
VERIFY_PACKAGE = "python3-nacl"


def readiness_extras(
    flags: tuple[str, ...], packages: tuple[str, ...] = (), packed: bool = True
) -> render.CloudInitExtras:
    """The last step of a cloud gateway's first boot: mark itself ready once wg0 is up and forwarding is on
    (wg_mesh.gateway.readymark; `pulumi up` waits for the mark before moving the address and routes:
    wg_mesh.tools.readygate).

    packed False (delivery: live): the script as plain text without comments or docstrings (ship.compact), which
    the gzip of the whole AWS user data compresses better than its own gzip+base64."""
    if packed:
        script = render.File(
            READY_SCRIPT_PATH,
            resources.files("wg_mesh.gateway").joinpath(READY_PACKED).read_text(),
            permissions="0755",
            encoding=metrics.SCRIPT_ENCODING,
        )
    else:
        source = ship.compact(resources.files("wg_mesh.gateway").joinpath(READY_SOURCE).read_text())
        script = render.File(READY_SCRIPT_PATH, source, "0755")
    return render.CloudInitExtras(
        packages=packages, files=(script,), commands=(("python3", READY_SCRIPT_PATH, *flags),)
    )


def cloud_extras(site: AwsSite | GcpSite | StaticSite, packed: bool = True) -> render.CloudInitExtras:
    """What a cloud adds after everything else: the readiness mark (AWS: a tag, GCP: a guest attribute)."""
    if isinstance(site, AwsSite):
        return readiness_extras(("--region", site.region), (READY_PACKAGE,), packed)
    if isinstance(site, GcpSite):
        return readiness_extras(("--cloud", "gcp"), packed=packed)
    return render.CloudInitExtras()


def combined(first: render.CloudInitExtras, then: render.CloudInitExtras) -> render.CloudInitExtras:
    """Both sets of additions; `then`'s commands run after `first`'s."""
    return render.CloudInitExtras(
        packages=(*first.packages, *then.packages),
        files=(*first.files, *then.files),
        commands=(*first.commands, *then.commands),
        units=(*first.units, *then.units),
        setup=(*first.setup, *then.setup),
        start=(*first.start, *then.start),
    )


def agent_extras(
    site_name: str, source: Mapping[str, Any], trust: Mapping[str, Any], ha: Mapping[str, Any] | None = None
) -> render.CloudInitExtras:
    """delivery: live: wg-mesh-agent's package, unit and config; its first fetch (`--once`) writes wg0.conf and the
    metrics mapping before wg-quick@wg0 starts, then it runs as a service. `systemctl enable` reloads systemd's
    configuration itself (systemctl(1)), so the unit written by write_files is known by then. `trust`: agent.json's
    (wg_mesh.plan.live.trust), the key every document must be signed with; PyNaCl verifies it."""
    aws = (READY_PACKAGE,) if source["kind"] == "aws" else ()  # the AWS source's botocore, too
    files = ship.files(site_name, dict(source), ha=dict(ha) if ha is not None else None, trust=dict(trust))
    # a bundle file (GCP): the bzip2 as it is, base64 in the YAML; cloud-init writes the decoded bytes (its write_files
    # encodings: cloudinit/config/cc_write_files.py, canonicalize_extraction, and the cloud-config schema's enum, "b64")
    bundle = (
        (render.File(str(source["bundle_file"]), ship.bundle_base64(str(source["kind"])), "0644", encoding="b64"),)
        if source.get("bundle_file")
        else ()
    )
    return render.CloudInitExtras(
        packages=(*aws, VERIFY_PACKAGE),
        files=(*bundle, *(render.File(path, text, mode) for path, text, mode in files)),
        setup=(tuple(ship.once_command(bundled=ship.bundled(dict(source)))),),
        start=(ship.UNIT_NAME,),
        units=(ship.UNIT_NAME,),
    )


def render_user_data(
    cfg: MeshConfig, site_name: str, wg_conf: str, directory: Mapping[str, PeerAddress], *, cloud_steps: bool = True
) -> str:
    """The `#cloud-config` of a site: wg0.conf, forwarding, metrics, then the cloud's last steps. Every size
    estimate below renders through here, so validate's limits count exactly what the clouds receive.

    cloud_steps=False leaves out the steps that talk to the cloud's own API (AWS's readiness mark): the lab,
    which has no such API, renders everything else exactly as `pulumi up` does."""
    # The INPUT policy first: in force before wg0 or anything listening comes up (wg_mesh.plan.inputpolicy).
    extras = combined(inputpolicy.input_extras(cfg, site_name), metrics.metrics_extras(cfg, site_name, directory))
    extras = combined(extras, rearmunit.rearm_extras(cfg, site_name))  # a dynamic site's watchdog; nothing otherwise
    # DNS-named peers (issue 24): their re-resolver, after wg0 is up (nothing for a site without any)
    plan = topology.interface_plan(cfg, site_name, directory)
    extras = combined(extras, reresolveunit.reresolve_extras(cfg, plan, metrics.TEXTFILE_PATH.rsplit("/", 1)[0]))
    if cloud_steps:
        extras = combined(extras, cloud_extras(cfg.site(site_name)))
    return render.cloud_config(wg_conf, extras, forward=topology.forwards(cfg, site_name))


def render_live_user_data(
    cfg: MeshConfig,
    site_name: str,
    source: Mapping[str, Any],
    *,
    trust: Mapping[str, Any],
    cloud_steps: bool = True,
    ha: Mapping[str, Any] | None = None,
) -> str:
    """delivery: live: the `#cloud-config` of a site without its peers, its MTU or any key (no wg0.conf, no metrics
    mapping): the agent, told where to read them (`source`: wg_mesh.plan.live.agent_source), writes both. Only the
    site's own settings, the mesh's exporter_port and its document signing key (`trust`: wg_mesh.plan.live.trust) are in
    it, so adding a site or rotating a site's key leaves it as it is. `ha` (gateways: 2): the gateway's `ha` object for
    agent.json (wg_mesh.plan.ha)."""
    agent = agent_extras(site_name, source, trust, ha)
    extras = combined(agent, metrics.metrics_extras(cfg, site_name, None, packed=False))
    extras = combined(inputpolicy.input_extras(cfg, site_name), extras)  # first: see render_user_data
    extras = combined(extras, rearmunit.rearm_extras(cfg, site_name))
    if cloud_steps:
        extras = combined(extras, cloud_extras(cfg.site(site_name), packed=False))
    return render.cloud_config(None, extras, forward=topology.forwards(cfg, site_name))


# zopfli's iterations are part of the output format (more: smaller, slower): changing it changes every AWS
# gateway's user data, like upgrading zopfli itself (pinned in requirements.txt for that reason).
ZOPFLI_ITERATIONS = 5


@functools.lru_cache(maxsize=64)  # pure, and slow on purpose (zopfli): the same user data is packed more than once
def aws_gzip_bytes(data: bytes) -> bytes:
    """gzip with mtime 0 and no name: the same bytes for the same input, on every machine with this zopfli."""
    return bytes(zopfli.gzip.compress(data, numiterations=ZOPFLI_ITERATIONS))


def aws_gzip(text: str) -> bytes:
    return aws_gzip_bytes(text.encode())


def aws_user_data_base64(text: str) -> str:
    """What EC2 gets (`user_data_base64`): the gzip'd text, base64. ValueError past EC2's limit."""
    packed = aws_gzip(text)
    if len(packed) > AWS_USER_DATA_LIMIT:
        raise ValueError(
            f"the gateway's user data is {len(packed)} bytes gzip'd, over EC2's {AWS_USER_DATA_LIMIT}-byte limit"
        )
    return base64.b64encode(packed).decode("ascii")


def delivered_size(cloud: str, text: str, exact: bool = False) -> int:
    """Bytes the cloud counts against its limit; not exact: for AWS, a bound when the text alone fits."""
    data = text.encode()
    if cloud == "aws":
        # DEFLATE's fixed codes spend 8 bits on an ASCII byte: never more than the text plus ~20 bytes of framing,
        # so only a text near the limit needs the (pure Python, ~1 ms per KB) compression to know.
        return len(aws_gzip(text)) if exact or len(data) > AWS_USER_DATA_LIMIT - 64 else len(data)
    return len(data)


def _placeholder_key(seed: str) -> str:
    return base64.b64encode(hashlib.sha256(seed.encode()).digest()).decode("ascii")


def worst_case_directory(cfg: MeshConfig) -> dict[str, PeerAddress]:
    private = {name: WORST_CASE_IP for name in topology.private_directory(cfg)}
    return {
        site.name: PeerAddress(WORST_CASE_IP, _placeholder_key(f"public:{site.name}"), private.get(site.name))
        for site in cfg.sites
    }


def estimated_size(cfg: MeshConfig, site_name: str, exact: bool = False) -> int:
    """The delivered size of a site's user data with the longest addresses and random keys."""
    directory = worst_case_directory(cfg)
    plan = topology.interface_plan(cfg, site_name, directory)
    conf = render.wg_quick_conf(plan, _placeholder_key(f"private:{site_name}"))
    return delivered_size(cfg.site(site_name).cloud, render_user_data(cfg, site_name, conf, directory), exact)


def _own_weight(site: AwsSite | GcpSite) -> int:
    """How much a site adds to its peers' user data (its CIDRs and overlay address): the site adding least
    receives the most, so its user data is the largest of its cloud."""
    return sum(len(str(cidr)) + 2 for cidr in site.cidrs) + len(str(site.overlay_ip))


SIZE_MARGIN = 256  # bytes: names and compression noise by which two gateways of one cloud can differ


def largest(
    cfg: MeshConfig, cloud: str, exhaustive: bool = True, exact: bool = False
) -> tuple[int, AwsSite | GcpSite, int] | None:
    """(index, site, estimated bytes) of the largest user data among the cloud's gateways, or None.

    Every gateway's user data holds the whole mesh, so one estimate (the site that adds least to the others)
    decides; only a result within SIZE_MARGIN of the limit has every site of that cloud estimated (unless not
    exhaustive: the benchmarks' curves, where all sites of a cloud have the same shape)."""
    sites = [(i, s) for i, s in enumerate(cfg.sites) if isinstance(s, AwsSite | GcpSite) and s.cloud == cloud]
    if not sites:
        return None
    i, site = min(sites, key=lambda pair: _own_weight(pair[1]))
    size = estimated_size(cfg, site.name, exact)
    if exhaustive and LIMITS[cloud] - SIZE_MARGIN < size <= LIMITS[cloud]:
        return max(((j, s, estimated_size(cfg, s.name)) for j, s in sites), key=lambda t: t[2])
    return i, site, size


# delivery: live: the estimate's Pulumi project and stack (their names are in the agent's config); the AWS component
# checks the real bytes again.
ESTIMATE_PROJECT = "wg-mesh"
ESTIMATE_STACK = "s" * 64


def estimate_trust(
    cfg: MeshConfig, site: AwsSite | GcpSite | StaticSite, project: str = ESTIMATE_PROJECT, stack: str = ESTIMATE_STACK
) -> dict[str, Any]:
    """agent.json's `trust` with a random-looking verify key (44 characters, as a real one) and the longest floor: for
    estimates and renderings outside `pulumi up` (the real key exists only in the stack's state)."""
    return live.trust(cfg, site, project, stack, _placeholder_key("signing"), floor=ESTIMATE_SERIAL)


def live_user_data_size(cfg: MeshConfig, site: AwsSite | GcpSite, exact: bool = False) -> int:
    """The delivered size of a site's live user data: the same for any number of sites (no peer in it)."""
    source = live.agent_source(site, ESTIMATE_PROJECT, ESTIMATE_STACK)
    trust = estimate_trust(cfg, site)
    return delivered_size(site.cloud, render_live_user_data(cfg, site.name, source, trust=trust), exact)


# The longest serial (a counter carrying on from a stamp of ten digits: wg_mesh.tools.serial) and expiry (ten
# digits too).
ESTIMATE_SERIAL = 9_999_999_999


def document_size(cfg: MeshConfig, site_name: str) -> int:
    """The size of a site's signed peer document (the envelope: base64 of the body and a signature) with the longest
    addresses, random keys and the longest serial."""
    directory = worst_case_directory(cfg)
    values = {
        "directory": directory,
        "public_key": _placeholder_key(f"public:{site_name}"),
        "serial": ESTIMATE_SERIAL,
        "not_after": ESTIMATE_SERIAL,
        "seed": _placeholder_key("signing"),
    }
    return len(live.signed_document(cfg, site_name, live.document_scope(ESTIMATE_PROJECT, ESTIMATE_STACK), values))


def live_size_problems(cfg: MeshConfig) -> list[str]:
    """delivery: live: the user data is constant (one estimate per cloud, its longest site name and region; exact
    bytes, the GCP bundle file's base64 included: the same bzip2 on every machine); what grows with the mesh is each
    gateway's peer document, held by Secrets Manager (AWS) or Secret Manager (GCP)."""
    problems = []
    for cloud, limit in LIMITS.items():
        sites = [(i, s) for i, s in enumerate(cfg.sites) if isinstance(s, AwsSite | GcpSite) and s.cloud == cloud]
        if not sites:
            continue
        i, site = max(sites, key=lambda pair: len(pair[1].name) + len(getattr(pair[1], "region", "")))
        try:
            size = live_user_data_size(cfg, site)
        except ValueError as exc:  # the agent's bundle (wg_mesh.gateway.ship.bundle_value): past its bounds, or bz2
            problems.append(f"sites[{i}]: {site.name}'s gateway user data cannot be made: {exc}")
        else:
            if size > limit:
                problems.append(
                    f"sites[{i}]: {site.name}'s gateway user data would be about {size} bytes (limit {limit})"
                )
        store = "a Secrets Manager secret" if cloud == "aws" else "a Secret Manager version"
        for j, other in sites:
            if (size := document_size(cfg, other.name)) > live.DOCUMENT_LIMITS[cloud]:
                problems.append(
                    f"sites[{j}]: {other.name}'s peer document would be about {size} bytes ({store} holds at most "
                    f"{live.DOCUMENT_LIMITS[cloud]}): fewer sites or CIDRs "
                    "(see docs/getting-started/before-you-deploy.md)"
                )
    return problems


def size_problems(cfg: MeshConfig) -> list[str]:
    """A line per cloud whose largest gateway user data (or, live, peer document) would not fit that cloud's limit."""
    if cfg.delivery == "live":
        return live_size_problems(cfg)
    problems = []
    for cloud, limit in LIMITS.items():
        found = largest(cfg, cloud)
        if found is not None and found[2] > limit:
            i, site, size = found
            how = "gzip'd, EC2's limit" if cloud == "aws" else "GCE's limit for a metadata value"
            problems.append(
                f"sites[{i}]: {site.name}'s gateway user data would be about {size} bytes ({how} is {limit}); "
                f"every {cloud.upper()} gateway's user data holds the whole mesh: fewer sites or CIDRs "
                "(see docs/getting-started/before-you-deploy.md)"
            )
    return problems
