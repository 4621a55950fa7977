"""wg-mesh: a WireGuard mesh between AWS, GCP and bare-metal sites, as a Pulumi program."""
