"""Where dtrain keeps its state, and the small user config file (default project, backends).

`$DTRAIN_HOME` (default ~/.dtrain) holds `state.db` (SQLite), `config.yaml`, `jobs/<name>/`
(logs and process records) and `volumes/` plus the snapshot store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dtrain.errors import SpecError
from dtrain.names import CLASS_RE
from dtrain.spec import check_name

BACKENDS = ("local", "kubernetes", "sagemaker")


def home_dir(home: str | Path | None = None) -> Path:
    path = Path(home or os.environ.get("DTRAIN_HOME") or Path.home() / ".dtrain").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


@dataclass(kw_only=True)
class UserConfig:
    """The contents of `$DTRAIN_HOME/config.yaml`."""

    project: str = "default"  # default project for new jobs
    backend: str = "local"  # default backend
    project_backends: dict[str, str] = field(default_factory=dict)  # project -> backend
    kubernetes: dict[str, Any] = field(default_factory=dict)  # KubernetesConfig fields
    storage_classes: dict[str, str] = field(default_factory=dict)  # local class -> root folder
    sagemaker: dict[str, Any] = field(default_factory=dict)  # SageMakerConfig fields

    @classmethod
    def load(cls, home: Path) -> "UserConfig":
        path = home / "config.yaml"
        if not path.exists():
            return cls()
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise SpecError(f"{path} is not valid YAML ({err}); fix or remove the file") from None
        if not isinstance(data, dict):
            raise SpecError(f"{path} must hold a mapping (project:, backend:, ...); fix or remove the file")
        unknown = set(data) - {"project", "backend", "project_backends", "kubernetes", "storage_classes", "sagemaker"}
        if unknown:
            raise SpecError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: project, "
                            f"backend, project_backends, kubernetes, storage_classes, sagemaker")
        cfg = cls(**data)
        cfg.validate(path)
        return cfg

    def validate(self, where: Any = "config") -> None:
        check_name(self.project, "project")
        for backend in [self.backend, *self.project_backends.values()]:
            if backend not in BACKENDS:
                raise SpecError(f"{where}: unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if not isinstance(self.storage_classes, dict):
            raise SpecError(f"{where}: storage_classes must map class names to folders, e.g. fast: /nvme/dtrain")
        for name, root in self.storage_classes.items():
            if name == "local" or not CLASS_RE.match(str(name)) or not str(root).startswith("/"):
                raise SpecError(f"{where}: storage class {name!r}: {root!r}: use a lower-case name other than "
                                f"'local' (the dtrain home's volumes/) and an absolute folder, e.g. fast: /nvme/dtrain")

    def save(self, home: Path) -> None:
        self.validate()
        path = home / "config.yaml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump({"project": self.project, "backend": self.backend,
                                       "project_backends": self.project_backends,
                                       "kubernetes": self.kubernetes,
                                       "storage_classes": self.storage_classes,
                                       "sagemaker": self.sagemaker}, sort_keys=False))
        os.replace(tmp, path)

    def class_roots(self) -> dict[str, Path]:
        return {name: Path(root) for name, root in self.storage_classes.items()}

    def backend_for(self, project: str) -> str:
        return self.project_backends.get(project, self.backend)
