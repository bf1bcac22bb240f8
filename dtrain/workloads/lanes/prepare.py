"""The TuSimple data job: download, verify, extract, precompute masks and lists.

``dtrain lanes prepare --url URL [--url URL ...] [--sha256 H ...] --out DIR [--size WxH] [--force]``
(--size: each side 16 to 4096 pixels, default 512x288)

1. Fetch each URL (http, https, file:// or a local path) into ``DIR/downloads/``. HTTP
   downloads go to ``NAME.part`` first and resume with a Range request after a dropped
   connection or an interrupted run; a server that ignores Range answers 200 and the
   file is fetched again from the start. Progress goes to stderr (tqdm on a terminal,
   a plain line every 10% otherwise).
2. Check the sha256 given for that URL (``--sha256`` in the same order as ``--url``,
   ``-`` to skip one). A mismatch raises DataError naming both digests; a downloaded
   file is moved aside to ``NAME.bad`` so the next run fetches it again.
3. Unpack .zip, .tar, .tar.gz and .tgz archives into DIR (members whose path would leave
   DIR, links and devices are refused; one top folder shared by every member, such as
   ``train_set/``, is dropped). ``.json`` label files (``test_label.json``) are copied into DIR;
   a URL naming any other kind of file is refused before it is fetched.
   Downloaded archives are deleted once unpacked; local files are left alone.
4. Render every labelled frame's mask at the training size into
   ``DIR/seg_label/<W>x<H>/<folder>/<id>/20.png`` and write SCNN-style lists
   ``DIR/list/{train,val,test}_gt.txt``, one line per frame:
   ``/clips/0313-1/60/20.jpg /seg_label/512x288/0313-1/60/20.png 1 1 1 0 0``
   (the five existence flags of the slots, see masks.py). train = label_data_0313 +
   label_data_0601, val = label_data_0531, test = test_label.json.

``DIR/prepare.json`` records what each step did (the inputs and their digests, the mask
size, the sha256 of every label file), so a rerun with the same arguments does nothing;
``--force`` redoes every step.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from PIL import Image

from dtrain.errors import ConflictError, DataError, SpecError
# step 3 and the progress lines, re-exported: tests and callers name them here
from dtrain.workloads.lanes.archives import (  # noqa: F401
    ARCHIVES, CHUNK, DAMAGED, Progress, _copy_stream, _extract_tar, _extract_zip, _open_new, _safe_members, extract,
    is_archive,
)
from dtrain.workloads.inputs import (Parser, check_found, command, in_range, input_file, local_path, out_folder,
                                     split_url)
from dtrain.workloads.lanes.masks import TRAIN_SIZE, render_mask
from dtrain.workloads.lanes.tusimple import (
    LIST_DIR, SPLIT_FILES, mask_relpath, one_line_per_frame, read_labels, writable,
)

MANIFEST = "prepare.json"
LOCK = ".prepare.lock"  # held by the one prepare writing a folder
MANIFEST_VERSION = 1
RETRIES = 5  # download attempts, each resuming where the last one stopped
RETRY_DELAY = 1.0  # seconds before the first retry, doubling after each
TIMEOUT = 60.0  # seconds without data before a connection counts as dropped
MIN_SIDE, MAX_SIDE = 16, 4096  # --size limits of each side, in pixels


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def url_name(url: str) -> str:
    """File name a URL or path downloads to."""
    name = PurePosixPath(urllib.parse.unquote(split_url(url).path)).name
    if not name or name in (".", ".."):
        raise SpecError(f"cannot tell the file name of {url!r}: give a URL ending in the file name")
    return name


def _request(url: str, start: int) -> tuple[object, int]:
    """Open url asking for bytes from ``start``; returns (response, offset its body starts at)."""
    req = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        resp = urllib.request.urlopen(req, timeout=TIMEOUT)
    except urllib.error.HTTPError as e:
        if e.code == 416 and start:  # asked past the end: the part may already be whole
            total = e.headers.get("Content-Range", "").rpartition("/")[2]
            e.close()
            if total.isdigit() and int(total) == start:
                return None, start
            return _request(url, 0)
        raise DataError(f"downloading {url} failed: HTTP {e.code} {e.reason}") from None
    if start and resp.status == 206:
        first = resp.headers.get("Content-Range", "").removeprefix("bytes ").partition("-")[0]
        if first.isdigit() and int(first) == start:
            return resp, start
        resp.close()
        return _request(url, 0)
    return resp, 0  # 200: the whole file, Range ignored


def _content_total(resp, offset: int) -> int | None:
    total = resp.headers.get("Content-Range", "").rpartition("/")[2]
    if total.isdigit():
        return int(total)
    length = resp.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _fetch_once(url: str, part: Path) -> None:
    """One attempt: append to ``part`` from where it stops; raises ConnectionError if cut short."""
    start = part.stat().st_size if part.exists() else 0
    resp, offset = _request(url, start)
    if resp is None:
        return
    with resp:
        total = _content_total(resp, offset)
        progress = Progress(f"download {part.name.removesuffix('.part')}", total)
        progress.update(offset)
        with _open_new(part, "r+b" if part.exists() else "wb") as f:
            f.seek(offset)
            f.truncate()
            while chunk := resp.read(CHUNK):
                f.write(chunk)
                progress.update(len(chunk))
        progress.close()
    size = part.stat().st_size
    if total is not None and size != total:
        raise ConnectionError(f"connection closed at {size} of {total} bytes")


def download(url: str, dest: Path, *, retries: int | None = None, retry_delay: float | None = None) -> Path:
    """HTTP(S) download to ``dest`` through ``dest.part``, resuming after dropped connections."""
    retries = RETRIES if retries is None else retries
    retry_delay = RETRY_DELAY if retry_delay is None else retry_delay
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(retries):
        try:
            _fetch_once(url, part)
            os.replace(part, dest)
            return dest
        except (OSError, http.client.HTTPException) as e:  # dropped, reset, timed out, cut short
            if attempt == retries - 1:
                raise DataError(
                    f"downloading {url} failed after {attempt + 1} attempts ({e}): rerun to resume from "
                    f"{part.stat().st_size if part.exists() else 0} bytes"
                ) from None
            print(f"download {dest.name}: {e}; retrying", file=sys.stderr)
            time.sleep(retry_delay * 2**attempt)
    raise AssertionError("unreachable")


def fetch(url: str, downloads: Path) -> tuple[Path, bool]:
    """Local file for url: (path, True if it was downloaded and may be deleted or moved)."""
    path = local_path(url)
    if path is None:
        return download(url, downloads / url_name(url)), True
    return input_file(path, "input file", "check --url"), False


def _stamp(path: Path) -> list[int]:
    """Size and modification time of a local input: what tells a rerun that the file changed."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _still_done(entry: dict, url: str) -> bool:
    """Whether an input an earlier run unpacked needs nothing now. A download is not asked again
    (a rerun makes no request); a local file is unpacked again when it holds other bytes (a user
    who rebuilt `synth --archive` at the same path got the old frames before 2026-12-04), or kept
    when it is gone (archives deleted after the first run)."""
    path = local_path(url)
    if path is None or not path.is_file():
        return True
    stamp = _stamp(path)
    if entry.get("stamp") == stamp:
        return True
    if sha256_file(path) != entry.get("sha256"):
        return False
    entry["stamp"] = stamp  # touched, or recorded before stamps were: the same bytes
    return True


