"""Content digests that bind the stage cache to what it was made from.

The cache (`cache/<stage>.parquet`) is a derived copy: it records, per compacted file it
holds, the file's size and the SHA-256 of its bytes (`file_digest`), and per column the digest
of its own rows (`column_digests`). A reader serves a model from the cache only when the file
still has those bytes and the cache's columns still have those digests; anything else (a
source rewritten at the same size, cache rows edited or appended) is read from the files.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def column_digests(table: pa.Table, names: list[str] | None = None) -> dict[str, str]:
    """{column: SHA-256 of its values} of `table`'s columns (or `names`). The values as read,
    not their buffers: the same rows give the same digest however they are chunked, and a
    null differs from every value."""
    return {
        name: _column_digest(table.column(name))
        for name in (table.column_names if names is None else names)
    }


def _column_digest(column: pa.ChunkedArray) -> str:
    digest = hashlib.sha256(str(column.type).encode())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        # Strings by their first-appearance codes and the distinct values (few per column).
        encoded = pc.dictionary_encode(column, null_encoding="encode").combine_chunks()
        digest.update(json.dumps(encoded.dictionary.to_pylist()).encode())
        values = encoded.indices
    else:
        values = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if values.null_count:
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        values = values.fill_null(False if pa.types.is_boolean(values.type) else 0)
    else:  # the same bytes without asking Arrow for them (most columns have no null)
        valid = np.ones(len(values), dtype=bool)
    digest.update(np.packbits(valid).tobytes())
    digest.update(np.ascontiguousarray(values.to_numpy(zero_copy_only=False)).tobytes())
    return digest.hexdigest()
