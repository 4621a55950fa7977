"""What the gateway agent adds to a gateway's live user data: `python -m bench.agent_size` (no root, no network).

Prints the agent's package gzip'd per source kind, the AWS boot part (what an AWS user data ships when the package
comes from its bundle secret, wg_mesh.gateway.bootstrap), the bundle secret's size against Secrets Manager's 64 KB
(and through each codec),
and prod's live user data per cloud as `pulumi up` renders it (wg_mesh.plan.userdata), for AWS also as it would be with
the whole package in it (EC2 counts at most 16384 bytes gzip'd). The user data does not depend on the mesh's size.
"""

from __future__ import annotations

import base64
import bz2
import lzma
from pathlib import Path

from wg_mesh.config import AwsSite, GcpSite
from wg_mesh.gateway import bootstrap, ship
from wg_mesh.plan import live, userdata
from wg_mesh.tools.stackfile import load

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
    """prod's live user data per cloud, delivered bytes; "aws-whole": an AWS one with the package in it."""
    cfg = load(REPO / f"Pulumi.{STACK}.yaml").model_copy(update={"delivery": "live"})
    sizes = {}
    for site in cfg.sites:
        if isinstance(site, AwsSite | GcpSite) and site.cloud not in sizes:
            source = live.agent_source(site, PROJECT, STACK)
            trust = userdata.estimate_trust(cfg, site, PROJECT, STACK)
            sizes[site.cloud] = userdata.delivered_size(
                site.cloud, userdata.render_live_user_data(cfg, site.name, source, trust=trust), True
            )
            if isinstance(site, AwsSite):
                whole = {k: v for k, v in source.items() if k != "bundle_secret"}
                text = userdata.render_live_user_data(cfg, site.name, whole, trust=trust)
                sizes["aws-whole"] = userdata.delivered_size("aws", text, True)
    return sizes


def main() -> None:
    for kind, size in package_sizes().items():
        print(f"agent package, {kind} source: {size} bytes gzip'd")
    print(f"AWS boot part (bootstrap, files, sources, source_aws): {boot_size()} bytes gzip'd")
    limit = bootstrap.VALUE_LIMIT
    print(f"AWS agent bundle secret: {len(userdata.aws_agent_bundle_bytes())} bytes, a SecretBinary (limit {limit})")
    for codec, size in codec_sizes().items():
        print(f"  the bundle's text {codec}: {size} bytes")
    limit = userdata.AWS_USER_DATA_LIMIT
    sizes = live_sizes()
    print(f"live AWS user data with the bundle: {sizes['aws']} bytes gzip'd (limit {limit})")
    print(f"live AWS user data with the whole package: {sizes['aws-whole']} bytes gzip'd (limit {limit})")
    print(f"live GCP user-data value: {sizes['gcp']} bytes (limit {userdata.GCP_METADATA_VALUE_LIMIT})")


if __name__ == "__main__":
    main()
