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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = ["is_url"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: object) -> bool:
    """Whether ``path`` names object storage (``scheme://``), not a local file (``file://`` counts as local)."""
    text = str(path)
    return bool(_URL.match(text)) and not text.startswith("file://")


# -- Reaching a URL (a minimal version for the prepared cache, #46 items 2-4; the input side may extend it) --
__all__ += ["url_filesystem"]


def url_filesystem(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem that serves ``url`` and the path on it.

    Args:
        url: ``s3://bucket/prefix`` (or any fsspec URL).
        storage_options: the filesystem's keyword arguments (endpoint, credentials, retries);
            ``None``: the environment's (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...).
    """
    # Deferred for load time, not for a cycle: the config imports this module, and fsspec costs
    # a fifth of a second to import where no URL is used.
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(str(url), **dict(storage_options or {}))
    return fs, str(path).rstrip("/")
