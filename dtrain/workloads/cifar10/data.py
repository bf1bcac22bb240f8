"""CIFAR10 on disk: the two official formats, a reader and a synthetic writer.

Python format, folder cifar-10-batches-py/: data_batch_1..5 and test_batch, each a
pickled dict with bytes keys
    b'data'        uint8 array (N, 3072): 1024 red, then 1024 green, then 1024 blue
                   pixels, each plane row-major 32x32
    b'labels'      list of N ints in 0..9
    b'batch_label' bytes, b'filenames' list of bytes
plus batches.meta (b'label_names' ...).

Binary format, folder cifar-10-batches-bin/: data_batch_1..5.bin and test_batch.bin,
each a run of 3073-byte records: one label byte, then the 3072 pixel bytes in the
same plane order; plus batches.meta.txt, one class name per line.

The official python batches are Python 2 pickles: their byte strings (keys included) load
as bytes with `encoding="bytes"` (the dataset page's recipe) and as str with
`encoding="latin1"` (torchvision's). The reader takes either kind of key, b'data' as
(N, 3072) or (N, 3, 32, 32), and labels as a list or an array; the synthetic writer
writes Python 2 pickles too, so every CIFAR10 loader reads them.

The reader accepts the folder that holds either subfolder (a data volume, a
SageMaker channel) or the subfolder itself. It unpickles with an allow-list,
because a pickle from a shared volume can otherwise run any code.
"""

from __future__ import annotations

import os
import pickle
import re
import struct
import zlib
from pathlib import Path

import numpy as np

from dtrain.errors import DataError, SpecError
from dtrain.replace import replacing
from dtrain.workloads.cifar10.failure import CommandParser, reports_failure
from dtrain.workloads.inputs import MAX_SEED, command, in_range, out_folder

PY_DIR = "cifar-10-batches-py"
BIN_DIR = "cifar-10-batches-bin"
IMAGE_BYTES = 3 * 32 * 32
RECORD_BYTES = 1 + IMAGE_BYTES
NUM_CLASSES = 10
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MAX_IMAGES = 1_000_000  # synthetic images of one split (3 GB on disk, ~12 GB of float32 while drawn)
NUM_TRAIN_BATCHES = 5
ARCHIVE = "cifar-10-python.tar.gz"  # the dataset page's python archive, read as it is when not unpacked
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")

