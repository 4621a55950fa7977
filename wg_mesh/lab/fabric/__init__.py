"""The lab's ground: its plan (pure: namespaces, links, addresses, MTUs, NAT, HA pairs, private paths), the host's
primitives (commands in namespaces, tracked processes, cgroups, the state file) and the networks built from the plan."""
