"""Whether the model hub answers, asked once per process, and offline mode where it does not.

`validate`, `plan` and `simulate` read only what is on this machine; left alone, the hub's
clients (huggingface_hub, datasets, lm-eval through them) retry each request for about 30 s and
print a line per retry ("Retrying in 8s [Retry 5/5]", issue 63: validate took 198-409 s on the
packaged files with no hub). So these commands ask once, in about a second, and where the hub
does not answer they put the clients in their own offline mode (HF_HUB_OFFLINE, the switch the
clients document), in which a file not cached fails at once. The answer is kept for the process:
one probe, however many models and tasks ask.

A model id is then checked only for its form (`owner/name`); whether it exists is said to be
"not checked: offline" instead of being waited on.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import socket
import sys
from urllib.parse import urlparse

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
PROBE_TIMEOUT_S = 1.5


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@functools.lru_cache(maxsize=1)
def offline() -> bool:
    """True when the user set offline mode or the hub's endpoint does not take a connection within
    PROBE_TIMEOUT_S (HF_ENDPOINT, else the public hub); then offline mode is set for this process."""
    if any(_truthy(os.environ.get(v)) for v in OFFLINE_VARS):
        go_offline()
        return True
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=PROBE_TIMEOUT_S):
            return False
    except OSError:
        go_offline()
        return True


def go_offline() -> None:
    """Offline mode for the hub's clients in this process and the ones it starts: the environment
    for modules not imported yet, their constants for those already imported (they read it once)."""
    for var in OFFLINE_VARS:
        os.environ[var] = "1"
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True
    ds = sys.modules.get("datasets.config")
    if ds is not None:
        ds.HF_HUB_OFFLINE = True
        if hasattr(ds, "HF_DATASETS_OFFLINE"):
            ds.HF_DATASETS_OFFLINE = True


def id_problem(model_id: str) -> str | None:
    """Why `model_id` cannot be a hub model id (its form only), or None."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(model_id)
    except HFValidationError as e:
        return str(e).splitlines()[0]
    return None


def cached_folder(model_id: str) -> str | None:
    """The folder of `model_id` in the hub's local cache (downloaded before), else None; never
    asks the hub."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(model_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached, whatever the client calls it
        return None


def is_offline() -> bool:
    """Whether offline mode is set in this process (by the user or by `offline()`); asks nothing."""
    return any(_truthy(os.environ.get(v)) for v in OFFLINE_VARS)


@contextlib.contextmanager
def quiet_offline():
    """Offline, a third-party task module's own downloads are skipped and what it prints is kept
    off the terminal (lm-eval's IFEval fetches NLTK's punkt_tab at import and prints "Downloaded
    punkt_tab on rank 0" whether or not it could). Online: nothing changes."""
    if not is_offline():
        yield
        return
    try:
        import nltk  # lm-eval's tasks call nltk.download at import
    except ImportError:
        nltk = None
    saved = getattr(nltk, "download", None)
    if nltk is not None:
        nltk.download = lambda *a, **k: False
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        if nltk is not None:
            nltk.download = saved