# What a CIFAR pickle legitimately references: numpy array reconstruction (_reconstruct up to
# protocol 4, _frombuffer for protocol 5's buffers), numpy scalars (labels saved as np.int64),
# and _codecs.encode, which Python 3 uses for bytes in protocol-2 pickles. torchvision's plain
# pickle.load reads all of these; numpy 1 spells the modules numpy.core, numpy 2 numpy._core.
_PICKLE_ALLOWED = {
    *((f"numpy.{core}.{module}", name) for core in ("core", "_core")
      for module, name in (("multiarray", "_reconstruct"), ("numeric", "_frombuffer"), ("multiarray", "scalar"))),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR10 batch")
        return super().find_class(module, name)


# ---------------------------------------------------------------- reading


def find_root(data_dir: str | os.PathLike, split: str = "train") -> tuple[Path, str]:
    """Locate the batch folder under `data_dir`; returns (folder, 'python' | 'binary'). For the test
    split a folder holding only test_batch is one too (a SageMaker 'test' channel); else the train
    batches' folder, where _batch_files names a missing test_batch. Without a batch folder, the
    python archive itself (`data_dir` or `data_dir`/cifar-10-python.tar.gz) is (archive, 'archive'):
    torchvision unpacks it where it lies, this reader reads its members in memory."""
    base = Path(data_dir)
    if base.is_file() and base.name.endswith(ARCHIVE_SUFFIXES):
        return base, "archive"  # the archive as downloaded (a SageMaker channel of one file)
    flag = "--test-dir" if split == "test" else "--data-dir"
    if base.exists() and not base.is_dir():
        if re.fullmatch(r"(data_batch_\d+|test_batch)(\.bin)?|batches\.meta(\.txt)?", base.name):
            # a batch file itself: its folder is what the reader takes
            raise DataError(f"{flag} {base} is one CIFAR10 batch file, not a folder: give its folder, "
                            f"{flag} {base.parent}")
        raise DataError(f"{flag} {base} is a file, not a folder: give the folder holding {PY_DIR}/ or {BIN_DIR}/, "
                        f"or the python archive as downloaded ({ARCHIVE})")
    if not base.is_dir():
        if split == "test":
            raise DataError(f"--test-dir {base} does not exist: give the folder holding test_batch, or leave "
                            f"--test-dir out to read the test batch from --data-dir")
        raise DataError(f"--data-dir {base} does not exist: give the folder holding the CIFAR10 data "
                        f"({command('cifar10', 'synth')} --out {base} makes synthetic data there)")
    if split == "test":
        for folder, fmt, name in ((base / PY_DIR, "python", "test_batch"), (base, "python", "test_batch"),
                                  (base / BIN_DIR, "binary", "test_batch.bin"), (base, "binary", "test_batch.bin")):
            if (folder / name).is_file():
                return folder, fmt
    for folder in (base / PY_DIR, base):
        if (folder / "data_batch_1").is_file():
            return folder, "python"
    for folder in (base / BIN_DIR, base):
        if (folder / "data_batch_1.bin").is_file():
            return folder, "binary"
    if (base / ARCHIVE).is_file():
        return base / ARCHIVE, "archive"
    first = "test_batch" if split == "test" else "data_batch_1"
    raise DataError(
        f"no CIFAR10 batches in {base}: expected {PY_DIR}/{first} or {BIN_DIR}/{first}.bin "
        f"(create synthetic ones with: {command('cifar10', 'synth')} --out {base})"
    )


def _check(path: Path, data: np.ndarray, labels: np.ndarray) -> None:
    if data.ndim != 2 or data.shape[1] != IMAGE_BYTES or data.dtype != np.uint8:
        raise DataError(f"{path}: b'data' is {data.dtype}{list(data.shape)}, expected uint8 [N, {IMAGE_BYTES}]")
    if labels.shape != (data.shape[0],):
        raise DataError(f"{path}: {labels.shape[0] if labels.ndim else 1} labels for {data.shape[0]} images; "
                        "the file is damaged")
    if not labels.size:
        raise DataError(f"{path} holds no images; re-download or regenerate it")
    if labels.min() < 0 or labels.max() >= NUM_CLASSES:
        bad = labels[(labels < 0) | (labels >= NUM_CLASSES)][0]
        raise DataError(f"{path}: label {bad} is outside 0..{NUM_CLASSES - 1}")


def _labels(path: Path, raw: object) -> np.ndarray:
    """A list (or 1-D array) of whole numbers -> int64; anything else is a damaged file."""
    try:
        labels = np.asarray(raw)
    except (TypeError, ValueError):
        labels = np.asarray([], dtype=object)
    if labels.size == 0 and labels.ndim == 1:
        return labels.astype(np.int64)  # an empty list is float64 to numpy; _check names it
    if labels.dtype.kind not in "iu" or labels.ndim != 1:
        raise DataError(f"{path}: b'labels' is not a list of integers 0..{NUM_CLASSES - 1}; the file is damaged")
    if labels.dtype == np.uint64 and labels.max() > np.iinfo(np.int64).max:
        raise DataError(f"{path}: label {labels.max()} is outside 0..{NUM_CLASSES - 1}")
    return labels.astype(np.int64)


def read_python_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> (uint8 images (N, 3, 32, 32), int64 labels (N,))."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return _read_python(f, path)
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e}); check the file and its permissions") from None


