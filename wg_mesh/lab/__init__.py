"""The lab: the rendered mesh brought up for real in network namespaces on one machine, then checked."""
