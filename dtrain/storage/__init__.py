"""Local volumes and snapshots: `Storage` (policy) over `Engine` (content-addressed store)."""

from dtrain.storage.engine import Engine
from dtrain.storage.fileio import FileIO
from dtrain.storage.info import Damage, Freed, Snapshot, VerifyReport, Volume
from dtrain.storage.manifest import Change
from dtrain.storage.volumes import Storage

__all__ = ["Storage", "Engine", "FileIO", "Volume", "Snapshot", "Freed", "VerifyReport",
           "Damage", "Change"]