def _read_python(f, path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """read_python_batch of an open binary stream; `path` names it in errors."""
    try:
        batch = _CifarUnpickler(f, encoding="bytes").load()
    except Exception as e:  # a damaged pickle raises many unrelated types (KeyError, OverflowError, ...)
        raise DataError(f"{path} is not a CIFAR10 python batch ({type(e).__name__}: {e}); re-download or regenerate it") from None
    if isinstance(batch, dict):  # str keys: a batch pickled again by Python 3 (torchvision reads those too)
        batch = {k.encode("latin1") if isinstance(k, str) else k: v for k, v in batch.items()}
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        keys = sorted(map(repr, batch))[:6] if isinstance(batch, dict) else type(batch).__name__
        hint = " (b'fine_labels' is CIFAR-100's; this workload trains CIFAR-10)" if isinstance(batch, dict) and \
            b"fine_labels" in batch else ""
        raise DataError(f"{path} has no b'data'/b'labels' (found {keys}); it is not a CIFAR10 batch{hint}")
    data = batch[b"data"]
    if not isinstance(data, np.ndarray):
        raise DataError(f"{path}: b'data' is a {type(data).__name__}, expected a uint8 array [N, {IMAGE_BYTES}]")
    labels = _labels(path, batch[b"labels"])
    if data.ndim == 4 and data.shape[1:] == (3, 32, 32):  # already image-shaped, planes first
        data = data.reshape(len(data), IMAGE_BYTES)
    _check(path, data, labels)
    return data.reshape(-1, 3, 32, 32), labels


def read_binary_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One .bin batch of 3073-byte records -> (uint8 images (N, 3, 32, 32), int64 labels (N,))."""
    path = Path(path)
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e}); check the file and its permissions") from None
    if raw.size == 0 or raw.size % RECORD_BYTES:
        raise DataError(
            f"{path} is {raw.size} bytes, not a whole number of {RECORD_BYTES}-byte CIFAR10 records; the file is truncated"
        )
    records = raw.reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    data = np.ascontiguousarray(records[:, 1:])
    _check(path, data, labels)
    return data.reshape(-1, 3, 32, 32), labels


def _batch_files(folder: Path, fmt: str, split: str) -> list[Path]:
    suffix = ".bin" if fmt == "binary" else ""
    if split == "test":
        files = [folder / f"test_batch{suffix}"]
    else:
        pattern = re.compile(rf"^data_batch_([1-9]\d*){re.escape(suffix)}\Z")
        numbered = sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := pattern.match(p.name)))
        files = [p for _, p in numbered]
        # data_batch_1..K without a gap: a hole means an unpack or a sync stopped half-way
        files += [folder / f"data_batch_{i}{suffix}" for i in range(1, len(numbered) + 1)
                  if i not in {n for n, _ in numbered}]
    missing = [p for p in files if not p.is_file()]
    if missing or not files:
        raise DataError(f"CIFAR10 {split} batch {missing[0] if missing else folder / 'data_batch_1'} is missing; "
                        "copy or unpack the whole dataset again")
    return files


def load_split(data_dir: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray]:
    """All batches of `split` ('train' or 'test'): (uint8 (N, 3, 32, 32), int64 (N,))."""
    if split not in ("train", "test"):
        raise SpecError(f"split {split!r} is not 'train' or 'test'")
    folder, fmt = find_root(data_dir, split)
    if fmt == "archive":
        return _load_archive(folder, split)
    read = read_binary_batch if fmt == "binary" else read_python_batch
    parts = [read(p) for p in _batch_files(folder, fmt, split)]
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def _load_archive(archive: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The batches of `split` read from the python archive's members (cifar-10-batches-py/...)."""
    import tarfile

    name = re.compile(rf"^{PY_DIR}/(test_batch)\Z" if split == "test" else rf"^{PY_DIR}/data_batch_([1-9]\d*)\Z")
    parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    try:
        with tarfile.open(archive, "r:*") as tf:
            for m in tf:
                if (found := name.match(m.name.removeprefix("./"))) and m.isfile():
                    parts[found.group(1)] = _read_python(tf.extractfile(m), f"{archive}:{m.name}")
            while tf.fileobj.read(1 << 20):  # to the stream's end: a cut or corrupt one raises here
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise DataError(f"archive {archive} cannot be read ({e}); download it again or unpack it with: "
                        f"{command('cifar10', 'download')} --out {archive.parent} --url {archive}") from None
    wanted = ["test_batch"] if split == "test" else [str(i) for i in range(1, max(map(int, parts), default=1) + 1)]
    missing = [w for w in wanted if w not in parts]
    if missing:
        batch = "test_batch" if split == "test" else f"data_batch_{missing[0]}"
        raise DataError(f"archive {archive} holds no {PY_DIR}/{batch}: it is not the CIFAR10 python archive, or "
                        "a damaged copy; download it again")
    chosen = [parts[w] for w in wanted]
    return np.concatenate([x for x, _ in chosen]), np.concatenate([y for _, y in chosen])


# ---------------------------------------------------------------- synthetic data


def _class_masks() -> np.ndarray:
    """Ten distinct 32x32 shapes in [0, 1], one per class: (10, 32, 32)."""
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    cy, cx = yy - 15.5, xx - 15.5
    r = np.hypot(cy, cx)
    masks = [
        (yy // 4) % 2,  # horizontal stripes
        (xx // 4) % 2,  # vertical stripes
        ((yy + xx) // 6) % 2,  # diagonal stripes
        ((yy // 8) + (xx // 8)) % 2,  # checkerboard
        r < 10,  # disc
        (r > 8) & (r < 13),  # ring
        (np.abs(cy) < 3) | (np.abs(cx) < 3),  # cross
        (np.abs(cy) < 11) & (np.abs(cx) < 11) & ~((np.abs(cy) < 6) & (np.abs(cx) < 6)),  # square frame
        yy > xx,  # lower triangle
        np.abs(cy) + np.abs(cx) < 12,  # diamond
    ]
    return np.stack([m.astype(np.float32) for m in masks])


def make_synthetic(n: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` images with a class-specific shape and colour, random shift, tint and noise.

    Returns (uint8 (n, 3, 32, 32), int64 (n,)); the same seed gives the same arrays.
    """
    rng = np.random.default_rng(seed)
    masks = _class_masks()
    # Fixed palette (independent of seed) so train and test sets share class colours.
    colours = np.random.default_rng(12345).uniform(90, 255, size=(NUM_CLASSES, 3)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    shapes = masks[labels]  # (n, 32, 32)
    shifts = rng.integers(-3, 4, size=(n, 2))
    for i, (dy, dx) in enumerate(shifts):
        shapes[i] = np.roll(shapes[i], (dy, dx), axis=(0, 1))
    background = rng.uniform(0, 80, size=(n, 3, 1, 1)).astype(np.float32)
    tint = rng.uniform(0.7, 1.0, size=(n, 1, 1, 1)).astype(np.float32)
    images = background + tint * colours[labels][:, :, None, None] * shapes[:, None]
    images += rng.normal(0, 30, size=images.shape).astype(np.float32)
    return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.int64)


_reconstruct = np.empty(0).__reduce__()[0]  # numpy's array rebuilder (its module moved in numpy 2)


class _Py2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2's cPickle wrote the official batches: a bytes object is a Python 2
    str (BINSTRING), numpy arrays name numpy.core.multiarray._reconstruct. Python 3's own pickler
    writes bytes as _codecs.encode(...) calls, which load as bytes under any encoding, so a
    reader using encoding="latin1" (torchvision) would find b'data' where it looks for 'data'."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_bytes(self, obj: bytes) -> None:
        n = len(obj)
        self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes

    def reducer_override(self, obj):
        if isinstance(obj, np.ndarray):  # what numpy under Python 2 reduced an array to
            return _reconstruct, (np.ndarray, (0,), b"b"), (1, obj.shape, obj.dtype, False, obj.tobytes())
        if isinstance(obj, np.dtype):
            return np.dtype, (obj.str[1:].encode(), 0, 1), (3, obj.str[0].encode(), None, None, None, -1, -1, 0)
        return NotImplemented

    def save_global(self, obj, name=None) -> None:
        if obj is _reconstruct:
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
        else:
            super().save_global(obj, name)


def _write_pickle(path: Path, obj: dict) -> None:
    with replacing(path, "wb") as f:  # whole or not at all, and never through a link at `path`
        _Py2Pickler(f, protocol=2).dump(obj)


def _write_python(folder: Path, name: str, label: str, x: np.ndarray, y: np.ndarray) -> None:
    _write_pickle(folder / name, {
        b"batch_label": label.encode(),
        b"labels": [int(v) for v in y],
        b"data": x.reshape(len(x), IMAGE_BYTES),
        b"filenames": [f"synthetic_{name}_{i:05d}.png".encode() for i in range(len(x))],
    })


def _write_binary(folder: Path, name: str, x: np.ndarray, y: np.ndarray) -> None:
    records = np.empty((len(x), RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = y
    records[:, 1:] = x.reshape(len(x), IMAGE_BYTES)
    with replacing(folder / f"{name}.bin", "wb") as f:
        f.write(records.tobytes())


def write_synthetic(
    out_dir: str | os.PathLike, *, fmt: str = "python", n_train: int = 5000, n_test: int = 1000, seed: int = 0
) -> Path:
    """Write a CIFAR10-format dataset with learnable classes; returns the batch folder.

    The train images are split over the usual five data_batch files.
    """
    if fmt not in ("python", "binary"):
        raise SpecError(f"format {fmt!r} is not 'python' or 'binary'")
    in_range("--n-train", n_train, NUM_TRAIN_BATCHES, MAX_IMAGES)
    in_range("--n-test", n_test, 1, MAX_IMAGES)
    in_range("--seed", seed, 0, MAX_SEED)
    folder = out_folder(out_folder(out_dir, "--out") / (PY_DIR if fmt == "python" else BIN_DIR), "--out")
    x_train, y_train = make_synthetic(n_train, seed=seed)
    x_test, y_test = make_synthetic(n_test, seed=seed + 1_000_003)
    splits = np.array_split(np.arange(n_train), NUM_TRAIN_BATCHES)
    for i, idx in enumerate(splits, start=1):
        if fmt == "python":
            _write_python(folder, f"data_batch_{i}", f"training batch {i} of 5", x_train[idx], y_train[idx])
        else:
            _write_binary(folder, f"data_batch_{i}", x_train[idx], y_train[idx])
    if fmt == "python":
        _write_python(folder, "test_batch", "testing batch 1 of 1", x_test, y_test)
        meta = {b"label_names": [c.encode() for c in CLASSES], b"num_cases_per_batch": len(splits[0]), b"num_vis": IMAGE_BYTES}
        _write_pickle(folder / "batches.meta", meta)
    else:
        _write_binary(folder, "test_batch", x_test, y_test)
        with replacing(folder / "batches.meta.txt", "w") as f:
            f.write("\n".join(CLASSES) + "\n")
    return folder


@reports_failure
def synth_main(argv: list[str] | None = None) -> int:
    """`python -m dtrain.workloads.cifar10 synth --out DIR [--format binary] ...`."""
    p = CommandParser(prog="dtrain cifar10 synth", description=write_synthetic.__doc__)
    p.add_argument("--out", required=True, help="folder that receives cifar-10-batches-py/ or cifar-10-batches-bin/")
    p.add_argument("--format", dest="fmt", choices=("python", "binary"), default="python",
                   help="the python pickles or the binary .bin files (default python)")
    p.add_argument("--n-train", type=int, default=5000, help=f"training images, 5 to {MAX_IMAGES} (default 5000)")
    p.add_argument("--n-test", type=int, default=1000, help=f"test images, 1 to {MAX_IMAGES} (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    a = p.parse_args(argv)
    folder = write_synthetic(a.out, fmt=a.fmt, n_train=a.n_train, n_test=a.n_test, seed=a.seed)
    print(f"wrote {a.n_train} train and {a.n_test} test images to {folder}")
    return 0
