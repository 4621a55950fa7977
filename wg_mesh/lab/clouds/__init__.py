"""The lab's clouds: the stores a `delivery: live` gateway's agent reads (moto, the GCE metadata server, Secret
Manager), and the models of each cloud's HA machinery (IMDS, Compute, Google's probers, EIPs and route tables)."""
