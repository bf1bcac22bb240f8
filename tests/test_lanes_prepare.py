"""The data job against a real local HTTP server: resume, checksums, safe unpacking, reruns."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dtrain.errors import DataError, NotFoundError, SpecError
from dtrain.workloads.lanes import prepare, synth
from dtrain.workloads.lanes.masks import render_label
from dtrain.workloads.lanes.tusimple import mask_relpath, read_labels


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves server.files; honours 'Range: bytes=N-' unless server.ignore_range; can cut a body short."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's naming)
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        if rng and not srv.ignore_range:
            start = int(rng.removeprefix("bytes=").rstrip("-"))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if srv.drops > 0:  # send part of the body, then hang up
            srv.drops -= 1
            self.wfile.write(body[start : start + (len(body) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body[start:])

    def do_HEAD(self):  # noqa: N802 - as GET answers, without a body (not in srv.requests, the GETs); 501 without srv.head
        body = self.server.files.get(self.path)
        if body is None or not self.server.head:
            self.send_error(404 if self.server.head else 501)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.files, srv.requests, srv.drops, srv.ignore_range, srv.head = {}, [], 0, False, True
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(prepare, "RETRY_DELAY", 0.0)


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, bytes]:
    src = tmp_path_factory.mktemp("synth")
    counts = {"label_data_0313.json": 3, "label_data_0531.json": 2, "label_data_0601.json": 1}
    synth.generate(src, frames_per_file=counts, seed=5, test_frames=2)
    train = synth.make_archive(src, src / "train_set.tar.gz")
    test = synth.make_archive(src, src / "test_set.zip")
    return {
        "/train_set.tar.gz": train.read_bytes(),
        "/test_set.zip": test.read_bytes(),
        "/test_label.json": (src / "test_label.json").read_bytes(),
    }


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def serve_all(server, archives) -> tuple[list[str], list[str]]:
    server.files.update(archives)
    names = list(archives)
    return [server.url + n for n in names], [sha(archives[n]) for n in names]


def test_download_unpack_masks_and_lists(server, archives, tmp_path):
    urls, digests = serve_all(server, archives)
    manifest = prepare.prepare(urls, tmp_path, sha256=digests)
    assert manifest["masks"]["splits"] == {"train": 4, "val": 2, "test": 2}
    assert [i["sha256"] for i in manifest["inputs"]] == digests
    assert not list((tmp_path / "downloads").iterdir())  # archives deleted once unpacked
    assert (tmp_path / "test_tasks_0627.json").is_file() and (tmp_path / "test_label.json").is_file()
    lines = (tmp_path / "list" / "val_gt.txt").read_text().splitlines()
    labels = read_labels(tmp_path / "label_data_0531.json")
    assert len(lines) == len(labels) == 2
    for text, label in zip(lines, labels):
        img, seg_path, *flags = text.split()
        assert img == "/" + label.raw_file and seg_path == "/" + mask_relpath(label.raw_file, (512, 288))
        seg, exist = render_label(label)
        assert flags == [str(int(e)) for e in exist]
        assert np.array_equal(np.array(Image.open(tmp_path / seg_path.lstrip("/"))), seg)
        assert (tmp_path / img.lstrip("/")).is_file()
    assert json.loads((tmp_path / "prepare.json").read_text()) == manifest


def test_resume_after_the_connection_drops(server, archives, tmp_path):
    body = archives["/train_set.tar.gz"]
    server.files["/train_set.tar.gz"] = body
    server.drops = 1
    path = prepare.download(server.url + "/train_set.tar.gz", tmp_path / "train_set.tar.gz")
    assert path.read_bytes() == body
    assert server.requests == [("/train_set.tar.gz", None), ("/train_set.tar.gz", f"bytes={len(body) // 2}-")]
    assert not (tmp_path / "train_set.tar.gz.part").exists()


def test_resume_a_part_file_left_by_an_earlier_run(server, archives, tmp_path):
    body = archives["/test_set.zip"]
    server.files["/test_set.zip"] = body
    (tmp_path / "test_set.zip.part").write_bytes(body[:1000])
    assert prepare.download(server.url + "/test_set.zip", tmp_path / "test_set.zip").read_bytes() == body
    assert server.requests == [("/test_set.zip", "bytes=1000-")]


def test_complete_part_file_is_accepted_on_416(server, archives, tmp_path):
    body = archives["/test_label.json"]
    server.files["/test_label.json"] = body
    (tmp_path / "test_label.json.part").write_bytes(body)
    assert prepare.download(server.url + "/test_label.json", tmp_path / "test_label.json").read_bytes() == body


def test_server_that_ignores_range_restarts_from_scratch(server, archives, tmp_path):
    body = archives["/test_set.zip"]
    server.files["/test_set.zip"] = body
    server.ignore_range = True
    (tmp_path / "test_set.zip.part").write_bytes(b"x" * 5000)  # stale bytes must not survive
    assert prepare.download(server.url + "/test_set.zip", tmp_path / "test_set.zip").read_bytes() == body
    assert server.requests == [("/test_set.zip", "bytes=5000-")]


def test_persistent_drops_give_up_with_a_resumable_part(server, archives, tmp_path):
    server.files["/test_set.zip"] = archives["/test_set.zip"]
    server.drops = 10
    with pytest.raises(DataError, match="failed after 3 attempts.*rerun to resume"):
        prepare.download(server.url + "/test_set.zip", tmp_path / "test_set.zip", retries=3)
    assert 0 < (tmp_path / "test_set.zip.part").stat().st_size < len(archives["/test_set.zip"])


def test_checksum_mismatch_quarantines_the_file(server, archives, tmp_path):
    server.files["/test_label.json"] = archives["/test_label.json"]
    wrong = "0" * 64
    actual = sha(archives["/test_label.json"])
    with pytest.raises(DataError, match=f"sha256 of test_label.json is {actual}, expected {wrong}"):
        prepare.prepare([server.url + "/test_label.json"], tmp_path, sha256=[wrong])
    assert (tmp_path / "downloads" / "test_label.json.bad").is_file()
    assert not (tmp_path / "downloads" / "test_label.json").exists()
    assert not (tmp_path / "test_label.json").exists()  # nothing unpacked from a bad file
    # the digest was the typo: the file is kept, and what the message says to do uses it, unfetched
    bad, kept = tmp_path / "downloads" / "test_label.json.bad", tmp_path / "downloads" / "test_label.json"
    server.files.pop("/test_label.json")
    os.replace(bad, kept)
    images = tmp_path.parent / f"{tmp_path.name}-test_set.zip"  # its frames, for the masks step
    images.write_bytes(archives["/test_set.zip"])
    prepare.prepare([str(images), str(kept)], tmp_path, sha256=["-", actual])
    assert (tmp_path / "test_label.json").read_bytes() == archives["/test_label.json"]


@pytest.mark.parametrize("digest", ["abc", "0" * 63, "g" * 64, "0" * 65])
def test_a_malformed_digest_is_refused_before_anything_is_fetched(tmp_path, digest):
    with pytest.raises(SpecError, match=r"invalid --sha256 .*: give the 64 hexadecimal digits sha256sum prints"):
        prepare.prepare(["http://127.0.0.1:1/test_set.zip"], tmp_path / "out", sha256=[digest])
    assert not (tmp_path / "out").exists()


def test_http_error_is_a_data_error(server, tmp_path):
    with pytest.raises(DataError, match="HTTP 404"):
        prepare.download(server.url + "/missing.zip", tmp_path / "missing.zip")


def test_a_url_not_there_is_refused_before_anything_is_downloaded_or_unpacked(server, archives, tmp_path):
    """A typo in the last --url was found only after the archives before it were downloaded and unpacked."""
    urls, _ = serve_all(server, archives)
    urls[-1] = server.url + "/test_lable.json"
    with pytest.raises(NotFoundError) as refused:
        prepare.prepare(urls, tmp_path / "out")
    assert str(refused.value) == (f"{urls[-1]} is not there (HTTP 404 Not Found): check that --url and run again; "
                                  f"nothing was downloaded or unpacked")
    assert server.requests == [] and [p.name for p in (tmp_path / "out").iterdir()] == [prepare.LOCK]


def _closed_port() -> int:
    """A port nothing listens on: bound, then let go."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_is_refused_before_anything_is_downloaded_or_unpacked(server, archives, tmp_path):
    """A --url on a port nothing listens on went to the download's five retries, after the archives
    before it were downloaded and unpacked."""
    urls, _ = serve_all(server, archives)
    urls[-1] = f"http://127.0.0.1:{_closed_port()}/test_label.json"
    with pytest.raises(DataError) as refused:
        prepare.prepare(urls, tmp_path / "out")
    assert str(refused.value) == (f"{urls[-1]}: its server refused the connection (nothing listens on that port): "
                                  f"check the URL and this machine's network, or download the file yourself and give "
                                  f"its path (--url /path/to/the/file); nothing was downloaded or unpacked")
    assert server.requests == [] and [p.name for p in (tmp_path / "out").iterdir()] == [prepare.LOCK]


