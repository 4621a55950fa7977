"""Where a gateway's peer document and private key come from: AWS, GCP or files (agent.json's "source").

- aws: the document is a Secrets Manager secret (GetSecretValue; SSM standard parameters stop at 4 KB, a 64-site
  document is ~15 KB), the key an SSM SecureString (GetParameter WithDecryption). Ubuntu's python3-botocore,
  credentials from botocore's default chain (the instance role through IMDSv2 on EC2). Polled.
- gcp: the document is the instance metadata attribute `wg-mesh-peers`, watched with `wait_for_change=true` and
  its ETag (Compute Engine docs, "View and query VM metadata", waiting for changes / ETags / timeout_sec:
  https://cloud.google.com/compute/docs/metadata/querying-metadata); the key a Secret Manager secret version
  (`GET /v1/{name}:access`, payload.data base64) with the instance's service-account token.
- file: /etc/wg-mesh/document.json and /etc/wg-mesh/private.key (static sites). Polled.
Every call has a timeout; every failure is a FetchError (the agent logs and counts it and tries again).
The agent makes agent.json's source (wg_mesh.gateway.agentconfig.make_source), importing only its cloud's module.
"""

from __future__ import annotations

from typing import Protocol

GCP_ATTRIBUTE = "wg-mesh-peers"


class FetchError(RuntimeError):
    pass


class Source(Protocol):
    pushes: bool  # True: document(wait=True) blocks until the document changes (or a server timeout)

    def document(self, wait: bool) -> str: ...

    def private_key(self) -> str: ...


class FileSource:
    pushes = False

    def __init__(self, document: str, private_key: str) -> None:
        self.paths = (document, private_key)

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise FetchError(f"cannot read {path}: {exc.__class__.__name__}: {getattr(exc, 'strerror', '')}") from None

    def document(self, wait: bool) -> str:
        return self._read(self.paths[0])

    def private_key(self) -> str:
        return self._read(self.paths[1])