def verify(path: Path, expected: str | None, downloaded: bool) -> str:
    """sha256 of path; DataError (the downloaded file moved to NAME.bad) when it differs from expected."""
    actual = sha256_file(path)
    if expected and actual != expected.lower():
        where = ""
        if downloaded:
            bad = path.with_name(path.name + ".bad")
            os.replace(path, bad)
            where = (f"; moved to {bad}: rerun to download it again, or, if the expected digest was the "
                     f"wrong one, mv {bad} {path} and give --url {path} with the right --sha256")
        raise DataError(f"sha256 of {path.name} is {actual}, expected {expected.lower()}{where}")
    return actual


def check_input_name(url: str) -> None:
    """SpecError unless url names an archive extract() unpacks or a .json label file."""
    if not url_name(url).endswith((*ARCHIVES, ".json")):
        raise SpecError(f"--url {url} is neither an archive nor a label file that prepare reads: give {', '.join(ARCHIVES)} "
                        "archives (train_set.zip, test_set.zip) and .json label files (test_label.json)")


def build_masks(out: Path, size: tuple[int, int]) -> dict[str, int]:
    """Render masks at size for every labelled frame and write the lists; returns frames per split."""
    counts: dict[str, int] = {}
    writable(out, out / LIST_DIR).mkdir(exist_ok=True)
    for split, names in SPLIT_FILES.items():
        files = [out / name for name in names if (out / name).is_file()]
        if not files:
            continue
        labels = one_line_per_frame([label for f in files for label in read_labels(f)])  # one mask a frame
        progress = Progress(f"masks {split}", len(labels), unit="frame")
        lines = []
        for label in labels:
            if not (out / label.raw_file).is_file():
                raise DataError(f"{label.raw_file} is labelled but missing from {out}: the archive is incomplete")
            seg, exist = render_mask(label.lanes, label.h_samples, size=size)
            rel = mask_relpath(label.raw_file, size)
            with _open_new(writable(out, out / rel)) as f:
                Image.fromarray(seg).save(f, format="PNG", compress_level=1)
            lines.append(f"/{label.raw_file} /{rel} " + " ".join(str(int(e)) for e in exist))
            progress.update(1)
        progress.close()
        with _open_new(writable(out, out / LIST_DIR / f"{split}_gt.txt"), "w") as f:
            f.write("".join(line + "\n" for line in lines))
        counts[split] = len(labels)
    if not counts:
        wanted = sorted(n for names in SPLIT_FILES.values() for n in names)
        raise DataError(f"no label files in {out} (want {wanted}): check --url")
    if not any(counts.values()):
        found = sorted(n for names in SPLIT_FILES.values() for n in names if (out / n).is_file())
        raise DataError(f"the label files in {out} ({', '.join(found)}) hold no frames: check --url "
                        "(a data set needs labelled frames)")
    return counts


