"""wg-mesh benchmarks: data plane, MTU sweep, recovery, IPsec vs WireGuard (in the lab) and program scale
(under Pulumi mocks). `python -m bench all` runs everything and renders docs/benchmarks.md from the JSON."""
