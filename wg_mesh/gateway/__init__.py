"""What ships to a gateway: standard library only (Python 3.11+; Ubuntu 24.04 has 3.12), no Pulumi, no third-party
package (the AWS source imports Ubuntu's python3-botocore when it runs).

Modules here import each other relatively and nothing else of `mesh`, so the same files run inside `pulumi up`
and, as the package `wgmesh_gateway` under /usr/local/lib/wg-mesh (wg_mesh.gateway.ship), on every gateway.
"""
