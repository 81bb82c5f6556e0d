"""A real S3-compatible server on loopback for the object-storage tests (moto's server, a
separate process speaking the S3 protocol; no mock objects in the code under test), with a
TCP relay in front of it that a test can cut to make storage unavailable for a while."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """127.0.0.1:port -> target, connection by connection. `down()` closes every connection
    and refuses new ones until `up()`: storage that is unreachable for a while. `refused` counts
    the connections refused while down: an outage that refused none hit nothing."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self._up = threading.Event()
        self._up.set()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", self.port))
        self._srv.settimeout(0.2)
        self._stop = False
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._srv.accept()
            except (TimeoutError, OSError):
                continue
            if not self._up.is_set():
                client.close()  # refused while down
                self.refused += 1
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns = [c for c in self._conns if c.fileno() != -1] + [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()  # one connection per request from some clients: no descriptor may leak

    def down(self) -> None:
        self._up.clear()
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._conns.clear()

    def up(self) -> None:
        self._up.set()

    def close(self) -> None:
        self._stop = True
        self.down()
        self._srv.close()


@contextmanager
def s3_server(tmp: Path, bucket: str = "sweeps", relay: bool = True):
    """Start moto's S3 server on loopback behind a Relay; yield (endpoint, relay) with the
    AWS_* environment set for this process (and so for Ray clusters it starts). relay=False:
    the endpoint is moto's own port and the relay None (benchmarks: the relay's Python threads
    would share the measuring process's interpreter lock)."""
    port = free_port()
    log = open(tmp / "moto.log", "w")
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"),
                             "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    relay = Relay(port) if relay else None
    endpoint = f"http://127.0.0.1:{relay.port if relay else port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing-key-id",
           "AWS_SECRET_ACCESS_KEY": "testing-secret-value-8f3a", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import pyarrow.fs as pafs

        deadline = time.time() + 30
        while True:
            try:
                fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1",
                                       allow_bucket_creation=True)
                fs.create_dir(bucket)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.3)
        yield endpoint, relay
    finally:
        if relay:
            relay.close()
        proc.terminate()
        try:  # a server holding tens of thousands of objects (bench_store) can take a while
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