def test_a_host_no_dns_server_knows_is_refused_before_anything_is_downloaded(server, archives, tmp_path,
                                                                             monkeypatch):
    """The same for a host name that does not resolve (the resolver faked at its seam: this machine may
    have no DNS server to ask; '.invalid' is a name none may resolve, RFC 2606)."""
    import socket

    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "lanes.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    urls, _ = serve_all(server, archives)
    urls[-1] = "http://lanes.invalid/test_label.json"
    with pytest.raises(DataError) as refused:
        prepare.prepare(urls, tmp_path / "out")
    assert str(refused.value) == (f"{urls[-1]}: its host name cannot be resolved (Name or service not known): check "
                                  f"the URL and this machine's network, or download the file yourself and give its "
                                  f"path (--url /path/to/the/file); nothing was downloaded or unpacked")
    assert server.requests == [] and [p.name for p in (tmp_path / "out").iterdir()] == [prepare.LOCK]


def test_a_server_that_refuses_head_is_still_downloaded_from(server, archives, tmp_path):
    urls, digests = serve_all(server, archives)
    server.head = False  # 501, as a server without HEAD answers: the download says what is wrong, if anything
    assert prepare.prepare(urls, tmp_path, sha256=digests)["masks"]["splits"] == {"train": 4, "val": 2, "test": 2}


