"""What ships to a gateway: standard library only (Python 3.12, Ubuntu 24.04), no Pulumi, no third-party package.

Modules here import each other relatively and nothing else of `mesh`, so the package runs unchanged inside the
agent's zipapp on a gateway (mesh.gateway.pack) and inside `pulumi up`.
"""
