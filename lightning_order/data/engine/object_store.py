"""Object storage: which paths name it, how it is reached, and credentials kept out of what we write.

Corpora, prepared caches and runs may live in object storage (``s3://``, ``gs://``, ``az://``,
any fsspec URL). A user configures it as they configure S3 everywhere: the standard AWS
variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``), which s3fs reads, and ``storage_options`` (the keyword arguments of the fsspec
filesystem, as ``datasets`` and Lightning take them) where they pass them. Credentials are never
written: not to a manifest, a ledger, a log line or an error message.
"""

from __future__ import annotations

import contextlib
import os
import re
import typing
from collections.abc import Iterator, Mapping
from typing import IO, Any

import xxhash

from lightning_order.errors import DataError

__all__ = [
    "SECRET_VARIABLES",
    "hash_object",
    "is_url",
    "object_error",
    "object_identity",
    "open_input",
    "redact",
    "remote_errors",
    "url_filesystem",
]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: object) -> bool:
    """Whether ``path`` names object storage (``scheme://``), not a local file (``file://`` counts as local)."""
    text = str(path)
    return bool(_URL.match(text)) and not text.startswith("file://")


#: Environment variables whose values are secrets wherever they appear.
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
#: Parts of a ``storage_options`` key (any nesting, e.g. ``client_kwargs``) that mark its value secret.
_SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "signature")
#: The fsspec package that reaches each common scheme, for the error when it is missing.
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}
#: Metadata keys that hold a digest of the object's content, by store: S3 (and MinIO, R2), GCS, Azure.
_CONTENT_KEYS = ("ETag", "etag", "md5Hash", "crc32c", "content_md5")
#: Bytes hashed per read where a store gives no content metadata (``memory://``, plain HTTP).
_HASH_CHUNK = 1 << 22


def url_filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None, *, step: str = "load"
) -> tuple[Any, str]:
    """The fsspec filesystem that reaches ``url`` and the path on it.

    Args:
        url: an fsspec URL (``s3://bucket/key``, ``gs://...``, ``memory://...``).
        storage_options: the filesystem's keyword arguments (endpoint, credentials); ``None``: the
            environment's (s3fs reads ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...).
        step: the step named in the error.

    Raises:
        DataError: the package that reaches the scheme is not installed (naming it), or fsspec
            knows no such scheme.
    """
    import fsspec.core

    scheme = url.split("://", 1)[0].lower()
    try:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as err:
        package = _PACKAGES.get(scheme, f"the fsspec implementation of {scheme}://")
        raise DataError(
            f"{redact(url, storage_options)} is on {scheme}://, which needs {package} (not installed): "
            f"pip install {package if scheme in _PACKAGES else 'it'} (or pip install 'lightning-order[s3]')",
            step=step,
        ) from err
    except ValueError as err:  # fsspec: "Protocol not known"
        raise DataError(
            f"{redact(url, storage_options)} names the scheme {scheme}://, which fsspec does not know "
            f"({redact(str(err), storage_options)}); give an s3://, gs://, az:// (or other fsspec) URL",
            step=step,
        ) from err
    return fs, path


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS) and not lowered.endswith(("_id_path", "region"))


def _secret_values(options: Any) -> list[str]:
    """Every string held under a secret-named key of ``options`` (nested mappings searched)."""
    found: list[str] = []
    if isinstance(options, Mapping):
        for name, value in options.items():
            if isinstance(value, Mapping):
                found += _secret_values(value)
            elif isinstance(value, str) and value and _is_secret_name(str(name)):
                found.append(value)
    return found


