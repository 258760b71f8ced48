"""Byte-level storage: atomic writes, listing, file:// URIs."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from trainables.kernel import fileio


def test_atomic_write_leaves_no_temp_and_a_shareable_mode(tmp_path):
    target = tmp_path / "a" / "b.bin"
    fileio.write_bytes_atomic(str(target), b"first")
    fileio.write_bytes_atomic(str(target), b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["b.bin"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_a_reader_of_the_old_file_keeps_reading_it_whole(tmp_path):
    """The new bytes arrive under a new inode (rename): a reader that opened the file before
    the write reads the old content in full, never a truncated or mixed file."""
    target = tmp_path / "shard.parquet"
    fileio.write_bytes_atomic(str(target), b"old" * 1000)
    with open(target, "rb") as reader:
        fileio.write_bytes_atomic(str(target), b"new")
        assert reader.read() == b"old" * 1000
    assert target.read_bytes() == b"new"


def test_a_write_that_fails_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    """A write that dies before it is durable (here fsync fails, as on a full disk) leaves the
    previous file untouched and cleans up its temp file."""
    target = tmp_path / "trial.json"
    fileio.write_bytes_atomic(str(target), b"epoch 3")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        fileio.write_bytes_atomic(str(target), b"epoch 4")
    assert target.read_bytes() == b"epoch 3"
    assert [p.name for p in tmp_path.iterdir()] == ["trial.json"]


def test_file_uris_and_listing(tmp_path):
    uri = f"file://{tmp_path}"
    fileio.write_bytes_atomic(fileio.join(uri, "x", "1.parquet"), b"1")
    fileio.write_bytes_atomic(fileio.join(uri, "x", "y", "2.parquet"), b"22")
    (tmp_path / "x" / ".3.parquet.tmp").write_bytes(b"partial")
    assert fileio.exists(fileio.join(uri, "x", "1.parquet"))
    assert not fileio.exists(fileio.join(uri, "x", "nope"))
    assert fileio.read_bytes(fileio.join(uri, "x", "y", "2.parquet")) == b"22"
    listed = fileio.list_files(uri, ".parquet")
    assert [f.rsplit("/", 1)[-1] for f in listed] == ["1.parquet", "2.parquet"]
    assert fileio.list_files(fileio.join(uri, "missing")) == []
    assert fileio.total_size(str(tmp_path / "x")) == 1 + 2 + len(b"partial")


def test_listing_names_every_visible_file_below_as_a_full_location(tmp_path):
    """list_files / list_sizes give full locations in the caller's spelling (file:// URI or
    path, with or without a trailing slash), recursively and sorted, without hidden files or
    directories; total_size counts every byte (hidden files too, an empty file as 0)."""
    for name, data in [
        ("a.parquet", b"1"),
        ("notes.txt", b"333"),
        ("y/b.parquet", b"22"),
        ("y/empty.parquet", b""),
        (".c.parquet", b"4444"),
        ("y/.d.tmp", b"5"),
    ]:
        fileio.write_bytes_atomic(str(tmp_path / name), data)
    (tmp_path / "dir.parquet").mkdir()  # a directory, not a file
    uri = f"file://{tmp_path}"
    expected = [f"{uri}/a.parquet", f"{uri}/y/b.parquet", f"{uri}/y/empty.parquet"]
    assert fileio.list_files(uri, ".parquet") == expected
    assert fileio.list_files(uri + "/", ".parquet") == expected
    assert fileio.list_files(uri) == [*expected[:1], f"{uri}/notes.txt", *expected[1:]]
    assert fileio.list_files(str(tmp_path), ".txt") == [str(tmp_path / "notes.txt")]
    sizes = {f"{uri}/a.parquet": 1, f"{uri}/y/b.parquet": 2, f"{uri}/y/empty.parquet": 0}
    assert fileio.list_sizes(uri + "/", ".parquet") == sizes
    assert fileio.list_sizes(uri) == {**sizes, f"{uri}/notes.txt": 3}  # no suffix: every file
    assert fileio.total_size(uri) == 1 + 3 + 2 + 0 + 4 + 1
    assert fileio.total_size(str(tmp_path / "missing")) == 0
    assert fileio.list_sizes(str(tmp_path / "missing")) == {}


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o000])
def test_the_file_mode_is_the_one_open_gives_under_the_umask(tmp_path, umask):
    """Atomic writes chmod their temp file to what a plain open() would have created."""
    saved = os.umask(umask)
    try:
        mode = fileio._file_mode()
        with open(tmp_path / "plain", "w"):
            pass
        assert os.umask(umask) == umask  # _file_mode put the umask back
    finally:
        os.umask(saved)
    assert mode == stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o666 & ~umask


def test_delete_removes_one_file_and_a_missing_one_is_no_error(tmp_path):
    keep, gone = tmp_path / "keep.parquet", tmp_path / "gone.parquet"
    for path in (keep, gone):
        fileio.write_bytes_atomic(str(path), b"x")
    fileio.delete(f"file://{gone}")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.parquet"]
    fileio.delete(str(gone))  # already gone: nothing happens
    fileio.delete(str(tmp_path / "never-was"))
    assert keep.read_bytes() == b"x"


def test_list_stats_gives_each_listed_files_size_and_modification_time(tmp_path):
    """Sizes in bytes and mtimes in seconds since the epoch, for the files `list_files` names
    (an empty file and one modified at the epoch itself are 0, not missing)."""
    for name, data in [
        ("a.parquet", b"333"),
        ("y/b.parquet", b""),
        (".c.parquet", b"1"),
        ("notes.txt", b"22"),
    ]:
        fileio.write_bytes_atomic(str(tmp_path / name), data)
    os.utime(tmp_path / "a.parquet", ns=(0, 1_700_000_000_250_000_000))
    os.utime(tmp_path / "y" / "b.parquet", ns=(0, 0))
    uri = f"file://{tmp_path}"
    stats = fileio.list_stats(uri, ".parquet")
    assert stats == {
        f"{uri}/a.parquet": (3, 1_700_000_000_250_000_000 / 1e9),
        f"{uri}/y/b.parquet": (0, 0.0),
    }
    assert sorted(stats) == fileio.list_files(uri, ".parquet")
    assert sorted(fileio.list_stats(uri)) == fileio.list_files(uri)  # no suffix: every file
    assert fileio.list_stats(str(tmp_path / "missing")) == {}


def test_the_temp_file_is_hidden_beside_its_target_so_the_rename_is_atomic(tmp_path, monkeypatch):
    """The temp file sits in the target's own folder (a rename is atomic only within one
    filesystem) under a hidden ".<name>.<random>.tmp" name, which listings skip."""
    renames = []
    replace = os.replace

    def recording(src, dst, **fds):
        same = os.fstat(fds["src_dir_fd"]).st_ino == os.fstat(fds["dst_dir_fd"]).st_ino
        renames.append((src, dst, same, os.fstat(fds["dst_dir_fd"]).st_ino))
        replace(src, dst, **fds)

    monkeypatch.setattr(os, "replace", recording)
    target = tmp_path / "y" / "a.parquet"
    fileio.write_bytes_atomic(f"file://{target}", b"1")
    [(src, dst, same, folder)] = renames
    assert dst == target.name and same and folder == target.parent.stat().st_ino
    assert src.startswith(".a.parquet.") and src.endswith(".tmp")
    assert target.read_bytes() == b"1" and os.listdir(target.parent) == ["a.parquet"]


@pytest.mark.parametrize(
    ("error", "filename"),
    [
        (OSError(28, "No space left on device"), "target"),  # a bare write() error: named
        (OSError(5, "Input/output error", "/dev/sdz"), "/dev/sdz"),  # already named: kept
        (OSError("no errno"), None),  # no errno to name a file by: re-raised as it is
    ],
)
def test_a_failed_write_names_the_file_it_was_writing(tmp_path, monkeypatch, error, filename):
    def failing(fd):
        raise error

    target = str(tmp_path / "trial.json")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError) as raised:
        fileio.write_bytes_atomic(target, b"epoch 4")
    assert raised.value.filename == (target if filename == "target" else filename)
    assert raised.value.errno == error.errno and raised.value.strerror == error.strerror


def test_uris_join_with_one_slash():
    assert fileio.join("s3://bucket/sweeps/", "e", "x.json") == "s3://bucket/sweeps/e/x.json"
    assert fileio.join("file:///tmp/s//", "e") == "file:///tmp/s/e"
    assert fileio.join("/tmp/s/", "e") == str(Path("/tmp/s", "e"))
    assert fileio.join("s3://bucket/XX/", "e") == "s3://bucket/XX/e"  # only "/" is stripped


def test_a_write_makes_the_parent_folders_on_a_filesystem_that_has_folders(monkeypatch):
    """pyarrow's mock filesystem (in memory, folders required as on HDFS) stands in for
    every non-object store: a write into folders that do not exist yet succeeds, makes them,
    and the file reads back. (Each mock:// URI opens a new, empty filesystem: here every one
    is the first one opened, so the read sees the write.)"""
    opened: list = []
    real = fileio.filesystem

    def one_mock(location):
        fs, path = real(location)
        opened.append(fs)
        return opened[0], path

    monkeypatch.setattr(fileio, "filesystem", one_mock)
    fileio.write_bytes_atomic("mock:///a/b/c.parquet", b"1")
    fs = opened[0]
    assert fs.type_name == "mock"
    assert fs.get_file_info("a/b").type == pafs.FileType.Directory
    assert fileio.read_bytes("mock:///a/b/c.parquet") == b"1"
    assert fileio.exists("mock:///a/b/c.parquet") and not fileio.exists("mock:///a/b/d.parquet")


def test_every_operation_on_an_s3_bucket(s3_endpoint):
    """Writes, reads, listings and deletes through pyarrow's S3 filesystem against moto's
    S3 server: full s3:// locations in, full s3:// locations out."""
    base = "s3://sweeper-test/fileio-unit"
    a, b = f"{base}/x/a.parquet", f"{base}/x/y/deep/b.parquet"
    for location, data in [(a, b"333"), (b, b""), (f"{base}/notes.txt", b"22")]:
        fileio.write_bytes_atomic(location, data)
    assert fileio.exists(a) and fileio.exists(f"{base}/x") and not fileio.exists(f"{base}/nope")
    assert fileio.read_bytes(a) == b"333" and fileio.read_bytes(b) == b""
    assert fileio.list_files(base, ".parquet") == [a, b]
    assert fileio.list_files(base + "/") == [f"{base}/notes.txt", a, b]
    assert fileio.list_sizes(f"{base}/x/", ".parquet") == {a: 3, b: 0}
    assert fileio.total_size(base) == 5
    fileio.delete(a)
    fileio.delete(a)  # already gone: no error
    assert not fileio.exists(a) and fileio.list_files(base, ".parquet") == [b]
    assert fileio.list_files(f"{base}/missing") == [] and fileio.total_size(f"{base}/missing") == 0