def _label_digests(out: Path) -> dict[str, str]:
    return {n: sha256_file(out / n) for names in SPLIT_FILES.values() for n in names if (out / n).is_file()}


def _load_manifest(out: Path) -> dict:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return manifest if isinstance(manifest, dict) and manifest.get("version") == MANIFEST_VERSION else {}


def _save_manifest(out: Path, manifest: dict) -> None:
    tmp = writable(out, out / (MANIFEST + ".tmp"))
    with _open_new(tmp, "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)  # rename replaces a link at the target, never writes through it


def prepare(urls: Sequence[str], out: str | os.PathLike, *, sha256: Sequence[str | None] = (),
            size: tuple[int, int] = TRAIN_SIZE, force: bool = False) -> dict:
    """Run the data job (see the module docstring); returns the manifest."""
    if not urls:
        raise SpecError("no --url given: pass the dataset archives (train_set, test_set) and test_label.json")
    if sha256 and len(sha256) != len(urls):
        raise SpecError(f"{len(sha256)} --sha256 for {len(urls)} --url: give one per URL, '-' to skip one")
    expected = [None if not h or h == "-" else h for h in sha256] or [None] * len(urls)
    for digest in expected:  # before any download: a typo would only show after gigabytes
        if digest is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise SpecError(f"invalid --sha256 {digest[:80]!r}: give the 64 hexadecimal digits sha256sum prints, "
                            f"or '-' to skip that URL's check")
    for url in urls:
        check_input_name(url)
    for side in size:
        in_range("mask size side", side, MIN_SIDE, MAX_SIDE)
    out = out_folder(out, "--out")
    lock = _lock(out)
    try:
        return _prepare(urls, out, expected, size, force)
    finally:
        os.close(lock)  # the lock goes with the descriptor


def _lock(out: Path) -> int:
    """An exclusive lock on DIR/.prepare.lock, held until its descriptor closes; ConflictError when
    another prepare holds it. Two runs at once on one volume (a retried pipeline step, the data
    job started twice) appended to the same NAME.part and replaced each other's prepare.json.tmp."""
    fd = os.open(writable(out, out / LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConflictError(f"another '{command('lanes', 'prepare')}' is writing {out}: wait for it to end (a rerun "
                            "with the same arguments then does nothing)") from None
    return fd


def _prepare(urls: Sequence[str], out: Path, expected: Sequence[str | None], size: tuple[int, int],
             force: bool) -> dict:
    manifest = {} if force else _load_manifest(out)
    if force:  # a clean redo: no half download from an earlier run is resumed
        for part in (out / "downloads").glob("*.part"):
            part.unlink()
    done = {(i["url"], i.get("expected")): i for i in manifest.get("inputs", [])}
    # each URL to download (one an earlier run fetched is not asked again) answers before anything is unpacked
    check_found([url for url, exp in zip(urls, expected) if (url, exp.lower() if exp else None) not in done],
                timeout=TIMEOUT)
    inputs = []
    for url, exp in zip(urls, expected):
        key = (url, exp.lower() if exp else None)
        if key in done and _still_done(done[key], url):
            inputs.append(done[key])
            continue
        downloads = out / "downloads"
        for name in (url_name(url), url_name(url) + ".part"):
            writable(out, downloads / name)
        path, downloaded = fetch(url, downloads)
        stamp = None if downloaded else _stamp(path)  # before hashing: a change meanwhile redoes it next time
        digest = verify(path, exp, downloaded)
        files = extract(path, out) if is_archive(path) else _copy_file(path, out)
        if downloaded:
            path.unlink()
        inputs.append({"url": url, "expected": key[1], "sha256": digest, "files": files,
                       **({"stamp": stamp} if stamp else {})})
        manifest = {**manifest, "version": MANIFEST_VERSION, "inputs": inputs}
        _save_manifest(out, manifest)  # a crash later does not redo this input
    masks = manifest.get("masks", {})
    labels = _label_digests(out)
    if force or masks.get("size") != list(size) or masks.get("labels") != labels:
        masks = {"size": list(size), "labels": labels, "splits": build_masks(out, size)}
    manifest = {"version": MANIFEST_VERSION, "inputs": inputs, "masks": masks}
    _save_manifest(out, manifest)
    return manifest


def _copy_file(path: Path, out: Path) -> int:
    if path.resolve() != (out / path.name).resolve() or (out / path.name).is_symlink():
        with path.open("rb") as src:
            _copy_stream(src, out / path.name, out)
    return 1


def _size(text: str) -> tuple[int, int]:
    w, _, h = text.lower().partition("x")
    if not (w.isdigit() and h.isdigit()):
        raise SpecError(f"--size {text!r} is not WIDTHxHEIGHT: use e.g. 512x288")
    in_range("--size width", int(w), MIN_SIDE, MAX_SIDE)
    in_range("--size height", int(h), MIN_SIDE, MAX_SIDE)
    return int(w), int(h)


def main(argv: Sequence[str] | None = None) -> int:
    """``dtrain lanes prepare --url URL [--url ...] [--sha256 H ...] --out DIR [--size WxH] [--force]``."""
    parser = Parser(prog="dtrain lanes prepare", description="Download and prepare TuSimple data.")
    # --url and --out are required after --size is checked (parser.require): a bad number is named first
    parser.add_argument("--url", action="extend", nargs="+",
                        help="archive or label file: http(s)://, file:// or a path (required)")
    parser.add_argument("--sha256", action="extend", nargs="+", default=[],
                        help="expected sha256 per --url, in order ('-' to skip one)")
    parser.add_argument("--out", help="dataset folder to fill (required)")
    parser.add_argument("--size", default=f"{TRAIN_SIZE[0]}x{TRAIN_SIZE[1]}",
                        help=f"mask size WIDTHxHEIGHT, each side {MIN_SIDE} to {MAX_SIDE}")
    parser.add_argument("--force", action="store_true", help="redo every step, even those already done")
    args = parser.parse_args(argv)
    size = _size(args.size)
    parser.require(args, "--url", "--out")
    manifest = prepare(args.url, args.out, sha256=args.sha256, size=size, force=args.force)
    print(json.dumps({"out": str(args.out), "splits": manifest["masks"]["splits"], "size": manifest["masks"]["size"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
