"""S3 requests and time per file for the storage operations a sweep makes, against moto's S3
server (the real protocol, on this machine).

Run from the repository root (a benchmark, not a test; under a minute):

    .venv/bin/python benchmarks/s3_requests.py             # 200 files of 20 kB
    .venv/bin/python benchmarks/s3_requests.py --files 1000
    .venv/bin/python benchmarks/s3_requests.py --smoke      # 20 files

Each way writes the same files (a shard's path depth: <root>/certify/<trial>/<setting>/...),
checks that one exists, lists them with sizes and reads every one back:
- `boto3`: one put_object / head_object / get_object per file and one paginated listing, the
  fewest requests S3 allows (the baseline);
- `before`: pyarrow as fileio used it until this benchmark: `FileSystem.from_uri` on every
  call (a region lookup: two HEAD requests), the parent folders made before each write (an
  empty marker object per ancestor) and an eager multipart upload (three requests);
- `fileio`: trainables.kernel.fileio as it is.
Requests are counted from the server's access log; the ratios compare with `boto3`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainables.kernel import fileio

BUCKET = "sweeper-bench"


class Counter(logging.Handler):
    """Counts the S3 server's access-log lines (one per HTTP request)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.requests += "HTTP/1." in record.getMessage()


def locations(prefix: str, count: int) -> list[str]:
    return [
        f"s3://{BUCKET}/{prefix}/certify/t{i % 7:011x}/c/shard-{i:05d}.parquet"
        for i in range(count)
    ]


def run_boto3(names: list[str], data: bytes) -> None:
    import boto3

    s3 = boto3.client("s3")
    keys = [n.split("/", 3)[3] for n in names]
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)
    s3.head_object(Bucket=BUCKET, Key=keys[0])
    prefix = keys[0].split("/", 1)[0] + "/"
    listed = [
        o
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    assert len(listed) == len(keys)
    for key in keys:
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data


def run_before(names: list[str], data: bytes) -> None:
    import pyarrow.fs as pafs

    for name in names:
        fs, path = pafs.FileSystem.from_uri(name)
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as f:
            f.write(data)
    fs, path = pafs.FileSystem.from_uri(names[0])
    assert fs.get_file_info(path).type == pafs.FileType.File
    root = names[0].split("/certify/")[0]
    fs, path = pafs.FileSystem.from_uri(root)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    assert sum(i.type == pafs.FileType.File for i in infos) == len(names)
    for name in names:
        fs, path = pafs.FileSystem.from_uri(name)
        with fs.open_input_stream(path) as f:
            assert f.read() == data


def run_fileio(names: list[str], data: bytes) -> None:
    for name in names:
        fileio.write_bytes_atomic(name, data)
    assert fileio.exists(names[0])
    assert len(fileio.list_sizes(names[0].split("/certify/")[0], ".parquet")) == len(names)
    for name in names:
        assert fileio.read_bytes(name) == data


def measure(run: Callable[[list[str], bytes], None], names, data, counter) -> tuple[int, float]:
    before, start = counter.requests, time.perf_counter()
    run(names, data)
    return counter.requests - before, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--kb", type=int, default=20, help="size of each file")
    parser.add_argument("--smoke", action="store_true", help="20 files: does it run")
    args = parser.parse_args()
    if args.smoke:
        args.files = 20

    from moto.server import ThreadedMotoServer

    counter = Counter()
    logging.getLogger("werkzeug").addHandler(counter)
    logging.getLogger("werkzeug").propagate = False  # count the lines, do not print them
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    data = os.urandom(args.kb * 1024)
    results = {}
    for label, run in [("boto3", run_boto3), ("before", run_before), ("fileio", run_fileio)]:
        results[label] = measure(run, locations(label, args.files), data, counter)
    server.stop()
    base_requests, base_time = results["boto3"]
    print(f"{args.files} files of {args.kb} kB: write, exists, list, read back")
    for label, (requests, seconds) in results.items():
        print(
            f"  {label:<7} {requests:6d} requests ({requests / args.files:5.2f} per file, "
            f"{requests / base_requests:5.2f}x boto3)  {seconds:6.2f} s "
            f"({seconds / base_time:5.2f}x boto3)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
