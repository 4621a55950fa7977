"""The planning layer: plain data in, text out; no Pulumi, no cloud, no I/O beyond the package's own files.

topology     who peers with whom: allowed IPs, remote ranges, interface plans, tunnel MTUs
render       wg0.conf and cloud-init (wg-quick, write_files, runcmd)
userdata     a gateway's whole user data, and its size against each cloud's limit
live         `delivery: live`: the peer documents and where each cloud stores them
signing      the documents' DSSE envelope (Ed25519)
metrics      the metrics script and its peer mapping, as user data files
inputpolicy  the gateway's INPUT firewall policy
ha           `gateways: 2`: names and the agent's `ha` object
awsiam       an AWS gateway role's policy documents (JSON) and their size against IAM's limit
validate     load_mesh: the model, then the quotas and each gateway's user data / document size
wgkey        WireGuard (X25519) keys as base64 text
"""
