"""The benchmarks that run in the network-namespace lab (wg_mesh/lab), as root: data plane, IPsec vs WireGuard and
recovery (labbench: `bench lab`), the MTU sweep (`bench mtu`), booted gateways (`bench boot`), the private underlay
and its fallback (`bench underlay [--fallback]`), the announced key rotation over repeated live drills
(`bench rotation`); labkit is the lab session and measurements they share."""
