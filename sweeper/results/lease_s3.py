"""The lease object on S3, written only on a condition (S3's conditional writes, through boto3):
`If-None-Match: *` creates it only if there is none, `If-Match: <ETag>` replaces it only if
it is still the version that was read. Of two drivers writing on the same condition, S3 lets
exactly one PUT land; the other gets 412 (or 409 while the first is in progress), so it knows.

This module knows objects and ETags, not leases (`lease` decides what to write and when).
boto3 is the `cluster` extra: it is imported here, when a lease on s3:// is taken. Without it,
or for an s3:// URI with options (`?endpoint_override=...`: pyarrow's spelling, which boto3
does not read), `conditional_object` returns None and the lease falls back to pyarrow's
unconditional PUT. The endpoint and credentials come the standard AWS way (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, ..., profiles), as pyarrow reads them for the rest of the experiment.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

# A plain s3://bucket/key: no options, fragments, escapes or spaces (as fileio's bucket URIs)
_PLAIN = re.compile(r"s3://([^/?#%\s]+)/([^?#%\s]+)")
# What S3 answers when the condition of a PUT does not hold: 412 (the object exists, or its
# ETag is another), 409 (another conditional write of the key is in progress), NoSuchKey
# (If-Match on an object that is gone). Each means: another writer's version is (or is about
# to be) there. By code, not by status alone: a missing bucket is a 404 too.
_CONDITION_FAILED = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})
_CONDITION_STATUS = frozenset({409, 412})


class _Refused(Exception):
    """S3 refused a request on its condition, or there is no such object."""


@contextlib.contextmanager
def _answers(uri: str) -> Iterator[None]:
    """S3's refusals on a condition as _Refused; any other failure as OSError naming `uri`."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _CONDITION_FAILED or status in _CONDITION_STATUS:
            raise _Refused from e
        raise OSError(f"{uri}: {e}") from e
    except BotoCoreError as e:
        raise OSError(f"{uri}: {e}") from e


class ConditionalObject:
    """One S3 object, written only on a condition. Every method raises OSError naming the
    object when S3 cannot be reached or refuses for any other reason."""

    def __init__(self, client: Any, bucket: str, key: str):
        self.client, self.bucket, self.key = client, bucket, key
        self.uri = f"s3://{bucket}/{key}"

    def read(self) -> tuple[bytes, str] | None:
        """(its bytes, its ETag), or None if there is no such object."""
        try:
            with _answers(self.uri):
                got = self.client.get_object(Bucket=self.bucket, Key=self.key)
                return got["Body"].read(), got["ETag"]
        except _Refused:
            return None

    def create(self, body: bytes) -> str | None:
        """Write `body` if there is no object yet: its ETag, or None if there is one."""
        return self._put(body, IfNoneMatch="*")

    def replace(self, body: bytes, etag: str) -> str | None:
        """Write `body` if the object is still the version `etag`: its new ETag, or None if
        another version is there (or none is)."""
        return self._put(body, IfMatch=etag)

    def rewrite(self, body: bytes, etag: str, ours: Callable[[bytes], bool]) -> str | None:
        """Write `body` if the object is still ours: the version `etag`, one whose bytes
        `ours` accepts (a PUT of ours that failed on the wire and landed after all), or none
        (deleted by hand: created again unless another writer created it first). Its new
        ETag, or None if another writer's version is there."""
        new = self.replace(body, etag)
        if new is not None:
            return new
        found = self.read()
        if found is None:
            return self.create(body)
        return self.replace(body, found[1]) if ours(found[0]) else None

    def _put(self, body: bytes, **condition: str) -> str | None:
        try:
            with _answers(self.uri):
                put = self.client.put_object(
                    Bucket=self.bucket, Key=self.key, Body=body, **condition
                )
                return put["ETag"]
        except _Refused:
            return None


def conditional_object(location: str) -> ConditionalObject | None:
    """The object at `location` written with conditions, or None if that is not available
    here (not a plain s3:// URI, or boto3 is not installed: the caller falls back)."""
    plain = _PLAIN.fullmatch(str(location))
    if plain is None:
        return None
    try:
        import boto3
    except ImportError:
        log.warning(
            "boto3 is not installed (pip install 'sweeper[cluster]'): the lease on %s is "
            "written without conditions, so two drivers starting at the same moment can both "
            "run until the next heartbeat",
            location,
        )
        return None
    # A session of its own: creating clients from boto3's default session is not thread-safe
    return ConditionalObject(boto3.session.Session().client("s3"), *plain.groups())
