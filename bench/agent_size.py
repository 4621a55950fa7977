"""What the gateway agent adds to a gateway's user data: `python -m bench.agent_size` (no root, no network).

Prints the agent's files gzip'd per source kind, and an estimate of the live AWS user data (EC2 counts at most
16384 bytes gzip'd): today's user data of prod's aws-use1 without wg0.conf and peers.json (live mode does not ship
them), plus the agent's files, with the metrics and readiness scripts gz+b64 as today and as compacted plain text.
An estimate until mesh.userdata renders live mode itself; same zopfli as the real user data.
"""

from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import yaml

from mesh import render, topology, userdata
from mesh.gateway import ship
from mesh.stackfile import load

REPO = Path(__file__).resolve().parent.parent
SITE = "aws-use1"
NOT_IN_LIVE = ("/etc/wireguard/wg0.conf", "/etc/wg-mesh/peers.json")


def agent_sizes() -> dict[str, int]:
    sources = {
        "aws": ship.aws_source("us-east-1", f"wg-mesh/wg-mesh/prod/{SITE}/peers", f"/wg-mesh/wg-mesh/prod/{SITE}/key"),
        "gcp": ship.gcp_source("projects/p/secrets/wg-mesh-0123abcd-gcp-euw3-key/versions/latest"),
        "file": ship.file_source(),
    }
    return {
        kind: len(userdata.aws_gzip("".join(text for _, text, _ in ship.files(SITE, source))))
        for kind, source in sources.items()
    }


def live_estimate(compact_scripts: bool) -> int:
    cfg = load(REPO / "Pulumi.prod.yaml")
    directory = userdata.worst_case_directory(cfg)
    conf = render.wg_quick_conf(topology.interface_plan(cfg, SITE, directory), "x" * 44)
    doc: dict[str, Any] = yaml.safe_load(userdata.render_user_data(cfg, SITE, conf, directory))
    files = []
    for f in doc["write_files"]:
        if f["path"] in NOT_IN_LIVE:
            continue
        if compact_scripts and f.get("encoding") == "gz+b64":
            text = gzip.decompress(base64.b64decode(f["content"])).decode()
            f = {**{k: v for k, v in f.items() if k != "encoding"}, "content": ship.compact(text)}
        files.append(f)
    source = ship.aws_source("us-east-1", f"wg-mesh/wg-mesh/prod/{SITE}/peers", f"/wg-mesh/wg-mesh/prod/{SITE}/key")
    files += [{"path": p, "permissions": m, "content": t} for p, t, m in ship.files(SITE, source)]
    doc["write_files"] = files
    text = "#cloud-config\n" + yaml.dump(doc, Dumper=render._LiteralDumper, sort_keys=False, width=1000)
    return len(userdata.aws_gzip(text))


def main() -> None:
    for kind, size in agent_sizes().items():
        print(f"agent files, {kind} source: {size} bytes gzip'd")
    limit = userdata.AWS_USER_DATA_LIMIT
    print(f"live AWS user data, scripts gz+b64 as today: {live_estimate(False)} bytes gzip'd (limit {limit})")
    print(f"live AWS user data, scripts compacted plain: {live_estimate(True)} bytes gzip'd (limit {limit})")


if __name__ == "__main__":
    main()
