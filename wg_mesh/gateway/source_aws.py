"""The AWS source: the document from Secrets Manager, the key from SSM Parameter Store (see wg_mesh.gateway.sources).

Ubuntu's python3-botocore; credentials from botocore's default chain (the instance role through IMDSv2 on EC2).
"""

from __future__ import annotations

import os
from typing import Any

from .sources import FetchError


class AwsSource:
    def __init__(self, region: str, document_secret: str, private_key_parameter: str) -> None:
        self.region = region
        self.secret = document_secret
        self.parameter = private_key_parameter
        # bookworm's botocore 1.29 predates botocore's own AWS_ENDPOINT_URL: passed on here (the lab: moto)
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
        self._clients: dict[str, Any] = {}

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            import botocore.config  # Ubuntu's python3-botocore; imported here so gcp/file sites do without
            import botocore.session

            config = botocore.config.Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2})
            session = botocore.session.get_session()
            self._clients[service] = session.create_client(
                service, region_name=self.region, endpoint_url=self.endpoint, config=config
            )
        return self._clients[service]

    def _call(self, service: str, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client(service), operation)(**kwargs)
        except Exception as exc:  # botocore's errors carry no secret value: the request failed before any
            raise FetchError(f"{service} {operation}: {exc.__class__.__name__}: {exc}") from None

    def document(self) -> str:
        return str(self._call("secretsmanager", "get_secret_value", SecretId=self.secret)["SecretString"])

    def secret_value(self) -> bytes | str:
        """The secret's SecretBinary (bytes: botocore decodes the API's base64), or its SecretString if it holds one
        (wg_mesh.gateway.bootstrap refuses that: its bundle is binary)."""
        answer = self._call("secretsmanager", "get_secret_value", SecretId=self.secret)
        binary = answer.get("SecretBinary")
        return bytes(binary) if isinstance(binary, bytes | bytearray) else str(answer.get("SecretString", ""))

    def private_key(self) -> str:
        answer = self._call("ssm", "get_parameter", Name=self.parameter, WithDecryption=True)
        return str(answer["Parameter"]["Value"])
