"""wg-mesh benchmarks: data plane, MTU sweep, recovery, IPsec vs WireGuard (in the lab) and program scale
(under Pulumi mocks). `python -m bench all` runs everything and renders docs/benchmarks.md from the JSON.

cli.py           the commands (`python -m bench COMMAND`); each writes docs/bench/NAME.json
lab/             the benchmarks that run in the network-namespace lab, as root
report/          docs/benchmarks.md and its plots from the JSON only (pure: imports no runner)
scale*.py, meshgen.py   program scale under Pulumi mocks (no root)
ha_routes.py, ha_claim.py, pmtu_tick.py, agent_size.py   the gateway agent's parts alone (moto, no root)
environment.py, deps.py, stats.py   the machine and versions of a run, `bench setup`, the arithmetic they share
"""
