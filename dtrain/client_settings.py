"""Settings: config.yaml's `kubernetes:` and `sagemaker:` as the backends read them (a typo'd key or a
bad value is one line naming where it came from), and the verbs that change config.yaml (each
checked before anything is saved): `dtrain config kubernetes|sagemaker|node-labels|storage-class`,
the default project and backend. A mixin of Client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dtrain.backends.records import _Record
from dtrain.config import BACKENDS, ClassesOverlapError, UserConfig, class_name_problem
from dtrain.errors import NotFoundError, SpecError, Worded
from dtrain.names import counted, name_list, require_project, shown
from dtrain.numbers import plain_numbers
from dtrain.spec import check_name

if TYPE_CHECKING:
    from dtrain.backends.base import Backend
    from dtrain.backends.sagemaker.config import SageMakerConfig

AWS_REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")  # the SageMaker region when config.yaml sets none


def _aws_region(var: str) -> str:
    from dtrain.spec_sagemaker import REGION_RE
    value = os.environ[var]
    if not REGION_RE.match(value):
        raise SpecError(f"invalid ${var} {shown(value)}: use an AWS region such as us-east-1, or unset it "
                        f"('dtrain config sagemaker --region REGION' sets dtrain's own)")
    return value


@dataclass(frozen=True, kw_only=True)
class Defaults(_Record):
    """The defaults config.yaml holds, as `set_default_project` and `set_default_backend` left them: the
    project and backend of the jobs and verbs that name none, and each project's own backend."""

    project: str
    backend: str
    project_backends: dict[str, str] = field(default_factory=dict)  # `dtrain config backend NAME -p PROJECT`'s


@dataclass(frozen=True, kw_only=True)
class SavedSettings(_Record):
    """A section of config.yaml as a configure verb left it: its name (sagemaker, kubernetes, node_labels or
    storage_classes) and the settings it holds now, as `dtrain config SECTION` prints them."""

    section: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RemovedClasses(_Record):
    """What `unset_storage_classes` removed from config.yaml: the classes, and how many volumes each still
    holds (they stay where they are, listed NotConfigured by `volume classes`)."""

    classes: tuple[str, ...]
    volumes: dict[str, int] = field(default_factory=dict)


