"""The GCP source: the document from instance metadata (wait_for_change, ETag), the key from Secret Manager.

Standard library only (urllib); see wg_mesh.gateway.sources.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request

from .sources import GCP_ATTRIBUTE, FetchError

HTTP_TIMEOUT_S = 10.0
WAIT_TIMEOUT_S = 60  # wait_for_change: the metadata server answers at the latest after this, changed or not
METADATA_URL = "http://169.254.169.254"
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"


def _get(url: str, headers: dict[str, str], timeout: float) -> tuple[bytes, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read(), response.headers.get("ETag", "")
    except urllib.error.HTTPError as exc:
        raise FetchError(f"GET {url.split('?')[0]}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"GET {url.split('?')[0]}: {exc.__class__.__name__}: {exc}") from None


class GcpSource:
    pushes = True

    def __init__(self, private_key_secret: str, attribute: str = GCP_ATTRIBUTE, metadata_url: str = "") -> None:
        # GCE_METADATA_HOST: the override Google's client libraries honour too (tests on loopback)
        host = os.environ.get("GCE_METADATA_HOST")
        self.metadata = (metadata_url or (f"http://{host}" if host else METADATA_URL)).rstrip("/")
        self.secret_manager = os.environ.get("WG_MESH_SECRET_MANAGER_URL", SECRET_MANAGER_URL).rstrip("/")
        self.attribute = attribute
        self.secret = private_key_secret
        self.etag = ""

    def _metadata(self, path: str, query: dict[str, str] | None = None, timeout: float = HTTP_TIMEOUT_S) -> bytes:
        url = f"{self.metadata}/computeMetadata/v1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        body, etag = _get(url, {"Metadata-Flavor": "Google"}, timeout)
        if path.startswith("instance/attributes/"):
            self.etag = etag
        return body

    def document(self, wait: bool) -> str:
        path = f"instance/attributes/{self.attribute}"
        if wait and self.etag:
            query = {"wait_for_change": "true", "last_etag": self.etag, "timeout_sec": str(WAIT_TIMEOUT_S)}
            return self._metadata(path, query, WAIT_TIMEOUT_S + HTTP_TIMEOUT_S).decode()
        return self._metadata(path).decode()

    def private_key(self) -> str:
        try:
            token = json.loads(self._metadata("instance/service-accounts/default/token"))["access_token"]
            headers = {"Authorization": f"Bearer {token}"}
            body, _ = _get(f"{self.secret_manager}/v1/{self.secret}:access", headers, HTTP_TIMEOUT_S)
            return base64.b64decode(json.loads(body)["payload"]["data"]).decode()
        except (ValueError, KeyError, TypeError) as exc:
            raise FetchError(f"Secret Manager {self.secret}: unexpected answer ({exc.__class__.__name__})") from None