class _Requests(logging.Handler):
    """Counts the HTTP requests moto's S3 server (in this process) logs."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "HTTP/1." in record.getMessage():
            self.lines.append(record.getMessage())


def test_a_small_write_to_s3_is_one_put_and_no_folder_markers(s3_endpoint):
    """One filesystem per bucket (its region looked up once), no empty "folder/" objects,
    and a small file sent as one PUT, not a three-request multipart upload."""
    base = "s3://sweeper-test/fileio-requests"
    fileio.write_bytes_atomic(f"{base}/warm-up", b"")  # the bucket's filesystem is made once
    assert fileio.filesystem(f"{base}/x")[0] is fileio.filesystem("s3://sweeper-test")[0]
    for odd in ("", "/", "/x/", "/abX", "/a//b", "/a/http://b", "/a%20b", "/x?region=us-east-1"):
        location = f"s3://sweeper-test{odd}"  # the path is the one pyarrow's own parsing gives
        assert fileio.filesystem(location)[1] == pafs.FileSystem.from_uri(location)[1], odd
    requests = _Requests()
    logging.getLogger("werkzeug").addHandler(requests)
    try:
        fileio.write_bytes_atomic(f"{base}/certify/t/c/shard-00000-of-00001.parquet", b"1" * 5000)
    finally:
        logging.getLogger("werkzeug").removeHandler(requests)
    assert (
        len(requests.lines) == 1
        and '"PUT /sweeper-test/fileio-requests/certify' in requests.lines[0]
    )
    assert fileio.list_files(base) == [
        f"{base}/certify/t/c/shard-00000-of-00001.parquet",
        f"{base}/warm-up",
    ]


def test_an_interrupt_just_after_the_rename_stays_an_interrupt(tmp_path, monkeypatch):
    """Ctrl-C can land between the rename and the end of the write: the temp file is gone
    then (it is the new file), and the interrupt, not a missing-file error, goes up."""
    replace = os.replace

    def replace_then_interrupt(src, dst, **fds):
        replace(src, dst, **fds)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        fileio.write_bytes_atomic(str(tmp_path / "trial.json"), b"epoch 4")
    assert [p.name for p in tmp_path.iterdir()] == ["trial.json"]


def test_a_write_below_a_confined_root_never_follows_a_link(tmp_path):
    """The primitive under every command: each component below the root is opened with
    O_NOFOLLOW; a link at the final name is replaced, not written through."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    (root / "a").mkdir(parents=True)
    elsewhere.mkdir()
    fileio.confine(root)
    (root / "a" / "b").symlink_to(elsewhere, target_is_directory=True)
    for write in (
        lambda: fileio.write_bytes_atomic(str(root / "a" / "b" / "c" / "f"), b"x"),
        lambda: fileio.move_confined(str(root / "a"), str(root / "a" / "b" / "g")),
        lambda: fileio.delete(str(root / "a" / "b" / "f")),
        lambda: os.close(fileio.open_confined(str(root / "a" / "b" / "lock"), os.O_CREAT)),
    ):
        with pytest.raises(fileio.LinkError, match="is a symlink"):
            write()
    (elsewhere / "f").write_bytes(b"theirs")
    (root / "a" / "f").symlink_to(elsewhere / "f")
    fileio.write_bytes_atomic(str(root / "a" / "f"), b"ours")
    assert (elsewhere / "f").read_bytes() == b"theirs"
    assert not (root / "a" / "f").is_symlink() and (root / "a" / "f").read_bytes() == b"ours"
    with pytest.raises(fileio.LinkError):
        fileio.open_confined(str(root / "a" / "b"), os.O_RDONLY)  # the link itself
    assert list(elsewhere.iterdir()) == [elsewhere / "f"]


