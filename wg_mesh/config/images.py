"""What the config model checks about a pinned boot image's serial, on both clouds: Canonical's serials are dates
(AWS: the `image: 20250804` form, the date at the end of its AMI names; GCE: image names ending in -vYYYYMMDD), and a
serial that is no date (20251399) is a typo, never an image. Pure; imports nothing of wg_mesh.
"""

from __future__ import annotations

import datetime as dt
import re

_GCP_IMAGE_SERIAL = re.compile(r"-v(\d{8})$")


def is_date(yyyymmdd: str) -> bool:
    """`yyyymmdd` is a calendar date (20251399 is not)."""
    try:
        dt.datetime.strptime(yyyymmdd, "%Y%m%d")
    except ValueError:
        return False
    return True


def gcp_image_serial(image: str) -> str:
    """A GCE image whose name ends in Canonical's -vYYYYMMDD carries a real date there."""
    found = _GCP_IMAGE_SERIAL.search(image)
    if found is not None and not is_date(found.group(1)):
        raise ValueError(f"{image!r}: its -v serial {found.group(1)} is no date (YYYYMMDD)")
    return image
