"""`cifar10 download` against a real HTTP server on 127.0.0.1 serving an archive in the official
layout (cifar-10-python.tar.gz: cifar-10-batches-py/ with the five data batches, test_batch and
batches.meta): a cut connection resumed with Range, a redirect, a wrong md5, unsafe members."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from dtrain.errors import DataError, DtrainError, SpecError
from dtrain.workloads.cifar10 import main as cifar_main
from dtrain.workloads.cifar10.data import load_split, write_synthetic
from dtrain.workloads.cifar10.download import MD5, fetch_cifar10

REPO = Path(__file__).resolve().parents[1]


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> bytes:
    """A small dataset packed as the official archive is."""
    root = tmp_path_factory.mktemp("src")
    write_synthetic(root, fmt="python", n_train=50, n_test=10, seed=4)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(root / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return buf.getvalue()


class Server:
    """Serves `files` by path; /cut/NAME sends half of NAME (with the full Content-Length) and drops
    the connection; /moved/NAME redirects to /NAME. Records each request's Range header."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.ranges: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.lstrip("/")
                server.ranges.append(self.headers.get("Range"))
                if path.startswith("moved/"):
                    self.send_response(302)
                    self.send_header("Location", "/" + path.removeprefix("moved/"))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                cut = path.startswith("cut/")
                data = server.files.get(path.removeprefix("cut/"))
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if cut and not start else body)
                if cut and not start:
                    self.wfile.flush()
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_a_cut_download_resumes_through_a_redirect_and_unpacks(tmp_path, archive):
    with Server() as srv:
        srv.files["cifar-10-python.tar.gz"] = archive
        out = tmp_path / "data"
        with pytest.raises(DataError, match=r"stopped after \d+ of \d+ bytes; run the same command again to resume"):
            fetch_cifar10(out, url=f"{srv.url}/cut/cifar-10-python.tar.gz", md5=_md5(archive))
        part = out / "cifar-10-python.tar.gz.part"
        assert 0 < part.stat().st_size < len(archive)
        assert not (out / "cifar-10-batches-py").exists()
        # the rerun (here through a redirect to the same file) asks only for the rest
        srv.ranges.clear()
        kept = part.stat().st_size
        folder = fetch_cifar10(out, url=f"{srv.url}/moved/cifar-10-python.tar.gz", md5=_md5(archive))
        assert srv.ranges == [f"bytes={kept}-"] * 2  # the redirect, then the file
    assert folder == out / "cifar-10-batches-py" and not part.exists()
    assert (out / "cifar-10-python.tar.gz").read_bytes() == archive
    x, y = load_split(out, "train")
    assert x.shape == (50, 3, 32, 32) and len(load_split(out, "test")[1]) == 10
    np.testing.assert_array_equal(x, load_split(out / "cifar-10-batches-py", "train")[0])
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # no temporary folder left
    # a second run finds the batches and downloads nothing
    assert fetch_cifar10(out, url="http://127.0.0.1:9/nothing-listens-here", md5=_md5(archive)) == folder


def test_a_wrong_md5_keeps_nothing(tmp_path, archive):
    with Server() as srv:
        srv.files["cifar-10-python.tar.gz"] = archive
        with pytest.raises(DataError, match=f"md5 of .* is {_md5(archive)}, expected {MD5}: the download is damaged"):
            fetch_cifar10(tmp_path, url=f"{srv.url}/cifar-10-python.tar.gz")  # the official md5
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _info(name: str, **kw) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(info, k, v)
    return info


@pytest.mark.parametrize("member, message", [
    (_info("cifar-10-batches-py/../../escaped", size=2), "holds 'cifar-10-batches-py/../../escaped', outside"),
    (_info("/tmp/escaped-absolute", size=2), "holds '/tmp/escaped-absolute', outside"),
    (_info("cifar-10-batches-py/data_batch_2", type=tarfile.SYMTYPE, linkname="/etc/passwd"), "holds a link"),
    (_info("cifar-10-batches-py/data_batch_2", type=tarfile.LNKTYPE, linkname="cifar-10-batches-py/data_batch_1"),
     "holds a link"),
    (_info("cifar-10-batches-py/dev", type=tarfile.CHRTYPE), "holds a special file"),
])
def test_unsafe_members_are_refused_before_anything_is_written(tmp_path, member, message):
    good = _info("cifar-10-batches-py/data_batch_1", size=2)
    data = _tar([(good, b"ok"), (member, b"xx" if member.isfile() else None)])
    out = tmp_path / "deep" / "out"
    with Server() as srv:
        srv.files["evil.tar.gz"] = data
        with pytest.raises(DataError, match=f"archive evil.tar.gz {message}.*refusing to unpack it"):
            fetch_cifar10(out, url=f"{srv.url}/evil.tar.gz", md5=_md5(data))
    assert sorted(p.name for p in out.iterdir()) == ["evil.tar.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep"] and not Path("/tmp/escaped-absolute").exists()


