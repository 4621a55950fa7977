"""Where a gateway's peer document and private key come from: AWS, GCP or files (agent.json's "source").

- aws: the document is a Secrets Manager secret (GetSecretValue; SSM standard parameters stop at 4 KB, a 64-site
  document is ~15 KB), the key an SSM SecureString (GetParameter WithDecryption). Ubuntu's python3-botocore,
  credentials from botocore's default chain (the instance role through IMDSv2 on EC2). Polled.
- gcp: the document and the key are Secret Manager secret versions (`GET /v1/{name}:access`, payload.data base64)
  read with the instance's service-account token. Polled. (The document was the instance metadata attribute
  `wg-mesh-peers`, pushed with `wait_for_change`; a VM that `pulumi up` replaces keeps its old metadata until it is
  deleted, so the serving old VM never saw a document changed in the same `up`: docs/concepts/delivery.md.)
- file: /etc/wg-mesh/document.json and /etc/wg-mesh/private.key (static sites). Polled.
Every call has a timeout; every failure is a FetchError (the agent logs and counts it and tries again).
The agent makes agent.json's source (wg_mesh.gateway.agentconfig.make_source), importing only its cloud's module.
"""

from __future__ import annotations

from typing import Protocol


class FetchError(RuntimeError):
    pass


class Source(Protocol):
    def document(self) -> str: ...

    def private_key(self) -> str: ...


class FileSource:
    def __init__(self, document: str, private_key: str) -> None:
        self.paths = (document, private_key)

    @staticmethod
    def _read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise FetchError(f"cannot read {path}: {exc.__class__.__name__}: {getattr(exc, 'strerror', '')}") from None

    def document(self) -> str:
        return self._read(self.paths[0])

    def private_key(self) -> str:
        return self._read(self.paths[1])
