"""Every request a process makes of its stores, counted (issue 62 part 1: store requests per
driver tick, measured by rehearsal). With CLIFFSWEEP_COUNT_REQUESTS=1 in the environment,
`store.filesystem` wraps each store's filesystem in `Counting`, which forwards every call and adds
it to `REQUESTS` by kind; a benchmark reads `REQUESTS` (this process's). Off by default: the
wrapper is a Python call between pyarrow and its filesystem, nothing a sweep needs.

Kinds follow object storage's requests: `list` (a folder listed), `head` (one file looked up),
`get` (a file opened for reading), `put` (a file opened for writing), `move`, `delete`, `mkdir`.
"""

from __future__ import annotations

import os
from collections import Counter

import pyarrow.fs as pafs

REQUESTS: Counter = Counter()
ENV = "CLIFFSWEEP_COUNT_REQUESTS"


def counting_on() -> bool:
    return os.environ.get(ENV) == "1"


class Counting(pafs.FileSystemHandler):
    """`inner`'s calls, each counted in REQUESTS."""

    def __init__(self, inner: pafs.FileSystem):
        self.inner = inner

    def get_type_name(self) -> str:
        return f"counting+{self.inner.type_name}"

    def normalize_path(self, path):
        return self.inner.normalize_path(path)

    def get_file_info(self, paths):
        REQUESTS["head"] += len(paths)
        return self.inner.get_file_info(paths)

    def get_file_info_selector(self, selector):
        REQUESTS["list"] += 1
        return self.inner.get_file_info(selector)

    def create_dir(self, path, recursive):
        REQUESTS["mkdir"] += 1
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        REQUESTS["delete"] += 1
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        REQUESTS["delete"] += 1
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        REQUESTS["delete"] += 1
        self.inner.delete_dir_contents("/", accept_root_dir=True)

    def delete_file(self, path):
        REQUESTS["delete"] += 1
        self.inner.delete_file(path)

    def move(self, src, dest):
        REQUESTS["move"] += 1
        self.inner.move(src, dest)

    def copy_file(self, src, dest):
        REQUESTS["put"] += 1
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path):
        REQUESTS["get"] += 1
        return self.inner.open_input_stream(path)

    def open_input_file(self, path):
        REQUESTS["get"] += 1
        return self.inner.open_input_file(path)

    def open_output_stream(self, path, metadata):
        REQUESTS["put"] += 1
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path, metadata):
        REQUESTS["put"] += 1
        return self.inner.open_append_stream(path, metadata=metadata)


def counted(fs: pafs.FileSystem) -> pafs.FileSystem:
    """`fs`, its requests counted when CLIFFSWEEP_COUNT_REQUESTS=1."""
    return pafs.PyFileSystem(Counting(fs)) if counting_on() else fs