def test_an_archive_without_every_batch_leaves_no_folder(tmp_path, archive):
    with tarfile.open(fileobj=io.BytesIO(archive)) as tf:
        kept = [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf.getmembers()
                if not m.name.endswith("test_batch")]
    data = _tar(kept)
    with Server() as srv:
        srv.files["c.tar.gz"] = data
        with pytest.raises(DataError, match="test_batch is missing"):
            fetch_cifar10(tmp_path, url=f"{srv.url}/c.tar.gz", md5=_md5(data))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tar.gz"]


def test_links_it_did_not_make_are_not_written_through(tmp_path, archive):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "cifar-10-python.tar.gz.part").symlink_to(victim)
    with Server() as srv:
        srv.files["cifar-10-python.tar.gz"] = archive
        with pytest.raises(SpecError, match=r"\.part is a symbolic link: remove it"):
            fetch_cifar10(out, url=f"{srv.url}/cifar-10-python.tar.gz", md5=_md5(archive))
    assert victim.read_bytes() == b"precious"


def test_command_line_errors_are_one_line(tmp_path):
    with pytest.raises(SpecError, match="^--md5 'abc' is not an md5 digest"):
        cifar_main(["download", "--out", str(tmp_path), "--md5", "abc"])
    with Server() as srv:
        r = subprocess.run([sys.executable, "-m", "dtrain.workloads.cifar10", "download", "--out", str(tmp_path),
                            "--url", f"{srv.url}/missing.tar.gz"], cwd=REPO, capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"error: download of {srv.url}/missing.tar.gz failed: HTTP 404 Not Found; "
                                             "check the URL"]


@pytest.mark.parametrize("url, message", [
    ("example.com/x.tar.gz", "^--url example.com/x.tar.gz does not exist: give the CIFAR10 python archive"),
    ("http://[::1/x.tar.gz", "^--url http://\\[::1/x.tar.gz is not a URL \\(Invalid IPv6 URL\\): give http\\(s\\)://"),
    ("ftp://host/x.tar.gz", "^unsupported URL scheme 'ftp' in ftp://host/x.tar.gz: use http\\(s\\)://, file:// or a path$"),
])
def test_a_url_that_names_nothing_fetchable_is_one_line(tmp_path, monkeypatch, url, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DtrainError, match=message):
        fetch_cifar10(tmp_path / "out", url=url)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("as_url", [False, True])
def test_a_local_archive_is_unpacked_in_place_and_kept(tmp_path, archive, as_url):
    path = tmp_path / "cifar-10-python.tar.gz"
    path.write_bytes(archive)
    url = path.as_uri() if as_url else str(path)
    with pytest.raises(DataError, match=f"^md5 of {path} is {_md5(archive)}, expected {MD5}: another file"):
        fetch_cifar10(tmp_path / "out", url=url)
    assert path.read_bytes() == archive  # a wrong md5 never removes the user's file
    folder = fetch_cifar10(tmp_path / "out", url=url, md5=_md5(archive))
    assert len(load_split(folder, "train")[1]) == 50 and path.read_bytes() == archive
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cifar-10-batches-py"]


def test_the_dtrain_verb_downloads_as_the_module_does(tmp_path, archive):
    with Server() as srv:
        srv.files["cifar-10-python.tar.gz"] = archive
        r = subprocess.run([str(Path(sys.executable).parent / "dtrain"), "cifar10", "download", "--out",
                            str(tmp_path / "data"), "--url", f"{srv.url}/cifar-10-python.tar.gz", "--md5",
                            _md5(archive)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(load_split(tmp_path / "data", "test")[1]) == 10
