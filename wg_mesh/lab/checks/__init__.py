"""The lab's checks on a built lab (the six every run has, the private paths', the booted gateways'), the measurements
they share (bulk transfer, outage) and the report."""