def test_a_fifo_or_a_device_is_refused_at_once_naming_it(tmp_path):
    """A FIFO planted where sweeper reads would block the reader forever: it is opened without
    blocking and refused on its fstat, as is a device (which never ends)."""
    fifo = tmp_path / "trial.json"
    os.mkfifo(fifo)
    for location in (str(fifo), f"file://{fifo}"):
        with pytest.raises(fileio.UnreadableFileError) as e:
            fileio.read_bytes(location)
        assert e.value.problems == [
            f"cannot read {location} (a FIFO, not a regular file): remove it (or put the real "
            "file there) and re-run"
        ]
    with pytest.raises(fileio.UnreadableFileError, match="a device or directory"):
        fileio.read_bytes("/dev/zero", limit=10)
    assert fileio.regular_file_problem(str(fifo)) == "a FIFO, not a regular file"
    assert fileio.regular_file_problem(str(tmp_path / "missing")) is None
    (tmp_path / "real").write_bytes(b"x")
    assert fileio.regular_file_problem(str(tmp_path / "real")) is None
    assert fileio.read_bytes(str(tmp_path / "real")) == b"x"


def test_a_bound_refuses_a_sparse_file_before_reading_it(tmp_path):
    """A sparse 20 GB file takes no disk; read whole, it would take 20 GB of memory. Its size
    from fstat is refused first; a file over the bound by one byte is refused too."""
    huge = tmp_path / "sweep.json"
    with open(huge, "wb") as f:
        f.truncate(20 * 2**30)
    with pytest.raises(fileio.UnreadableFileError) as e:
        fileio.read_bytes(str(huge), limit=2**20)
    assert e.value.why == "21,474,836,480 bytes, where such a file holds at most 1,048,576"
    assert fileio.regular_file_problem(str(huge), limit=2**20) == e.value.why
    (tmp_path / "small").write_bytes(b"x" * 11)
    assert fileio.read_bytes(str(tmp_path / "small"), limit=11) == b"x" * 11
    with pytest.raises(
        fileio.UnreadableFileError, match="11 bytes, where such a file holds at most 10"
    ):
        fileio.read_bytes(str(tmp_path / "small"), limit=10)


def test_a_read_below_a_confined_root_refuses_a_link_at_the_name(tmp_path):
    """As a write would: a link inside the storage is planted (sweeper writes none). The root
    may be a link (O_NOFOLLOW concerns the last component), and outside it links are read."""
    real, elsewhere = tmp_path / "real", tmp_path / "theirs"
    (real / "exp").mkdir(parents=True)
    elsewhere.write_bytes(b"secret")
    (tmp_path / "store").symlink_to(real, target_is_directory=True)
    fileio.confine(tmp_path / "store")
    (real / "exp" / "sweep.json").write_bytes(b"{}")
    assert fileio.read_bytes(str(tmp_path / "store" / "exp" / "sweep.json")) == b"{}"
    planted = tmp_path / "store" / "exp" / "trial.json"
    planted.symlink_to(elsewhere)
    with pytest.raises(fileio.UnreadableFileError, match="a symlink inside the storage"):
        fileio.read_bytes(str(planted))
    (tmp_path / "import.parquet").symlink_to(elsewhere)
    assert fileio.read_bytes(str(tmp_path / "import.parquet")) == b"secret"