class Settings:
    """Mixed into Client, which provides the home folder, config.yaml and the backends made."""

    if TYPE_CHECKING:
        home: Path
        config: UserConfig
        config_problem: ClassesOverlapError | None
        _sagemaker: dict

        def backend(self, name: str | None = None, *, project: str | None = None) -> Backend: ...

        def _forget_made(self, name: str) -> None: ...

    def kubernetes_config(self, project: str | None = None):
        """The Kubernetes settings in use for `project` (None: the configured one), as the backend reads
        them from config.yaml: a typo'd key or a bad value is one SpecError line naming the file."""
        return self._kubernetes_config(project)

    def _kubernetes_config(self, project: str | None = None, *, kubernetes: Mapping[str, Any] | None = None):
        """The `kubernetes:` settings of config.yaml as a KubernetesConfig for `project` (None: the
        configured one); a key it does not know (a typo) or a bad value is one line naming
        config.yaml and the key."""
        import difflib
        from dataclasses import fields

        from dtrain.backends.kubernetes.config import KubernetesConfig
        where = self.home / "config.yaml"
        settings = self.config.kubernetes if kubernetes is None else kubernetes  # settings about to be saved
        known = [f.name for f in fields(KubernetesConfig)]
        for key in sorted(map(str, settings)):
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean '{near[0]}'?" if near else "dtrain/backends/kubernetes/config.py lists them"
                raise SpecError(f"{where}: unknown kubernetes setting {key!r} ({hint}); fix or remove it")
        try:
            return KubernetesConfig(**{"project": self.config.project, **settings,
                                       **({"project": project} if project else {})})
        except (SpecError, TypeError) as err:
            raise SpecError(f"{where}: {err}") from None

    def sagemaker_config(self) -> SageMakerConfig:
        """The SageMaker settings in use, each from the first place that has it: the `sagemaker=`
        settings this client was made with (a pipeline step's parameters), config.yaml's `sagemaker:`,
        and for the region $AWS_REGION, then $AWS_DEFAULT_REGION (as the AWS CLI reads them; on EKS
        IRSA sets both), then us-east-1. An unknown key or a bad value is one line naming where it
        came from."""
        from dtrain.backends.sagemaker.config import SageMakerConfig
        where = str(self.home / "config.yaml")
        try:
            saved = SageMakerConfig.from_dict(self.config.sagemaker, where=where)
        except SpecError as err:
            raise SpecError(str(err) if str(err).startswith(where) else f"{where}: {err}") from None
        settings = dict(self.config.sagemaker)
        if settings.get("region") is None:
            settings.pop("region", None)
            for var in AWS_REGION_VARS:
                if os.environ.get(var):
                    settings["region"] = _aws_region(var)
                    break
        if not self._sagemaker and settings == self.config.sagemaker:
            return saved
        try:  # every key is known here: config.yaml's were checked above, the client's when it was made
            return SageMakerConfig(**{**settings, **self._sagemaker})
        except SpecError as err:  # given as the SDK's sagemaker={...}: its keys, not the CLI's flags
            said = err.in_words("sdk") if isinstance(err, Worded) else err
            raise SpecError(f"SageMaker settings given to this client: {said}") from None

    def configure_sagemaker(self, *, unset: tuple[str, ...] | list[str] = (), **settings) -> SavedSettings:
        """Merge settings (role, bucket, region, subnets, ...) into config.yaml, after removing the
        keys in `unset` (a VPC or an image no longer wanted); all checked before saving. Returns the
        `sagemaker:` settings saved (`dtrain config sagemaker`)."""
        from dtrain.backends.sagemaker.config import SageMakerConfig, setting_named
        unset = name_list(unset, "unset", "unset=['subnets', 'security_groups']")  # 'vpc': one key, not 3
        given = {k: v for k, v in settings.items() if v is not None}
        if both := sorted(set(given) & set(unset)):
            raise SpecError(f"{both[0]} is both set and unset: give one of them; nothing was changed")
        if unknown := SageMakerConfig.unknown_settings([*given, *unset]):  # the CLI's flags are all known
            key, near = next(iter(unknown.items()))
            raise SpecError(f"unknown SageMaker setting {shown(key)}{f' (did you mean {near!r}?)' if near else ''}"
                            f": use one of {', '.join(SageMakerConfig.__dataclass_fields__)}; nothing was changed")
        where = str(self.home / "config.yaml")

        def merged(current: dict) -> dict:
            """The settings saved once this change is made, checked; a refusal names a setting as this
            client's door does (the SDK's argument, the CLI's flag) and writes nothing."""
            try:
                return SageMakerConfig.from_dict({**{k: v for k, v in current.items() if k not in unset}, **given},
                                                 where=where).to_dict()
            except Worded as err:
                raise err.in_words(self.door) from None

        merged(self.config.sagemaker)
        if settings.get("instance_type") is not None:  # a typo would refuse every later submit
            from dtrain.backends.sagemaker.validate import check_enum
            check_enum("sagemaker", "TrainingInstanceType", "ResourceConfig", settings["instance_type"],
                       setting_named("instance_type", self.door))
        self.config = UserConfig.update(self.home, lambda cfg: setattr(cfg, "sagemaker", merged(cfg.sagemaker)))
        self._forget_made("sagemaker")
        return SavedSettings(section="sagemaker", settings=dict(self.config.sagemaker))

    @staticmethod
    def kubernetes_settings() -> tuple[str, ...]:
        """The settings config.yaml's `kubernetes:` takes (KubernetesConfig's fields; the project is
        each command's own), which configure_kubernetes sets and unsets."""
        from dataclasses import fields

        from dtrain.backends.kubernetes.config import KubernetesConfig
        return tuple(f.name for f in fields(KubernetesConfig) if f.name != "project")

    def configure_kubernetes(self, *, unset: tuple[str, ...] | list[str] = (), **settings) -> SavedSettings:
        """Merge settings (namespace, context, kubeconfig, image, ...: KubernetesConfig's fields) into
        config.yaml's `kubernetes:`, after removing the keys in `unset`; checked as the backend checks
        them when it reads config.yaml, before anything is saved. A kubeconfig is saved absolute (a
        relative one would be read from wherever a later command runs). Returns the `kubernetes:`
        settings saved (`dtrain config kubernetes`)."""
        unset = name_list(unset, "unset", "unset=['context', 'kubeconfig']")
        given = {k: v for k, v in settings.items() if v is not None}
        if both := sorted(set(given) & set(unset)):
            raise SpecError(f"{both[0]} is both set and unset: give one of them; nothing was changed")
        if empty := next((k for k, v in given.items() if isinstance(v, str) and not v.strip()), None):
            raise SpecError(f"an empty Kubernetes {empty}: give one, or remove the saved one with "
                            f"dtrain config kubernetes --unset {empty.replace('_', '-')}; nothing was changed")
        if isinstance(given.get("kubeconfig"), str):
            given["kubeconfig"] = os.path.abspath(os.path.expanduser(given["kubeconfig"]))
        known = self.kubernetes_settings()
        for key in [*given, *unset]:
            if key not in known:
                import difflib

                near = difflib.get_close_matches(key, known, n=1)
                raise SpecError(f"unknown Kubernetes setting {key!r}{f' (did you mean {near[0]!r}?)' if near else ''}: "
                                f"use one of {', '.join(known)}; nothing was changed")

        def change(cfg: UserConfig) -> None:
            cfg.kubernetes = {**{k: v for k, v in cfg.kubernetes.items() if k not in unset}, **given}
            self._kubernetes_config(kubernetes=cfg.kubernetes)  # a SpecError writes nothing

        from dtrain.backends.kubernetes.config import KubernetesConfig
        try:  # the values given, alone: their own line names the setting, not config.yaml
            KubernetesConfig(**{k: v for k, v in given.items() if k != "project"})
        except TypeError as err:
            raise SpecError(f"not a Kubernetes setting: {err}") from None
        except SpecError as err:
            raise SpecError(f"{err}; nothing was changed") from None
        given = plain_numbers(given)  # saved as plain numbers: YAML cannot write --gpus-per-node 1e1's, kept as typed
        self._kubernetes_config(kubernetes={**{k: v for k, v in self.config.kubernetes.items() if k not in unset},
                                            **given})
        self.config = UserConfig.update(self.home, change)
        self._forget_made("kubernetes")
        return SavedSettings(section="kubernetes", settings=dict(self.config.kubernetes))

    # ---- this machine's node labels (config.yaml's node_labels) ----------------------------
    def configure_node_labels(self, labels: Mapping[str, str] | None = None, *,
                              unset: tuple[str, ...] | list[str] = ()) -> SavedSettings:
        """Give this machine node labels (what a local job's node_selector may ask for, as `kubectl label
        node` gives a node one), after removing those in `unset`, in config.yaml's `node_labels:`;
        checked before anything is saved. Returns the node labels saved (`dtrain config node-labels`)."""
        from dtrain.backends.local.node import WELL_KNOWN
        from dtrain.spec import node_labels

        if labels is not None and not isinstance(labels, Mapping):
            raise SpecError(f"invalid node labels {shown(labels)}: give a mapping of label to value, e.g. "
                            f"{{'gpu-type': 'a100'}}; nothing was changed")
        given, unset = dict(labels or {}), list(name_list(unset, "unset", "unset=['gpu-type']"))
        if both := sorted(set(given) & set(unset), key=str):
            raise SpecError(f"node label {both[0]} is both set and unset: give one of them; nothing was changed")
        if own := next((k for k in [*given, *unset] if k in WELL_KNOWN), None):
            raise SpecError(f"{own} is this machine's own label (the kubelet's, as 'dtrain nodes --json' shows it): "
                            f"it cannot be set or removed; nothing was changed")
        where = self.home / "config.yaml"

        def change(cfg: UserConfig) -> None:
            if missing := [k for k in unset if k not in cfg.node_labels]:
                raise NotFoundError(f"no node label {shown(missing[0])} in {where} (its node labels: "
                                    f"{', '.join(cfg.node_labels) or 'none'}); nothing was changed")
            cfg.node_labels = {**{k: v for k, v in cfg.node_labels.items() if k not in unset}, **given}
            try:
                node_labels(cfg.node_labels, "node label", arg="labels")  # the SDK names its argument
            except SpecError as err:
                raise SpecError(f"{err}; nothing was changed") from None

        self.config = UserConfig.update(self.home, change)
        return SavedSettings(section="node_labels", settings=dict(self.config.node_labels))

    # ---- storage classes (config.yaml's storage_classes) -----------------------------------
    def set_storage_class(self, name: str, folder: str | Path) -> SavedSettings:
        """Define (or re-point) local storage class `name` as `folder` (made absolute), checked as
        loading config.yaml checks it; every other setting stays. Returns the storage classes saved
        (`settings[name]`: the folder, absolute)."""
        if not isinstance(name, str):  # a list: not a TypeError from config.yaml's mapping
            raise SpecError(f"storage class {shown(name)}: use a lower-case name other than 'local', e.g. "
                            f"set_storage_class('fast', '/nvme/dtrain'); nothing was changed")
        if problem := class_name_problem(name):  # said alone, not as config.yaml's fault with the folder's rule
            raise SpecError(f"{problem}, e.g. fast; nothing was changed")
        if not isinstance(folder, (str, Path)) or not str(folder):
            raise SpecError(f"storage class {name!r}: give its folder, e.g. /nvme/dtrain")
        root = str(Path(os.path.abspath(os.path.expanduser(folder))))
        where = self.home / "config.yaml"
        if self.config_problem is None:
            self._check_not_inside_volumes(name, root)

        def change(cfg: UserConfig) -> None:
            cfg.storage_classes = {**cfg.storage_classes, name: root}
            try:
                cfg.validate(where)  # a SpecError writes nothing
            except ClassesOverlapError as err:
                if name not in err.classes:  # two other classes overlap still: how to repair them
                    raise
                raise SpecError(f"{err.problem}; nothing was changed") from None

        self.config = UserConfig.update(self.home, change, repair=True)  # a file this change repairs is read too
        self.config_problem = None
        self._forget_made("local")  # its store knows the classes it was opened with
        return SavedSettings(section="storage_classes", settings=dict(self.config.storage_classes))

    def _check_not_inside_volumes(self, name: str, root: str) -> None:
        """A class's folder lies in no folder other volumes live in (a removed class's, or one a class was
        re-pointed away from): a volume there is `root`'s parent, or `root` lies inside a volume's data, and
        a class's folder is tidied (empty and half-made folders in it removed), so the data would be cut."""
        here = Path(os.path.realpath(root))
        for (other, folder), count in self.backend("local").volumes_around(root).items():
            if here.is_relative_to(os.path.realpath(folder)):
                live = "lives" if count == 1 else "live"
                raise SpecError(f"storage class {name!r}: its folder {root} lies inside {folder}, where "
                                f"{counted(count, 'volume')} of storage class {other!r} {live}, and a class's "
                                f"folder is tidied as dtrain's own (a volume's data there would be cut): give "
                                f"{name!r} a folder apart from {folder} with 'dtrain config storage-class {name} "
                                f"FOLDER'; nothing was changed")

    def unset_storage_classes(self, names: list[str] | tuple[str, ...]) -> RemovedClasses:
        """Remove local storage classes from config.yaml (their volumes stay where they are, listed
        NotConfigured by `volume classes`). Returns the classes removed and how many volumes each still held."""
        names = name_list(names, "storage class names", "['fast']")  # one name, not its characters
        def change(cfg: UserConfig) -> None:
            missing = [n for n in names if n not in cfg.storage_classes]
            if missing:
                known = ", ".join(cfg.storage_classes) or "none"
                raise NotFoundError(f"no storage class {missing[0]!r} in {self.home / 'config.yaml'} (its classes: "
                                    f"{known}); nothing was changed")
            cfg.storage_classes = {n: r for n, r in cfg.storage_classes.items() if n not in names}

        self.config = UserConfig.update(self.home, change, repair=True)  # a file this change repairs is read too
        self.config_problem = None
        self._forget_made("local")
        # counted after: the volumes table, not config.yaml, says which volumes a class holds
        held = {c.name: c.volumes for c in self.backend("local").list_storage_classes()}
        removed = tuple(dict.fromkeys(names))
        return RemovedClasses(classes=removed, volumes={name: held.get(name, 0) for name in removed})

    # ---- the default project and backend -------------------------------------------------
    def set_default_project(self, name: str) -> Defaults:
        """Make `name` the project of every job and verb that names none, in config.yaml (`dtrain config
        project NAME`, `dtrain project set NAME`): one that exists, as there (a typo saved would send every
        later job to a project of its own). Returns the defaults saved."""
        check_name(name, "project")
        require_project(name, [p.name for p in self.list_projects()])
        self.config = UserConfig.update(self.home, lambda cfg: setattr(cfg, "project", name))
        return self._defaults()

    def set_default_backend(self, name: str, *, project: str | None = None) -> Defaults:
        """Make `name` ('local', 'kubernetes' or 'sagemaker') the backend of the jobs that name none, or with
        `project` that project's, in config.yaml (`dtrain config backend NAME [-p PROJECT]`); its settings
        are checked first. Returns the defaults saved."""
        if name not in BACKENDS:
            raise SpecError(f"unknown backend {shown(name)}; use one of {', '.join(BACKENDS)}")
        if name == "kubernetes":  # its settings checked now, not by the first command that uses it
            self._kubernetes_config()
        elif name == "sagemaker":
            self.sagemaker_config()
        if project:
            check_name(project, "project")
            self.config = UserConfig.update(self.home, lambda cfg: cfg.project_backends.__setitem__(project, name))
        else:
            self.config = UserConfig.update(self.home, lambda cfg: setattr(cfg, "backend", name))
        return self._defaults()

    def _defaults(self) -> Defaults:
        """config.yaml's defaults, as just saved."""
        return Defaults(project=self.config.project, backend=self.config.backend,
                        project_backends=dict(self.config.project_backends))
