"""docs/benchmarks.md and the plots, rendered from the JSON results only.

Every number in the generated document comes from docs/bench/*.json (or from the quoted, sourced anchors in
bench/report/anchors.py, which sit in their own table). Sentences that state a result are built from the data, so
re-running the bench rewrites them; nothing here is a figure typed by hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import (
    boot,
    changes,
    fallback,
    ha_routes,
    hafailover,
    meshchange,
    pathmtu,
    relay,
    roam,
    rotation,
    underlay,
)
from bench.report.anchors import ANCHORS, ARTICLE_WG_GBPS, AWS_EGRESS_CAP_GBPS, AWS_EGRESS_VCPUS
from bench.report.format import cell, mbit, num, table
from bench.report.headline import headline
from bench.report.ipsec import section_ipsec
from bench.report.lab import section_dataplane, section_recovery
from bench.report.mtu import section_mtu
from bench.report.scale import section_scale

Log = Callable[[str], None]
SECTIONS = (
    "environment",
    "scale",
    "lab",
    "mtu",
    "boot",
    "meshchange",
    "meshchange-boot",
    "rotation",
    "pathmtu",
    "hafailover",
    "hafailover-gcp",
    "underlay",
    "underlay-fallback",
    "ha_routes",
    "roam",
    "relay",
    "changes",
)


def load(out: Path) -> dict[str, Any]:
    data = {}
    for name in SECTIONS:
        path = out / f"{name}.json"
        if path.exists():
            data[name] = json.loads(path.read_text())
    return data


def section_environment(env: dict[str, Any]) -> str:
    m, v = env["machine"], env["versions"]
    kc = m.get("kernel_config", {})
    rows = [
        ["CPU", f"{m['nproc']} × {m['cpu_model']} (AES-NI: {'yes' if m['cpu_aes_ni'] else 'no'})"],
        ["memory", f"{m['memory_gib']} GiB"],
        ["OS / kernel", f"{m['os']} / {m['kernel']}"],
        [
            "kernel WireGuard",
            f"module loaded: {'yes' if m['wireguard_kernel_module'] else 'no'}; "
            f"CONFIG_WIREGUARD {kc.get('CONFIG_WIREGUARD', '?')}",
        ],
        [
            "kernel IPsec",
            ", ".join(f"{k} {kc.get(k, '?')}" for k in ("CONFIG_XFRM_USER", "CONFIG_INET_ESP", "CONFIG_CRYPTO_GCM")),
        ],
    ]
    rows += [[name, str(value)] for name, value in v.items()]
    return "## Machine and versions\n\n" + f"Run of {env['date']}.\n\n" + table(["", ""], rows) + "\n"


def section_meaning(data: dict[str, Any]) -> str:
    out = ["## 6. What this means for a real deployment\n"]
    lab = data.get("lab")
    wg8 = cell(lab, "wireguard", "8") if lab else None
    nproc = data.get("environment", {}).get("machine", {}).get("nproc", "?")
    if wg8:
        busy = wg8["busy_core_s_per_gbit"]
        out.append(
            f"- On this machine a wireguard-go tunnel moves {mbit(wg8['mbps'])} with 8 streams and costs "
            f"{num(busy)} core-seconds of the machine per Gbit transferred (all of it: daemons, forwarding, iperf3). "
            f"That is a statement about this {nproc}-vCPU VM and this wireguard-go release, not about a c6i.2xlarge "
            "running kernel WireGuard; the published figures below are the better guide to what a cloud gateway "
            "can do, and the lab's job is to prove the configuration, not the ceiling."
        )
    out.append(
        f"- Whatever the tunnel can do, an AWS gateway with fewer than {AWS_EGRESS_VCPUS} vCPUs is limited to "
        f"{AWS_EGRESS_CAP_GBPS} Gbps through an internet gateway (table below): the reference article's "
        f"{ARTICLE_WG_GBPS} Gbps between a c6i.2xlarge and GCP over the internet is above what AWS documents for "
        "that instance, so it cannot be reproduced on that path as described. A gateway that must carry more "
        f"needs {AWS_EGRESS_VCPUS} or more vCPUs (half its bandwidth may then leave through the internet gateway) "
        "or several gateways sharing the routes."
    )
    out.append(
        "- Against the managed services, one tunnel's ceiling is the comparison that matters: AWS Site-to-Site "
        "VPN and GCP HA VPN cap each tunnel (table below) and scale by adding tunnels with ECMP; a wg-mesh "
        "gateway is capped by its instance's CPU and network allowance."
    )
    out.append(
        "- Route and security-group quotas (section 4) cap the mesh's size whatever the gateways can carry: plan "
        "summarised CIDRs before the mesh grows past the crossing points."
    )
    out.append("\n### Published anchors\n")
    out.append(
        table(["what", "published figure", "source"], [[a.what, a.figure, f"[{a.source}]({a.url})"] for a in ANCHORS])
    )
    return "\n".join(out) + "\n"


def commands(quick: bool) -> str:
    note = (
        "\n> This document was rendered from a `--quick` smoke run: its numbers are not for publishing.\n"
        if quick
        else ""
    )
    return (
        "## Reproduce\n\n"
        "```sh\n"
        "sudo .venv/bin/python -m bench all     # setup (apt + pip), every benchmark, this document\n"
        "python -m bench scale                  # program scale only (no root)\n"
        "sudo .venv/bin/python -m bench lab     # data plane, IPsec vs WireGuard, recovery\n"
        "sudo .venv/bin/python -m bench mtu     # MTU sweep\n"
        "sudo .venv/bin/python -m bench boot    # booted gateways (lab --boot), every stack file\n"
        "sudo .venv/bin/python -m bench underlay  # a jumbo private path next to an internet path\n"
        "sudo .venv/bin/python -m bench underlay --fallback  # the private path cut and restored\n"
        "sudo .venv/bin/python -m bench rotation --runs 10  # the announced key rotation x10, the worst run\n"
        "sudo .venv/bin/python -m bench roam   # a dynamic site's address changes behind a NAT (roam drill)\n"
        "sudo .venv/bin/python -m bench relay  # a relayed pair's throughput against a direct path's\n"
        "sudo .venv/bin/python -m bench changes  # every change rehearsed as pulumi up runs it (lab --before)\n"
        "python -m bench doc                    # re-render this file and the plots from docs/bench/*.json\n"
        "```\n\n"
        "`bench all` installs what it needs when missing: Debian `strongswan-charon strongswan-swanctl "
        "libstrongswan-standard-plugins libcharon-extra-plugins` (plus the lab's own packages) and "
        "`bench/requirements.txt` (matplotlib, pinned). Results: `docs/bench/{environment,scale,lab,mtu}.json`; "
        "plots: `docs/bench/*.png`. The lab runs only inside network namespaces it creates and removes them, "
        "with every process it started, on exit.\n" + note
    )


Section = Callable[[dict[str, Any], dict[str, str]], str]  # (all results, plot paths) -> its markdown
# The sections after the commands, in their order, each where the result it reads is there (None: always).
BODY: tuple[tuple[str | None, Section], ...] = (
    ("environment", lambda data, images: section_environment(data["environment"])),
    ("lab", lambda data, images: section_dataplane(data["lab"], images)),
    ("mtu", lambda data, images: section_mtu(data["mtu"], images)),
    ("lab", section_recovery),
    ("scale", lambda data, images: section_scale(data["scale"], images)),
    ("lab", lambda data, images: section_ipsec(data)),
    (None, lambda data, images: section_meaning(data)),
    ("boot", lambda data, images: boot.section(data["boot"])),
    ("meshchange", lambda data, images: meshchange.section(data["meshchange"], data.get("meshchange-boot"))),
    ("rotation", lambda data, images: rotation.section(data["rotation"])),
    ("pathmtu", lambda data, images: pathmtu.section(data["pathmtu"])),
    ("hafailover", lambda data, images: hafailover.section(data["hafailover"], data.get("hafailover-gcp"))),
    ("underlay", lambda data, images: underlay.section(data["underlay"])),
    ("underlay-fallback", lambda data, images: fallback.section(data["underlay-fallback"])),
    ("ha_routes", lambda data, images: ha_routes.section(data["ha_routes"])),
    ("roam", lambda data, images: roam.section(data["roam"])),
    ("relay", lambda data, images: relay.section(data["relay"])),
    ("changes", lambda data, images: changes.section(data["changes"])),
)


def markdown(data: dict[str, Any], images: dict[str, str]) -> str:
    quick = bool(data.get("environment", {}).get("quick"))
    parts = [
        "# Benchmarks\n",
        "<!-- Generated by `python -m bench doc` from docs/bench/*.json: do not edit by hand. -->\n",
        "Measured on one machine with the lab (`wg_mesh/lab`: the dev stack's topology in network namespaces, the "
        "rendered `wg0.conf` and cloud-init, real `wg-quick`) and with the Pulumi program under mocks. Every "
        "figure below is produced by `python -m bench` and rendered from its JSON; published figures from "
        "elsewhere are quoted only in the *Published anchors* table, with their sources.\n",
    ]
    lines = headline(data)
    if lines:
        parts.append("## Headline\n\n" + "\n".join(lines) + "\n")
    parts.append(commands(quick))
    parts.extend(section(data, images) for key, section in BODY if key is None or key in data)
    return "\n".join(parts)


def render(out: Path, doc: Path, *, plots: bool, log: Log) -> str:
    data = load(out)
    if not data:
        raise FileNotFoundError(f"no results in {out}: run `python -m bench all` first")
    images: dict[str, str] = {}
    if plots:
        from bench.report import plots as plotting

        for name, path in plotting.make_all(data, out).items():
            images[name] = os.path.relpath(path, doc.parent)
            log(f"plot {path.name}")
    text = markdown(data, images)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    log(f"wrote {doc}")
    return text
