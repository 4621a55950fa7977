"""Published figures the measured ones are read against. These are quotations with their sources, not
results: the doc prints them in their own table, apart from everything the bench measured."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Anchor:
    what: str
    figure: str
    source: str
    url: str


ANCHORS = (
    Anchor(
        "AWS Site-to-Site VPN, per tunnel",
        "up to 1.25 Gbps (standard); up to 5 Gbps (large bandwidth tunnels)",
        "AWS Site-to-Site VPN user guide, tunnel options / tunnel bandwidth",
        "https://docs.aws.amazon.com/vpn/latest/s2svpn/VPNTunnels.html",
    ),
    Anchor(
        "GCP HA VPN, per tunnel",
        "250,000 packets/s (ingress + egress), which GCP equates to 1–3 Gbps depending on packet size",
        "Google Cloud VPN docs, topologies to increase bandwidth",
        "https://cloud.google.com/network-connectivity/docs/vpn/concepts/topologies-increase-bandwidth",
    ),
    Anchor(
        "AWS EC2 instance with fewer than 32 vCPUs, traffic through an internet gateway or to another Region",
        "aggregate limited to 5 Gbps; a single flow outside a cluster placement group to 5 Gbps",
        "Amazon EC2 user guide, instance network bandwidth",
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html",
    ),
    Anchor(
        "Tailscale's wireguard-go (v1.40 changes: UDP GSO/GRO, checksum work)",
        "past 10 Gb/s on bare-metal Linux (i5-12400), faster there than in-kernel WireGuard; 7.32 Gb/s on a "
        "c6i.8xlarge (figure as summarised by cyberiqs.com from the same post)",
        "Tailscale blog, 'Surpassing 10Gb/s over Tailscale' (2023-04-13)",
        "https://tailscale.com/blog/more-throughput",
    ),
    Anchor(
        "Tailscale's wireguard-go (v1.36 changes: packet vectors, TSO/GRO on the TUN)",
        "the first step of the work above; the Debian wireguard-go measured here predates both",
        "Tailscale blog, 'Userspace isn't slow, some kernel interfaces are!' (2022-12-13)",
        "https://tailscale.com/blog/throughput-improvements",
    ),
    Anchor(
        "AWS managed prefix lists in route tables",
        "a referenced prefix list counts as its max entries against the route table's quota",
        "Amazon VPC quotas, prefix lists",
        "https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html",
    ),
)

# Single published figures the doc's sentences refer to (each also appears, sourced, in ANCHORS).
AWS_EGRESS_CAP_GBPS = 5  # instances with fewer than AWS_EGRESS_VCPUS vCPUs, through an internet gateway
AWS_EGRESS_VCPUS = 32

# The reference article's table (AWS c6i.2xlarge <-> GCP n2-standard-8), quoted.
ARTICLE_MTU = 1420
ARTICLE_WG_GBPS = 8.91
ARTICLE_INSTANCE_VCPUS = 8  # c6i.2xlarge and n2-standard-8
ARTICLE = {
    "setup": "AWS EC2 c6i.2xlarge (us-east-1) <-> GCP n2-standard-8 (europe-west3), kernel WireGuard, "
    f"MTU {ARTICLE_MTU}, iperf3 -P 8",
    "wireguard": f"{ARTICLE_WG_GBPS} Gbps, 12.1% CPU (software interrupts), handshake recovery < 0.1 s",
    "ipsec": "strongSwan AES-256: 1.42 Gbps, 82.4% CPU, recovery ~4.2 s",
}
