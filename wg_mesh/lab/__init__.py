"""The lab: the rendered mesh brought up for real in network namespaces on one machine, then checked.

Arrows point down, never up:

    cli.py      `python -m wg_mesh lab ...`: the lab run, a drill, `down`, `image`
    run.py      one lab run: plan, build, the checks, the report, teardown
    drills/     a running `delivery: live` mesh changed, broken or failed over while traffic flows
    checks/     what a built lab is checked for, and the report
    clouds/     the clouds' stores and the models of their HA machinery, in the lab's cloud namespace
    machines/   gateway machines (a namespace, or a booted systemd-nspawn container) and the build
    fabric/     the plan (pure), the host's primitives (namespaces, processes, cgroups, state, teardown), the networks
"""
