"""The deployer's tools: what runs on the deployer's machine beside the program, not inside the mesh's model.

cost        `python -m wg_mesh cost`: the monthly cost of joining two clouds, four ways (prices: prices.yaml)
monitoring  `python -m wg_mesh monitoring`: a stack's Prometheus rules and scrape job
stackfile   reading `wg-mesh:mesh` out of a Pulumi stack file (validate, cost, lab)
readygate   the AWS readiness gate `pulumi up` runs (as `python -m wg_mesh.readygate`, the root's thin entry)
gcpgate     the GCP readiness gate (`python -m wg_mesh.readygate gcp`)
gatepoll    the gates' waiting loop
stamp       moments kept in state (a pulumi-command `local.Command` printing the time)
"""
