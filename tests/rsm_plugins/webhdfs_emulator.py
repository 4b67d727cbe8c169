"""A WebHDFS *emulator*: an in-memory server speaking the WebHDFS REST API on 127.0.0.1.

Not HDFS. No NameNode or DataNode can run on these machines (ENVIRONMENT.md), so the HDFS
path of the fsspec plugin is tested against this server, which follows the WebHDFS REST
specification for the operations clients use: GETFILESTATUS, LISTSTATUS, MKDIRS, CREATE and
APPEND (two steps: a 307 redirect to a "datanode" URL on the same server, then the data), OPEN
(307 then the bytes of ``offset``/``length``), RENAME (HDFS's rules: false when the source is
missing or the destination exists), DELETE (false when missing), GETHOMEDIRECTORY,
GETCONTENTSUMMARY and GET_BLOCK_LOCATIONS. Errors are ``{"RemoteException": ...}`` documents
with HDFS's exception names. JSON responses carry no Content-Type header (Spark's WebHDFS
client lacks the Jersey class to parse one otherwise).

Usage::

    with WebHdfsEmulator() as hdfs:
        url = hdfs.url("/tierlog")          # webhdfs://127.0.0.1:PORT/tierlog
"""

from __future__ import annotations

import json
import posixpath
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

PREFIX = "/webhdfs/v1"
BLOCK_SIZE = 128 * 1024 * 1024


@dataclass
class _Node:
    is_dir: bool
    data: bytearray = field(default_factory=bytearray)
    mtime: int = field(default_factory=lambda: int(time.time() * 1000))


class _HdfsError(Exception):
    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exception = exception


