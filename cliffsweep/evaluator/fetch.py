"""A checkpoint where an engine can read it: engines read local folders, checkpoints may live in
remote storage (S3, GCS)."""

from __future__ import annotations

import os
import tempfile


def local_copy(uri: str) -> tuple[str, tempfile.TemporaryDirectory | None]:
    """(a local folder holding `uri`, the temporary directory to clean up, or None when `uri`
    is already local)."""
    if "://" not in uri or uri.startswith("file://"):
        return uri.removeprefix("file://"), None
    import pyarrow.fs as pafs

    tmp = tempfile.TemporaryDirectory(prefix="cliffsweep-eval-")
    fs, path = pafs.FileSystem.from_uri(uri)
    copy_for_eval(fs, path, tmp.name)
    return tmp.name, tmp


def copy_for_eval(fs, folder: str, dest: str) -> None:
    """Copy a checkpoint folder without its training state (trainables/resume.py): that holds
    the optimizer's moments, several times the model's size, and evaluation never reads it."""
    import pyarrow.fs as pafs

    from cliffsweep.storage.ledger import TRAIN_STATE

    root = folder.rstrip("/")
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if info.type != pafs.FileType.File or info.base_name == TRAIN_STATE:
            continue
        target = os.path.join(dest, info.path[len(root):].lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        pafs.copy_files(info.path, target, source_filesystem=fs,
                        destination_filesystem=pafs.LocalFileSystem())
