"""Object storage: which paths name it, how it is reached, and credentials kept out of what we write.

Corpora, prepared caches and runs may live in object storage (``s3://``, ``gs://``, ``az://``,
any fsspec URL). A user configures it as they configure S3 everywhere: the standard AWS
variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``), which s3fs reads, and ``storage_options`` (the keyword arguments of the fsspec
filesystem, as ``datasets`` and Lightning take them) where they pass them. Credentials are never
written: not to a manifest, a ledger, a log line or an error message.
"""

from __future__ import annotations

import re

__all__ = ["is_url"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: object) -> bool:
    """Whether ``path`` names object storage (``scheme://``), not a local file (``file://`` counts as local)."""
    text = str(path)
    return bool(_URL.match(text)) and not text.startswith("file://")