class _Namespace:
    """The file tree: absolute normalised paths -> nodes; one lock for everything."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, _Node] = {"/": _Node(is_dir=True)}

    def get(self, path: str) -> _Node:
        node = self.nodes.get(path)
        if node is None:
            raise _HdfsError(404, "FileNotFoundException", f"File does not exist: {path}")
        return node

    def mkdirs(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current += "/" + part
            node = self.nodes.get(current)
            if node is None:
                self.nodes[current] = _Node(is_dir=True)
            elif not node.is_dir:
                raise _HdfsError(
                    403, "ParentNotDirectoryException", f"Parent path is not a directory: {current}"
                )

    def children(self, path: str) -> list[str]:
        base = path.rstrip("/") + "/"
        return sorted(
            p for p in self.nodes if p.startswith(base) and p != base and "/" not in p[len(base) :]
        )

    def status(self, path: str, node: _Node, suffix: str) -> dict[str, Any]:
        return {
            "accessTime": node.mtime,
            "blockSize": BLOCK_SIZE,
            "childrenNum": len(self.children(path)) if node.is_dir else 0,
            "fileId": abs(hash(path)) % (1 << 40),
            "group": "supergroup",
            "length": 0 if node.is_dir else len(node.data),
            "modificationTime": node.mtime,
            "owner": "tierlog",
            "pathSuffix": suffix,
            "permission": "755" if node.is_dir else "644",
            "replication": 0 if node.is_dir else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if node.is_dir else "FILE",
        }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else each 2-write response waits ~40 ms for an ACK

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing -------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, doc: Any, status: int = 200) -> None:
        self._send(status, json.dumps(doc).encode())

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        body = self._body()
        if not url.path.startswith(PREFIX):
            self._json(_exception(404, "FileNotFoundException", url.path), 404)
            return
        path = posixpath.normpath("/" + url.path[len(PREFIX) :].lstrip("/"))
        params = {k.lower(): v[-1] for k, v in parse_qs(url.query).items()}
        op = params.get("op", "").upper()
        handler = getattr(self, f"op_{self.command}_{op}", None)
        if handler is None:
            self._json(_exception(400, "IllegalArgumentException", f"Invalid operation {op}"), 400)
            return
        try:
            with self.server.ns.lock:
                handler(path, params, body)
        except _HdfsError as e:
            self._json(_exception(e.status, e.exception, str(e)), e.status)

    do_GET = do_PUT = do_POST = do_DELETE = _dispatch

    def _redirect(self, path: str, params: dict[str, str]) -> None:
        query = urlencode({**params, "datanode": "true"})
        host, port = self.server.server_address[:2]
        self._send(307, headers={"Location": f"http://{host}:{port}{PREFIX}{path}?{query}"})

    # -- operations -----------------------------------------------------------------------------

    def op_GET_GETFILESTATUS(self, path: str, params: dict[str, str], body: bytes) -> None:
        ns = self.server.ns
        self._json({"FileStatus": ns.status(path, ns.get(path), "")})

    def op_GET_LISTSTATUS(self, path: str, params: dict[str, str], body: bytes) -> None:
        ns = self.server.ns
        node = ns.get(path)
        if not node.is_dir:
            statuses = [ns.status(path, node, "")]
        else:
            statuses = [ns.status(c, ns.nodes[c], posixpath.basename(c)) for c in ns.children(path)]
        self._json({"FileStatuses": {"FileStatus": statuses}})

    def op_GET_GETHOMEDIRECTORY(self, path: str, params: dict[str, str], body: bytes) -> None:
        self._json({"Path": f"/user/{params.get('user.name', 'tierlog')}"})

    def op_GET_GETCONTENTSUMMARY(self, path: str, params: dict[str, str], body: bytes) -> None:
        ns = self.server.ns
        ns.get(path)
        below = [p for p in ns.nodes if p == path or p.startswith(path.rstrip("/") + "/")]
        files = [ns.nodes[p] for p in below if not ns.nodes[p].is_dir]
        self._json(
            {
                "ContentSummary": {
                    "directoryCount": len(below) - len(files),
                    "fileCount": len(files),
                    "length": sum(len(f.data) for f in files),
                    "quota": -1,
                    "spaceConsumed": sum(len(f.data) for f in files),
                    "spaceQuota": -1,
                }
            }
        )

    def op_GET_GET_BLOCK_LOCATIONS(self, path: str, params: dict[str, str], body: bytes) -> None:
        node = self.server.ns.get(path)
        self._json(
            {
                "LocatedBlocks": {
                    "fileLength": len(node.data),
                    "isLastBlockComplete": True,
                    "isUnderConstruction": False,
                    "lastLocatedBlock": None,
                    "locatedBlocks": [],
                }
            }
        )

    def op_GET_OPEN(self, path: str, params: dict[str, str], body: bytes) -> None:
        node = self.server.ns.get(path)
        if node.is_dir:
            raise _HdfsError(404, "FileNotFoundException", f"Path is not a file: {path}")
        if params.get("datanode") != "true":
            self._redirect(path, params)
            return
        offset = int(params.get("offset", 0))
        if offset < 0 or offset > len(node.data):
            raise _HdfsError(
                403, "IOException", f"Offset={offset} out of the range [0, {len(node.data)})"
            )
        length = int(params["length"]) if "length" in params else len(node.data) - offset
        self._send(
            200,
            bytes(node.data[offset : offset + length]),
            {"Content-Type": "application/octet-stream"},
        )

    def op_PUT_MKDIRS(self, path: str, params: dict[str, str], body: bytes) -> None:
        self.server.ns.mkdirs(path)
        self._json({"boolean": True})

    def op_PUT_CREATE(self, path: str, params: dict[str, str], body: bytes) -> None:
        ns = self.server.ns
        existing = ns.nodes.get(path)
        if existing is not None and existing.is_dir:
            raise _HdfsError(403, "FileAlreadyExistsException", f"{path} is a directory")
        if existing is not None and params.get("overwrite", "false") != "true":
            raise _HdfsError(403, "FileAlreadyExistsException", f"{path} already exists")
        if params.get("datanode") != "true":
            self._redirect(path, params)
            return
        ns.mkdirs(posixpath.dirname(path))
        ns.nodes[path] = _Node(is_dir=False, data=bytearray(body))
        host, port = self.server.server_address[:2]
        self._send(201, headers={"Location": f"hdfs://{host}:{port}{path}"})

    def op_POST_APPEND(self, path: str, params: dict[str, str], body: bytes) -> None:
        node = self.server.ns.get(path)
        if node.is_dir:
            raise _HdfsError(404, "FileNotFoundException", f"Path is not a file: {path}")
        if params.get("datanode") != "true":
            self._redirect(path, params)
            return
        node.data += body
        node.mtime = int(time.time() * 1000)
        self._send(200)

    def op_PUT_RENAME(self, path: str, params: dict[str, str], body: bytes) -> None:
        ns = self.server.ns
        destination = posixpath.normpath(params.get("destination", ""))
        parent = ns.nodes.get(posixpath.dirname(destination))
        if path not in ns.nodes or destination in ns.nodes or parent is None or not parent.is_dir:
            self._json({"boolean": False})
            return
        base = path.rstrip("/") + "/"
        for p in [p for p in ns.nodes if p == path or p.startswith(base)]:
            ns.nodes[destination + p[len(path) :]] = ns.nodes.pop(p)
        self._json({"boolean": True})

    def op_DELETE_DELETE(self, path: str, params: dict[str, str], body: bytes) -> None:
        ns = self.server.ns
        node = ns.nodes.get(path)
        if node is None or path == "/":
            self._json({"boolean": False})
            return
        if node.is_dir and ns.children(path) and params.get("recursive") != "true":
            raise _HdfsError(403, "PathIsNotEmptyDirectoryException", f"{path} is non empty")
        base = path.rstrip("/") + "/"
        for p in [p for p in ns.nodes if p == path or p.startswith(base)]:
            del ns.nodes[p]
        self._json({"boolean": True})


def _exception(status: int, exception: str, message: str) -> dict[str, Any]:
    java = {
        "FileNotFoundException": "java.io.FileNotFoundException",
        "IllegalArgumentException": "java.lang.IllegalArgumentException",
    }.get(exception, f"org.apache.hadoop.fs.{exception}")
    return {"RemoteException": {"exception": exception, "javaClassName": java, "message": message}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.ns = _Namespace()


class WebHdfsEmulator:
    """The emulator on 127.0.0.1 (a free port unless given), serving from a thread."""

    def __init__(self, port: int = 0) -> None:
        self._server = _Server(("127.0.0.1", port))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhdfs-emulator", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"webhdfs://127.0.0.1:{self.port}{path}"

    def read(self, path: str) -> bytes | None:
        """Back door: a file's bytes, or None."""
        with self._server.ns.lock:
            node = self._server.ns.nodes.get(posixpath.normpath(path))
            return None if node is None or node.is_dir else bytes(node.data)

    def write(self, path: str, data: bytes) -> None:
        """Back door: replace a file."""
        with self._server.ns.lock:
            ns = self._server.ns
            ns.mkdirs(posixpath.dirname(path))
            ns.nodes[posixpath.normpath(path)] = _Node(is_dir=False, data=bytearray(data))

    def files(self, under: str = "/") -> list[str]:
        """Back door: every file path below ``under``."""
        base = under.rstrip("/") + "/"
        with self._server.ns.lock:
            return [
                p for p, n in self._server.ns.nodes.items() if not n.is_dir and p.startswith(base)
            ]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> WebHdfsEmulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
