"""What the gateway agent adds to a gateway's live user data: `python -m bench.agent_size` (no root, no network).

Prints the agent's package gzip'd per source kind, the AWS boot part (what an AWS user data ships when the package
comes from its bundle secret, wg_mesh.gateway.bootstrap), each cloud's bundle against the bootstrap's 64 KB (Secrets
Manager's; the AWS one also through each codec), and prod's live user data per cloud as `pulumi up` renders it
(wg_mesh.plan.userdata) with the headroom left, also as it would be with the whole package in it as plain files (EC2
counts at most 16384 bytes gzip'd, GCE 262144 bytes of a metadata value). The user data does not depend on the mesh's
size. prod is read without its limits checked (wg_mesh.plan.validate.load_mesh), so a user data past its limit is
measured and said to be, not a crash.
"""

from __future__ import annotations

import base64
import bz2
import lzma
from pathlib import Path

from wg_mesh.config import AwsSite, GcpSite
from wg_mesh.gateway import bootstrap, ship
from wg_mesh.plan import live, userdata
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

REPO = Path(__file__).resolve().parent.parent
PROJECT, STACK = "wg-mesh", "prod"


def package_sizes() -> dict[str, int]:
    """The agent's whole package per source kind, gzip'd alone (zopfli, as the AWS user data)."""
    return {
        kind: len(userdata.aws_gzip("".join(text for _, text, _ in ship.package_files(kind))))
        for kind in ship.SOURCE_MODULES
    }


def boot_size() -> int:
    return len(userdata.aws_gzip("".join(text for _, text, _ in ship.package_files("aws", ship.BOOT_MODULES))))


def codec_sizes() -> dict[str, int]:
    """The AWS bundle's JSON text through each codec the stdlib offers (the bundle secret uses bzip2: the smallest), and
    the zopfli gzip it was before, as a SecretBinary and as the base64 a SecretString needs."""
    text, _ = ship.bundle("aws")
    gzipped = userdata.aws_gzip_bytes(text)
    return {
        "plain": len(text),
        "gzip (zopfli)": len(gzipped),
        "gzip (zopfli), base64": len(base64.b64encode(gzipped)),
        "xz (preset 9)": len(lzma.compress(text, preset=9)),
        "bzip2 (level 9)": len(bz2.compress(text, 9)),
    }


def live_sizes() -> dict[str, int]:
    """prod's live user data per cloud, delivered bytes; "aws-whole", "gcp-whole": with the package in it as plain
    files (the source without its bundle_secret, bundle_file)."""
    raw = read_raw(REPO / f"Pulumi.{STACK}.yaml")
    cfg = load_mesh(raw, check_limits=False).model_copy(update={"delivery": "live"})
    sizes = {}
    for site in cfg.sites:
        if isinstance(site, AwsSite | GcpSite) and site.cloud not in sizes:
            source = live.agent_source(site, PROJECT, STACK)
            trust = userdata.estimate_trust(cfg, site, PROJECT, STACK)
            sizes[site.cloud] = userdata.delivered_size(
                site.cloud, userdata.render_live_user_data(cfg, site.name, source, trust=trust), True
            )
            whole = {k: v for k, v in source.items() if k not in ("bundle_secret", "bundle_file")}
            text = userdata.render_live_user_data(cfg, site.name, whole, trust=trust)
            sizes[f"{site.cloud}-whole"] = userdata.delivered_size(site.cloud, text, True)
    return sizes


def fit(size: int, limit: int) -> str:
    """How a size stands against its limit: the headroom left, or by how much it is over."""
    if size > limit:
        return f"OVER the limit {limit} by {size - limit}"
    return f"limit {limit}, {limit - size} free ({100 * size / limit:.0f} % used)"


def main() -> None:
    for kind, size in package_sizes().items():
        print(f"agent package, {kind} source: {size} bytes gzip'd")
    print(f"AWS boot part (bootstrap, files, sources, source_aws): {boot_size()} bytes gzip'd")
    bound = bootstrap.VALUE_LIMIT
    aws_bundle, gcp_bundle = len(ship.bundle_value("aws")), len(ship.bundle_value("gcp"))
    print(f"AWS agent bundle secret: {aws_bundle} bytes, a SecretBinary ({fit(aws_bundle, bound)})")
    for codec, size in codec_sizes().items():
        print(f"  the bundle's text {codec}: {size} bytes")
    encoded = len(ship.bundle_base64("gcp"))
    print(f"GCP agent bundle file: {gcp_bundle} bytes, {encoded} in base64 ({fit(gcp_bundle, bound)})")
    sizes = live_sizes()
    for cloud, limit, unit in (("aws", userdata.AWS_USER_DATA_LIMIT, "bytes gzip'd"),
                               ("gcp", userdata.GCP_METADATA_VALUE_LIMIT, "bytes")):  # fmt: skip
        store = "secret" if cloud == "aws" else "file"
        for how, size in ((f"the bundle {store}", sizes[cloud]), ("the whole package", sizes[f"{cloud}-whole"])):
            print(f"live {cloud.upper()} user data with {how}: {size} {unit} ({fit(size, limit)})")


if __name__ == "__main__":
    main()
