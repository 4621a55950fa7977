"""The GCP source: the document and the key from Secret Manager, with the instance's service-account token.

Standard library only (urllib); see wg_mesh.gateway.sources. Both are `versions/latest` of a secret: "an alias to the
most recently created SecretVersion" (Secret Manager REST reference, projects.secrets.versions.access:
https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access), so an old VM, its
replacement and an HA pair read the same document (docs/concepts/delivery.md, "GCP: one store for every VM").
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request

from .sources import FetchError

HTTP_TIMEOUT_S = 10.0
METADATA_URL = "http://169.254.169.254"
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"
# A secret version's payload is at most 64 KiB (Secret Manager quotas and limits); its answer is base64 of it in JSON
MAX_ANSWER_BYTES = 128 * 1024


def _get(url: str, headers: dict[str, str], timeout: float) -> bytes:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = bytes(response.read(MAX_ANSWER_BYTES + 1))
    except urllib.error.HTTPError as exc:
        raise FetchError(f"GET {url.split('?')[0]}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"GET {url.split('?')[0]}: {exc.__class__.__name__}: {exc}") from None
    if len(body) > MAX_ANSWER_BYTES:
        raise FetchError(f"GET {url.split('?')[0]}: an answer of more than {MAX_ANSWER_BYTES} bytes")
    return body


class GcpSource:
    def __init__(self, document_secret: str, private_key_secret: str, metadata_url: str = "") -> None:
        # GCE_METADATA_HOST: the override Google's client libraries honour too (tests on loopback)
        host = os.environ.get("GCE_METADATA_HOST")
        self.metadata = (metadata_url or (f"http://{host}" if host else METADATA_URL)).rstrip("/")
        self.secret_manager = os.environ.get("WG_MESH_SECRET_MANAGER_URL", SECRET_MANAGER_URL).rstrip("/")
        self.document_secret = document_secret
        self.secret = private_key_secret

    def _access(self, name: str) -> str:
        """The payload of secret version `name` (projects/P/secrets/S/versions/V), as text."""
        try:
            url = f"{self.metadata}/computeMetadata/v1/instance/service-accounts/default/token"
            token = json.loads(_get(url, {"Metadata-Flavor": "Google"}, HTTP_TIMEOUT_S))["access_token"]
            headers = {"Authorization": f"Bearer {token}"}
            body = _get(f"{self.secret_manager}/v1/{name}:access", headers, HTTP_TIMEOUT_S)
            return base64.b64decode(json.loads(body)["payload"]["data"], validate=True).decode()
        except (ValueError, KeyError, TypeError) as exc:
            raise FetchError(f"Secret Manager {name}: unexpected answer ({exc.__class__.__name__})") from None

    def document(self) -> str:
        return self._access(self.document_secret)

    def private_key(self) -> str:
        return self._access(self.secret)
