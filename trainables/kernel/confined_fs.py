"""The local file system as pyarrow reads it (`fileio.filesystem` of a local path): pyarrow's
own, except that a file is opened by `local_reads.open_regular`, so that every Parquet read by
path below the storage (a footer, a scan of many files, the cache) follows no link, as
sweeper's own reads do. The fd opened there is handed to pyarrow as a native file through
`/proc/self/fd` (the very file opened, whatever the name points to by then), or as a Python
file where there is no /proc. Everything else (listing, writing) is pyarrow's local file
system unchanged. Imported on first use: it imports pyarrow."""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from trainables.kernel.local_reads import UnreadableFileError, open_regular

_PROC_FDS = "/proc/self/fd"


class ConfinedHandler(pafs.FileSystemHandler):
    """pyarrow's LocalFileSystem whose input files are opened without following a link below
    a confined root; a refused file is an OSError naming it and why (as a missing one is)."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfinedHandler)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(ConfinedHandler)

    def get_type_name(self) -> str:
        return "confined-local"

    def open_input_file(self, path: str) -> pa.NativeFile:
        try:
            fd = open_regular(path, Path(os.path.abspath(path)), None)
        except UnreadableFileError as e:
            raise OSError(errno.ELOOP, f"cannot read it: {e.why}", path) from None
        if not os.path.isdir(_PROC_FDS):
            return pa.PythonFile(os.fdopen(fd, "rb"), mode="r")
        try:
            return pa.OSFile(f"{_PROC_FDS}/{fd}")  # the same open file, not the name again
        finally:
            os.close(fd)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def normalize_path(self, path: str) -> str:
        return self.local.normalize_path(path)

    def get_file_info(self, paths):
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError(errno.EPERM, "sweeper never empties the root of the file system")

    def delete_file(self, path):
        self.local.delete_file(path)

    def move(self, src, dest):
        self.local.move(src, dest)

    def copy_file(self, src, dest):
        self.local.copy_file(src, dest)

    def open_output_stream(self, path, metadata):
        return self.local.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        return self.local.open_append_stream(path, metadata=metadata)


@functools.cache
def local_filesystem() -> pafs.FileSystem:
    """The one confined local file system of this process."""
    return pafs.PyFileSystem(ConfinedHandler())
