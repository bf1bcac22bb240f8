"""Storage classes (performance tiers): 'local' is <home>/volumes, each other one a root folder
named in config.yaml (`storage_classes:`). A root is claimed on first use (empty, or already
marked), never made again where that would put a volume on the wrong disk (a disk not mounted),
and never overlaps the home or another class's root. A mixin of Storage (volumes.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain import db
from dtrain.errors import NotFoundError, SpecError, StorageError
from dtrain.names import check_storage_class, listed
from dtrain.storage.folders import disk_usage
from dtrain.storage.info import Snapshot, StorageClass, human_bytes

if TYPE_CHECKING:
    import sqlite3

DEFAULT_CLASS = "local"  # the class whose root is <home>/volumes
ROOT_MARK = ".dtrain-volumes"  # in a class root: dtrain may tidy this folder


class ClassRoots:
    """Mixed into Storage, which provides the home, the configured classes and the state database."""

    if TYPE_CHECKING:
        home: Path
        volumes_dir: Path
        classes: dict[str, Path]
        conn: sqlite3.Connection

    def storage_classes(self) -> list[StorageClass]:
        """Every class: 'local', each of config.yaml, and each that volumes still record but config.yaml
        no longer names. Read only: a class is checked as its first use would check it (class_root
        with claim=False), so a disk not mounted or a folder holding other files shows here first."""
        counts: dict[str, int] = {}
        roots: dict[str, Path] = {}
        recorded: dict[str, dict[Path, int]] = {}  # each class's volumes by the root each records
        for row in self.conn.execute("SELECT storage_class, root, COUNT(*) FROM volumes GROUP BY storage_class, root"):
            folder = Path(row[1]) if row[1] else self.volumes_dir
            counts[row[0]] = counts.get(row[0], 0) + row[2]
            roots.setdefault(row[0], folder)
            at = recorded.setdefault(row[0], {})
            at[folder] = at.get(folder, 0) + row[2]
        out = []
        for name in dict.fromkeys([DEFAULT_CLASS, *self.classes, *sorted(counts)]):
            if name != DEFAULT_CLASS and name not in self.classes:
                root, status = roots[name], "NotConfigured"
                message = self._not_configured(name, root, list(_folders(root, recorded.get(name, {}))))
            else:
                root, status, message = self.classes.get(name, self.volumes_dir), "Ready", ""
                try:
                    self.class_root(name, claim=False)
                except StorageError as err:  # used before, its mark gone: a disk not mounted
                    status, message = "NotMounted", str(err).removeprefix(f"storage class {name!r}: ")
                except (SpecError, NotFoundError) as err:
                    status, message = "Unusable", str(err).removeprefix(f"storage class {name!r}: ")
                else:
                    if name != DEFAULT_CLASS and not (root / ROOT_MARK).exists():
                        message = f"not used yet: the first volume in it makes and marks {root}"
            out.append(StorageClass(name=name, root=root, status=status, message=message, volumes=counts.get(name, 0),
                                    folders=_folders(root, recorded.get(name, {})), **_space(root)))
        return out

    def volumes_in(self, folder: str | Path) -> dict[str, int]:
        """How many volumes of each class live in `folder` (resolved), by the root each records: a class
        re-pointed elsewhere since keeps its volumes where they were made."""
        real, counts = os.path.realpath(folder), {}
        for row in self.conn.execute("SELECT storage_class, root FROM volumes"):
            if os.path.realpath(row[1] or self.volumes_dir) == real:
                counts[row[0]] = counts.get(row[0], 0) + 1
        return dict(sorted(counts.items()))

    def volumes_around(self, folder: str | Path) -> dict[tuple[str, str], int]:
        """How many volumes of each class and root lie in a folder that nests in or around `folder` (resolved),
        not in it: while they do, a class of that folder takes no volume (_check_apart)."""
        here, counts = Path(os.path.realpath(folder)), {}
        for row in self.conn.execute("SELECT storage_class, root FROM volumes WHERE root IS NOT NULL"):
            there = Path(os.path.realpath(row[1]))
            if there != here and (there.is_relative_to(here) or here.is_relative_to(there)):
                counts[(row[0], row[1])] = counts.get((row[0], row[1]), 0) + 1
        return dict(sorted(counts.items()))

    def _not_configured(self, name: str, root: Path, where: list[str] | None = None) -> str:
        """What `volume classes` says of a class its volumes record but config.yaml no longer names, and
        the command that names it again: after removing the configured classes whose folders overlap its
        own (config.yaml refuses two classes that share or nest a folder), or moving its volumes into one.
        `where`: every folder its volumes lie in (a class re-pointed before its removal), `root` first."""
        here = Path(os.path.realpath(root))
        where = where or [str(root)]
        sharing = [n for n, r in self.classes.items()
                   if (there := Path(os.path.realpath(r))).is_relative_to(here) or here.is_relative_to(there)]
        again = f"dtrain config storage-class {name} {root}"
        shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        said = f"volumes live in {shown}, but {self.home / 'config.yaml'} names no class {name!r}: "
        if not sharing:
            return said + f"name its folder under 'storage_classes:' again with '{again}' to use or move them"
        one = len(sharing) == 1
        named = ", ".join(f"'{n}'" for n in sharing)
        whose = ("the folder of class " if one else "the folders of classes ") + named
        first = (f"so to name it again remove {'that class' if one else 'them'} first with 'dtrain config "
                 f"storage-class --unset {' '.join(sharing)}', then '{again}'")
        same = next((n for n in sharing if Path(os.path.realpath(self.classes[n])) == here), None)
        if same is not None:  # update_volume relabels: the class's folder is the one the volume is in
            return said + (f"its folder is {whose}, {first}, or give its volumes class '{same}' where they are "
                           f"with 'dtrain volume update VOLUME --class {same}' (nothing moves, only the class changes)")
        # a folder nested in or around theirs: class_root refuses those classes (_check_apart) while the volumes
        # lie there, so the move into one it named was refused; one out to 'local' is a real move, said as one
        inside = any(here.is_relative_to(os.path.realpath(self.classes[n])) for n in sharing)
        return said + (f"its folder overlaps {whose}, {first}; {named} {'takes' if one else 'take'} no volume "
                       f"while these lie there, so to keep {'it' if one else 'them'} instead move them out with "
                       f"'dtrain volume update VOLUME --class local' (it moves each to {self.volumes_dir}: "
                       f"{self._move_out(name)})" + (f", then remove the emptied {root}" if inside else ""))

    def _move_out(self, name: str) -> str:
        """What moving class `name`'s volumes to 'local' does to their data: a rename on the disk of the
        home's volumes folder, a copy (verified by hashing) from any other, with the bytes it copies."""
        home_dev = os.stat(self.volumes_dir if self.volumes_dir.exists() else self.home).st_dev
        copied = renamed = size = 0
        for row in self.conn.execute("SELECT name, root FROM volumes WHERE storage_class = ?", (name,)):
            folder = Path(row[1] or self.volumes_dir) / row[0]
            try:
                there = os.stat(folder).st_dev
            except OSError:  # a folder not there (Lost): nothing to copy
                continue
            if there == home_dev:
                renamed += 1
            else:
                copied, size = copied + 1, size + disk_usage(folder / "data")  # `volume list`'s USED
        if not copied:
            return "a rename on the same disk: nothing is copied"
        return (f"a copy of {human_bytes(size)} to another disk, verified by hashing both"
                + (f"; {renamed} of them a rename" if renamed else ""))

    def class_root(self, storage_class: str, *, claim: bool = True) -> Path:
        """The root folder of a class, claimed for dtrain on first use (empty, or already marked);
        `claim` False checks the same and changes nothing (a dry run). A folder that is gone is not
        made again where that would put a volume on the wrong disk (see _lost_root), whichever verb
        puts it there (create, restore --to, a job's new volume, a move); a class's first folder
        still is."""
        check_storage_class(storage_class)
        if storage_class == DEFAULT_CLASS:
            return self.volumes_dir
        if storage_class not in self.classes:
            known = ", ".join(sorted({DEFAULT_CLASS, *self.classes}))
            # NotFound, not a malformed request: which classes exist is configuration (kubectl says
            # 'storageclass "x" not found'), so a well-formed name can only be missing.
            raise NotFoundError(f"unknown storage class {storage_class!r}: use one of {known}, or name its root "
                            f"folder under 'storage_classes:' in {self.home / 'config.yaml'}")
        root = self.classes[storage_class]
        self._check_apart(storage_class, root)
        fix = f"name a folder you can write under 'storage_classes:' in {self.home / 'config.yaml'}"
        there = root  # the folder, or the nearest of its parents that exists: a file there is no place for it
        while not os.path.exists(there) and there != there.parent:
            there = there.parent
        if not there.is_dir():
            what = "is a file" if there == root else f"lies under {there}, a file"
            raise SpecError(f"storage class {storage_class!r}: its folder {root} {what}, not a folder: {fix}")
        if not root.is_dir() and self._lost_root(root, there):
            raise StorageError(f"storage class {storage_class!r}: its folder {root} does not exist (removed, or its "
                               f"disk is not mounted): mount the disk or make the folder (mkdir -p {root}), or point "
                               f"the class at another folder with 'dtrain config storage-class {storage_class} FOLDER', "
                               f"and retry")
        if claim:
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise SpecError(f"storage class {storage_class!r}: cannot make its folder {root} "
                                f"({err.strerror}): {fix}") from None
        real = os.path.realpath(root)
        if not (root / ROOT_MARK).exists():
            self._check_not_unmounted(storage_class, root, real)
            if root.is_dir() and any(os.scandir(root)):
                raise SpecError(f"storage class {storage_class!r}: {root} holds files dtrain did not put there; "
                                f"give the class an empty folder of its own")
            if claim:
                try:
                    (root / ROOT_MARK).touch()
                except OSError as err:  # a read-only disk or folder: one line, not a traceback
                    raise SpecError(f"storage class {storage_class!r}: cannot write in its folder {root} "
                                    f"({err.strerror}): {fix}") from None
        if claim and self.conn.execute("SELECT 1 FROM class_roots WHERE root = ?", (real,)).fetchone() is None:
            with db.transaction(self.conn):
                self.conn.execute("INSERT OR IGNORE INTO class_roots VALUES (?)", (real,))
        return root

    def _lost_root(self, root: Path, there: Path) -> bool:
        """Whether a missing class folder is one that was removed (dtrain used it: volumes live there
        or it was claimed) or lies below the empty mount point of a disk not mounted (`there`, the
        nearest folder that exists, empty and no mount point): a move made it, and put the volume
        on the disk beneath, hidden once the disk was mounted (or in a folder made by mistake)."""
        real = os.path.realpath(root)
        if self.conn.execute("SELECT 1 FROM class_roots WHERE root = ?", (real,)).fetchone() is not None:
            return True
        if any(os.path.realpath(r[0]) == real
               for r in self.conn.execute("SELECT DISTINCT root FROM volumes WHERE root IS NOT NULL")):
            return True
        # ismount() of a symbolic link is False: a disk mounted at /mnt/nvme and named as /data/fast -> /mnt/nvme
        return there.is_dir() and not os.path.ismount(os.path.realpath(there)) and not any(os.scandir(there))

    def _check_not_unmounted(self, storage_class: str, root: Path, real: str) -> None:
        """A class folder dtrain used before that has lost its mark is most likely the empty mount
        point of a disk not mounted now: claiming it put volumes on the disk beneath, hidden (and
        Lost) once the class's disk was mounted over them again."""
        there = sorted(r["name"] for r in self.conn.execute("SELECT name, root FROM volumes WHERE root IS NOT NULL")
                       if os.path.realpath(r["root"]) == real)
        used = self.conn.execute("SELECT 1 FROM class_roots WHERE root = ?", (real,)).fetchone() is not None
        if there or used:
            live = "lives" if len(there) == 1 else "live"
            held = f" and {listed(there[:5], 'volume')} {live} there (listed Lost)" if there else ""
            raise StorageError(f"storage class {storage_class!r}: its folder {root} lacks the file {ROOT_MARK} that "
                               f"marked it as used{held}: is its disk mounted? Mount it and retry; if you emptied "
                               f"the folder on purpose, create {root / ROOT_MARK} (an empty file) to use it again")

    def _check_apart(self, storage_class: str, root: Path) -> None:
        """A class root neither lies inside nor holds the dtrain home or another class's root (where
        other volumes live): deleting a volume there would delete the volumes inside its folder."""
        here = Path(os.path.realpath(root))
        stored = [Path(r[0]) for r in self.conn.execute("SELECT DISTINCT root FROM volumes WHERE root IS NOT NULL")]
        others = [(self.home, False, ""),
                  *((r, False, f" (storage class {n!r}'s folder)") for n, r in self.classes.items() if n != storage_class),
                  *((r, True, "") for r in stored)]  # a stored root equal to this one: this class's own volumes
        for other, may_equal, whose in others:
            there = Path(os.path.realpath(other))
            if (here.is_relative_to(there) or there.is_relative_to(here)) and not (may_equal and here == there):
                raise SpecError(f"storage class {storage_class!r}: its folder {root} overlaps {other}{whose}, where "
                                f"other volumes or the state database live; give the class a folder of its own, "
                                f"outside the home folder {self.home} and apart from the other classes' folders")

    def snapshot_class(self, snap: Snapshot) -> str:
        """The class a restore of `snap` into a new volume goes to without --class: the class its
        volume was in, where this machine still has it, else the default."""
        known = snap.storage_class == DEFAULT_CLASS or snap.storage_class in self.classes
        return snap.storage_class if known else DEFAULT_CLASS


def _folders(root: Path, recorded: dict[Path, int]) -> dict[str, int]:
    """`root` first, then every other folder the class's volumes record (a class re-pointed since keeps its
    volumes where they were made), each with its count; a folder spelled two ways (a link, a '..') is one."""
    out: dict[str, int] = {str(root): 0}
    shown = {os.path.realpath(root): str(root)}
    for folder, count in recorded.items():
        key = shown.setdefault(os.path.realpath(folder), str(folder))
        out[key] = out.get(key, 0) + count
    return out


def _space(root: Path) -> dict[str, int | None]:
    """Free and total bytes of the file system holding `root` (or its nearest parent that exists)."""
    there = root
    while not there.exists() and there != there.parent:
        there = there.parent
    try:
        st = os.statvfs(there)
    except OSError:
        return {"free_bytes": None, "total_bytes": None}
    return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}