def redact(text: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """``text`` with every known secret replaced by ``***``.

    The secrets: the values of :data:`SECRET_VARIABLES` in the environment, and every string a
    secret-named key of ``storage_options`` holds (``key``, ``secret``, ``token``, ``password``...,
    in ``client_kwargs`` too). Applied where an error about a remote object is formatted: an
    exception from a store may quote a signed request or a credential.
    """
    secrets = [os.environ.get(name, "") for name in SECRET_VARIABLES] + _secret_values(storage_options)
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def object_error(
    error: BaseException,
    url: str,
    step: str,
    storage_options: Mapping[str, Any] | None = None,
    action: str = "read",
) -> DataError:
    """A failed request to object storage as one line naming the request, the object and the fix.

    Every error about an object goes through here (reading an input, publishing or fetching a
    cache): the fix follows what the store said (credentials, a missing bucket or key, the offline
    switch, an unreachable store), and the line passes through :func:`redact`, as a client's
    message may quote a signed URL or a key.

    Args:
        error: what fsspec, the store's client or the connection raised.
        url: the object (or the folder) the request was for.
        step: the step that made the request.
        storage_options: the options used (their secrets are redacted too).
        action: the request, as a verb: ``"read"``, ``"write"``, ``"list"``, ``"delete"``...
    """
    said = " ".join(str(error).split()) or type(error).__name__
    lowered = f"{type(error).__name__} {said}".lower()
    if isinstance(error, PermissionError) or any(
        word in lowered for word in ("accessdenied", "access denied", "forbidden", "invalidaccesskeyid",
                                     "signaturedoesnotmatch", "expiredtoken", "credentials", "403")
    ):  # fmt: skip
        fix = (
            "check the credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or storage_options key / secret) "
            f"and that they may {action} this object"
        )
    elif "offline mode" in lowered:  # datasets refuses every URL, s3:// too, with HF_HUB_OFFLINE=1
        fix = (
            "datasets reads no URL while HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) is set: unset it for this run, "
            "or copy the objects to a local folder"
        )
    elif isinstance(error, FileNotFoundError) or "nosuchbucket" in lowered or "nosuchkey" in lowered:
        fix = "check the bucket and the key (and AWS_ENDPOINT_URL, or storage_options endpoint_url)"
    else:
        fix = (
            "check that the store is reachable (AWS_ENDPOINT_URL, or storage_options endpoint_url) and run "
            "again: nothing half-written is ever used"
        )
    return DataError(
        redact(
            f"could not {action} {url} on object storage ({type(error).__name__}: {said[:300]}); {fix}",
            storage_options,
        ),
        step=step,
    )


@contextlib.contextmanager
def remote_errors(step: str, url: str, storage_options: Mapping[str, Any] | None) -> Iterator[None]:
    """A block that reads object ``url``: anything the store raises becomes :func:`object_error`.

    A :class:`DataError` raised inside (already ours) passes unchanged.
    """
    try:
        yield
    except DataError:
        raise
    except Exception as err:  # s3fs, botocore, aiohttp and fsspec raise many kinds for one failed read
        raise object_error(err, url, step, storage_options) from err


def object_identity(url: str, storage_options: Mapping[str, Any] | None = None) -> list[Any]:
    """``[url, size, content, version]`` of one object: what its bytes are, from the store's metadata.

    ``content`` is the store's digest of the bytes (S3's ETag, GCS's md5Hash...); a store that
    keeps none (``memory://``, plain HTTP) has the bytes hashed instead (xxh3, as local files).
    ``version`` is the object's VersionId where the bucket keeps versions, else ``None``. An
    object overwritten with other bytes changes the identity; its name alone never names it. The
    metadata is asked of the store each time (one ``HEAD``), never taken from a listing fsspec
    cached earlier in the process.

    Raises:
        DataError: the object cannot be reached (naming it; secrets redacted).
    """
    fs, path = url_filesystem(url, storage_options)
    with remote_errors("load", url, storage_options):
        # fsspec serves info from listings it cached (per process, per filesystem): an object another
        # client overwrote since would keep its old ETag, and the old key would serve stale data
        fs.invalidate_cache(path)
        info = fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(f"{url} is a folder (a prefix), not an object")
        content = next((str(info[k]).strip('"') for k in _CONTENT_KEYS if info.get(k)), None)
        if content is None:
            digest = xxhash.xxh3_64()
            with fs.open(path, "rb") as handle:
                while chunk := handle.read(_HASH_CHUNK):
                    digest.update(chunk)
            content = f"xxh3:{digest.hexdigest()}"
    return [url, int(info.get("size") or 0), content, info.get("VersionId")]


def hash_object(url: str, identity: list[Any], storage_options: Mapping[str, Any] | None = None) -> str:
    """The xxh3 (128-bit, hex) of the object's bytes, as :func:`~.storage.file_digest` gives for a local file.

    The object is read once, in :data:`_HASH_CHUNK` ranges; its identity is asked again after the
    last byte (past any listing fsspec cached), so bytes of two versions never make one digest.

    Args:
        url: the object.
        identity: its :func:`object_identity`, taken before the read.
        storage_options: the filesystem's keyword arguments.

    Raises:
        DataError: the object cannot be read, or it changed while it was read (naming it).
    """
    fs, path = url_filesystem(url, storage_options)
    digest = xxhash.xxh3_128()
    with remote_errors("load", url, storage_options):
        with fs.open(path, "rb", block_size=_HASH_CHUNK, cache_type="none") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
    if object_identity(url, storage_options) != list(identity):
        raise DataError(
            f"data object {redact(url, storage_options)} changed while it was read to identify it (its ETag, "
            "size or version is not the one it had before the read); build the DataModule again once it stays "
            "as it is",
            step="load",
        )
    return digest.hexdigest()


def open_input(name: str, storage_options: Mapping[str, Any] | None = None, **options: Any) -> IO[bytes]:
    """``name`` (a local path or an fsspec URL) opened for binary reading.

    Args:
        name: the file or object.
        storage_options: the filesystem's keyword arguments, for a URL.
        **options: passed to fsspec's ``open`` (``block_size``, ``cache_type``) for a URL.
    """
    if not is_url(name):
        return open(name, "rb")
    fs, path = url_filesystem(name, storage_options)
    return typing.cast(IO[bytes], fs.open(path, "rb", **options))