def test_rerun_does_no_work_and_force_redoes_it(server, archives, tmp_path):
    urls, digests = serve_all(server, archives)
    prepare.prepare(urls, tmp_path, sha256=digests)
    mask = next((tmp_path / "seg_label" / "512x288").rglob("*.png"))
    mtime = mask.stat().st_mtime_ns
    n_requests = len(server.requests)
    prepare.prepare(urls, tmp_path, sha256=digests)
    assert len(server.requests) == n_requests  # nothing downloaded
    assert mask.stat().st_mtime_ns == mtime  # nothing re-rendered
    manifest = prepare.prepare(urls, tmp_path, sha256=digests, size=(256, 144))  # new size: masks only
    assert len(server.requests) == n_requests
    assert manifest["masks"]["size"] == [256, 144] and (tmp_path / "seg_label" / "256x144").is_dir()
    prepare.prepare(urls, tmp_path, sha256=digests, force=True)
    assert len(server.requests) == 2 * n_requests
    assert mask.stat().st_mtime_ns != mtime


def test_local_paths_and_file_urls(archives, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name, data in archives.items():
        (src / name.lstrip("/")).write_bytes(data)
    urls = [str(src / "train_set.tar.gz"), (src / "test_set.zip").as_uri(), str(src / "test_label.json")]
    manifest = prepare.prepare(urls, tmp_path / "out")
    assert manifest["masks"]["splits"] == {"train": 4, "val": 2, "test": 2}
    assert (src / "train_set.tar.gz").is_file()  # a local input is never deleted
    with pytest.raises(DataError, match="sha256 of test_label.json"):
        prepare.prepare([str(src / "test_label.json")], tmp_path / "other", sha256=["1" * 64])
    assert (src / "test_label.json").is_file()  # nor moved aside
    with pytest.raises(NotFoundError, match="does not exist"):
        prepare.prepare([str(src / "nope.zip")], tmp_path / "other")
    with pytest.raises(SpecError, match="unsupported URL scheme 'ftp'"):
        prepare.prepare(["ftp://host/x.zip"], tmp_path / "other")
    with pytest.raises(SpecError, match="2 --sha256 for 1 --url"):
        prepare.prepare([urls[0]], tmp_path / "other", sha256=["-", "-"])


def write_tar(path: Path, members: list[tuple[str, bytes | None, str | None]]) -> Path:
    """members: (name, data, symlink target)."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data, link in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    "members",
    [
        [("label_data_0313.json", b"", None), ("../evil.txt", b"x", None)],
        [("/tmp/evil.txt", b"x", None)],
        [("clips/link", None, "/etc/passwd")],
    ],
)
def test_unsafe_tar_members_are_refused(tmp_path, members):
    archive = write_tar(tmp_path / "bad.tar.gz", members)
    out = tmp_path / "out"
    with pytest.raises(DataError, match="refusing to unpack"):
        prepare.extract(archive, out)
    assert not (tmp_path / "evil.txt").exists()


def test_unsafe_zip_member_is_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("clips/../../evil.txt", b"x")
    with pytest.raises(DataError, match="unsafe path"):
        prepare.extract(tmp_path / "bad.zip", tmp_path / "out")


def test_one_top_folder_is_dropped(tmp_path):
    with zipfile.ZipFile(tmp_path / "train_set.zip", "w") as zf:
        zf.writestr("train_set/", b"")
        zf.writestr("train_set/clips/a/1/20.jpg", b"jpg")
        zf.writestr("train_set/label_data_0313.json", b"")
    assert prepare.extract(tmp_path / "train_set.zip", tmp_path / "out") == 2
    assert (tmp_path / "out" / "clips" / "a" / "1" / "20.jpg").read_bytes() == b"jpg"
    assert (tmp_path / "out" / "label_data_0313.json").is_file()


def test_damaged_archive_and_missing_frame_are_data_errors(archives, tmp_path):
    (tmp_path / "train_set.tar.gz").write_bytes(archives["/train_set.tar.gz"][:5000])
    with pytest.raises(DataError, match="damaged"):
        prepare.extract(tmp_path / "train_set.tar.gz", tmp_path / "out")
    (tmp_path / "test_label.json").write_bytes(archives["/test_label.json"])  # labels without clips
    with pytest.raises(DataError, match="labelled but missing"):
        prepare.prepare([str(tmp_path / "test_label.json")], tmp_path / "out2")


def test_cli(archives, tmp_path, capsys):
    (tmp_path / "train_set.tar.gz").write_bytes(archives["/train_set.tar.gz"])
    digest = sha(archives["/train_set.tar.gz"])
    archive = str(tmp_path / "train_set.tar.gz")
    argv = ["--url", archive, "--sha256", digest, "--out", str(tmp_path / "d"), "--size", "128x72"]
    assert prepare.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["splits"] == {"train": 4, "val": 2} and out["size"] == [128, 72]
    with pytest.raises(SpecError, match="not WIDTHxHEIGHT"):
        prepare.main(["--url", "x", "--out", str(tmp_path), "--size", "big"])


@pytest.mark.parametrize("size, message", [("30000x30000", "--size width 30000 is out of range: give 16 to 4096, e.g. 4096"),
                                           ("512x0", "--size height 0 is out of range: give 16 to 4096, e.g. 16"),
                                           ("8x8", "--size width 8 is out of range: give 16 to 4096, e.g. 16")])
def test_mask_size_is_bounded(tmp_path, size, message):
    with pytest.raises(SpecError, match=f"^{message}$"):
        prepare.main(["--url", "x.json", "--out", str(tmp_path / "o"), "--size", size])
    assert not (tmp_path / "o").exists()
    with pytest.raises(SpecError, match="mask size side 5000 is out of range"):
        prepare.prepare(["x.json"], tmp_path / "o", size=(5000, 288))


@pytest.mark.parametrize("name", ["bad.tar.gz", "bad.zip", "bad.tar"])
def test_garbage_named_like_an_archive_is_one_line(tmp_path, name):
    (tmp_path / name).write_bytes(b"garbage")
    with pytest.raises(DataError, match=f"^archive {name} is damaged or not a zip or tar archive: download it again$"):
        prepare.prepare([str(tmp_path / name)], tmp_path / "out")


def test_an_archive_damaged_in_the_middle_is_no_shorter_archive(archives, tmp_path):
    """tarfile stops quietly at a bad header after the first: the rest of the archive must not go missing."""
    data = bytearray(archives["/train_set.tar.gz"])
    data[len(data) // 2 : len(data) // 2 + 400] = bytes(b ^ 0x55 for b in data[len(data) // 2 : len(data) // 2 + 400])
    (tmp_path / "train_set.tar.gz").write_bytes(data)
    with pytest.raises(DataError, match="^archive train_set.tar.gz is damaged .*: download it again$"):
        prepare.extract(tmp_path / "train_set.tar.gz", tmp_path / "out")
    raw = tmp_path / "train_set.tar"  # no gzip CRC to catch it: a bad header after good members
    with tarfile.open(fileobj=io.BytesIO(archives["/train_set.tar.gz"])) as tf, tarfile.open(raw, "w") as out:
        for m in tf.getmembers():
            out.addfile(m, tf.extractfile(m) if m.isfile() else None)
    with tarfile.open(raw) as tf:
        second = tf.getmembers()[1].offset  # where the second member's header starts
    plain = bytearray(raw.read_bytes())
    plain[second : second + 100] = b"\xff" * 100
    raw.write_bytes(plain)
    with pytest.raises(DataError, match="^archive train_set.tar is damaged \\(a bad header after 1 members\\)"):
        prepare.extract(raw, tmp_path / "out2")


def test_a_file_that_is_no_archive_or_label_file_is_refused_before_it_is_fetched(server, tmp_path):
    (tmp_path / "bad.rar").write_bytes(b"garbage")
    with pytest.raises(SpecError, match=f"^--url {tmp_path / 'bad.rar'} is neither an archive nor a label file that prepare reads: "
                                        "give .zip, .tar, .tar.gz, .tgz archives"):
        prepare.prepare([str(tmp_path / "bad.rar")], tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(SpecError, match="is neither an archive nor a label file"):
        prepare.prepare([server.url + "/train_set.rar"], tmp_path / "out")
    assert server.requests == []


def test_a_folder_or_device_url_and_a_file_out_say_what_they_are(archives, tmp_path):
    (tmp_path / "x.json").mkdir()
    with pytest.raises(SpecError, match=f"^input file {tmp_path / 'x.json'} is a folder, not a file: check --url$"):
        prepare.prepare([str(tmp_path / "x.json")], tmp_path / "out")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SpecError, match=f"^--out {tmp_path / 'afile'} is a file, not a folder"):
        prepare.prepare([str(tmp_path / "x.json")], tmp_path / "afile")


def test_symlinks_under_out_are_replaced_never_written_through(server, archives, tmp_path):
    """C: links planted under --out (a folder, the manifest's temp file, a mask folder, a download)
    point outside; prepare replaces them and leaves their targets untouched."""
    urls, digests = serve_all(server, archives)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "clips").symlink_to(outside, target_is_directory=True)
    (out / "prepare.json.tmp").symlink_to(outside / "keep.txt")
    (out / "seg_label").symlink_to(outside, target_is_directory=True)
    (out / "downloads").mkdir()
    (out / "downloads" / "test_label.json.part").symlink_to(outside / "keep.txt")
    (out / "test_label.json").symlink_to(outside / "keep.txt")
    manifest = prepare.prepare(urls, out, sha256=digests)
    assert manifest["masks"]["splits"] == {"train": 4, "val": 2, "test": 2}
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"] and (outside / "keep.txt").read_text() == "mine"
    for name in ("clips", "seg_label", "test_label.json"):
        assert not (out / name).is_symlink()
    assert not [p for p in out.rglob("*") if p.is_symlink()]
