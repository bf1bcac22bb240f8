"""The snapshot watcher's RBAC at submit: its ServiceAccount, Role and RoleBinding, one each per
namespace, kept across jobs. Made where missing; dtrain's Role that an older dtrain made is given the
rules it lacks, dtrain's RoleBinding changed by hand is repaired (as `kubectl auth reconcile` does);
one someone else made is left as it is, with one warning naming the fix. `--dry-run` shows each as
submit leaves it, sending nothing. A mixin of KubernetesBackend (submit.py calls it).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from dtrain.backends.base import Notice
from dtrain.errors import ConflictError, DtrainError

from .client import ROLE, ROLE_BINDING, SERVICE_ACCOUNT, Forbidden, Unauthenticated
from .objects import LABEL_MANAGED
from .render_storage import binding_lacks, lacking_rules, repaired_binding

if TYPE_CHECKING:
    from .client import KubeApi

_SHARED = ("ServiceAccount", "Role", "RoleBinding")  # one per namespace, kept across jobs
_BY_KIND = {r.kind: r for r in (SERVICE_ACCOUNT, ROLE, ROLE_BINDING)}  # the shared kinds (submit.py's has all)


class WatcherRbacVerbs:
    """Mixed into KubernetesBackend, which provides api and submit's create."""

    if TYPE_CHECKING:
        api: KubeApi

        def _create(self, obj: dict) -> dict: ...

    def _create_shared(self, obj: dict) -> None:
        try:
            self._create(obj)
        except ConflictError:  # made for an earlier job in this namespace
            if obj["kind"] == ROLE.kind:
                self._complete_role(obj)
            if obj["kind"] == ROLE_BINDING.kind:
                self._repair_binding(obj)

    def _binding_lacking(self, want: dict, found: dict | None = None) -> str | None:
        """The warning (one line) of the watcher's RoleBinding there (`found`, or as read) that does not
        bind its Role to its ServiceAccount; None where it does, or this account may not read it."""
        meta = want["metadata"]
        if found is None:
            try:
                found = self.api.read(ROLE_BINDING, meta["namespace"], meta["name"])
            except DtrainError:
                return None
        gap = binding_lacks(found, want)
        if gap is None:
            return None
        whose = ("labelled as made by dtrain, yet changed since" if _dtrains(found) else
                 f"not made by dtrain (no label {LABEL_MANAGED}=dtrain)")
        return (f"RoleBinding {meta['name']} in namespace {meta['namespace']}, {whose}, {gap[0]}, so the snapshot "
                f"watcher may not read the job or take its snapshot, and submit leaves the RoleBinding as it is: ask "
                f"its owner or an admin to run {gap[1]}; the job runs all the same, without its snapshot until then")

    def _repair_binding(self, want: dict) -> None:
        """The snapshot watcher's RoleBinding, made once per namespace, may have been changed by hand since.
        Where it is dtrain's (its name and managed-by label) and no longer binds the watcher's Role to its
        ServiceAccount, it is repaired as `kubectl auth reconcile` repairs one: the subjects lacking are added
        to those it has by a replace of it as read; a roleRef, which Kubernetes never changes, is put right
        by deleting it and creating it anew, its subjects and labels kept. One of that name someone else made
        is left as it is, with one warning naming the fix; so where the repair is refused. The submit goes on."""
        meta = want["metadata"]
        try:
            found = self.api.read(ROLE_BINDING, meta["namespace"], meta["name"])
        except DtrainError:
            return  # not readable: left unsaid, as a Role is
        gap = binding_lacks(found, want)
        if gap is None:
            return
        said = self._binding_lacking(want, found)
        if not _dtrains(found):
            logging.getLogger(__name__).warning("dtrain: warning: %s", said)
            return
        fixed = repaired_binding(found, want)
        anew = _ref(found) != _ref(want)
        step = "delete" if anew else "update"
        try:
            if anew:
                self.api.delete(ROLE_BINDING, meta["namespace"], meta["name"])
                step = "create"
                self.api.create(fixed, ROLE_BINDING)
            else:
                self.api.replace({**fixed, "metadata": {**found["metadata"], "labels": fixed["metadata"]["labels"]}},
                                 ROLE_BINDING)  # as read (its resourceVersion): a change meanwhile is a 409
        except ConflictError as err:
            if step != "create" or self._binding_lacking(want) is None and self._binding_exists(want):
                return  # made or changed meanwhile by another submit, which repairs it the same way
            self._unmade_binding(found, want, f"its create failed: {err}")
        except DtrainError as err:
            refused = isinstance(err, Forbidden) and not isinstance(err, Unauthenticated)
            why = (f"this account may not {step} RoleBindings there (kubectl auth can-i {step} "
                   f"rolebindings.rbac.authorization.k8s.io -n {meta['namespace']})" if refused
                   else f"its {step} failed: {err}")
            if step == "create":
                self._unmade_binding(found, want, why)
                return
            logging.getLogger(__name__).warning("dtrain: warning: %s", (said or "").replace(
                ", and submit leaves the RoleBinding as it is:", f", and {why}:"))

    def _binding_exists(self, want: dict) -> bool:
        try:
            self.api.read(ROLE_BINDING, want["metadata"]["namespace"], want["metadata"]["name"])
        except DtrainError:
            return False
        return True

    @staticmethod
    def _unmade_binding(found: dict, want: dict, why: str) -> None:
        """The warning (one line) of dtrain's RoleBinding deleted to be made anew (its roleRef put right)
        whose create then failed: it is gone, so the fix is to make it, which the next submit does."""
        meta, ref, account = want["metadata"], want["roleRef"], want["subjects"][0]
        got = found.get("roleRef") or {}
        logging.getLogger(__name__).warning(
            "dtrain: warning: RoleBinding %s in namespace %s, labelled as made by dtrain, bound %s %s, not Role %s: "
            "it was deleted to be made anew, and %s, so the snapshot watcher may not read the job or take its "
            "snapshot until it is made: submit again once allowed (that makes it), or ask an admin to run kubectl "
            "create rolebinding %s -n %s --role=%s --serviceaccount=%s:%s", meta["name"], meta["namespace"],
            got.get("kind") or "?", got.get("name") or "?", ref["name"], " ".join(why.split()), meta["name"],
            meta["namespace"], ref["name"], account["namespace"], account["name"])

    def _complete_role(self, want: dict) -> None:
        """The snapshot watcher's Role, made once per namespace, may come from an older dtrain and lack a
        rule this one's watcher needs (patch on the job kinds: the record of the snapshot it took). Where
        it is dtrain's (its name and managed-by label), the rules lacking are added to it by a replace of
        the Role as read (its resourceVersion: a replace that went stale reads it again), every rule it
        has kept, as `kubectl apply` updates an object. A Role of that name someone else made is left as
        it is, and one warning names the rule to grant; so where the update is refused. One this account
        may not read is left unsaid. The submit goes on: the watcher takes the snapshot all the same."""
        namespace, name = want["metadata"]["namespace"], want["metadata"]["name"]
        refused: DtrainError | None = None
        for _ in range(3):
            found = self._role_lacking(want)
            if found is None:
                return
            role, lacking = found
            if not _dtrains(role):
                logging.getLogger(__name__).warning("dtrain: warning: %s", _foreign_role_words(role, lacking))
                return
            try:
                self.api.replace({**role, "rules": [*(role.get("rules") or []), *lacking]}, ROLE)
                return
            except ConflictError:
                continue  # changed since it was read (another submit's update): read it again
            except DtrainError as err:
                refused = err
                break
        if refused is None:  # stale at each of the tries: others are updating it
            return
        rules, patch = _grant_words(name, namespace, lacking)
        why = (f"this account may not update Roles there (kubectl auth can-i update roles.rbac.authorization.k8s.io "
               f"-n {namespace})" if isinstance(refused, Forbidden) and not isinstance(refused, Unauthenticated)
               else f"its update failed: {refused}")
        logging.getLogger(__name__).warning(
            "dtrain: warning: Role %s in namespace %s, made by an earlier dtrain, lacks %s, which the snapshot "
            "watcher needs to record the snapshot it takes on the job, and %s: ask an admin to grant it (%s); "
            "the watcher takes the snapshot all the same, and the next look at the job records it",
            name, namespace, rules, why, patch)

    def _role_lacking(self, want: dict) -> tuple[dict, list[dict]] | None:
        """The Role of `want`'s name as read and the rules of `want` it lacks; None where it lacks none,
        is not there, or this account may not read it (a GET only: a dry run's look too)."""
        try:
            role = self.api.read(ROLE, want["metadata"]["namespace"], want["metadata"]["name"])
        except DtrainError:
            return None
        lacking = lacking_rules(role.get("rules") or [], want["rules"])
        return (role, lacking) if lacking else None

    def _shared_dry_run(self, want: dict) -> tuple[dict | None, Notice | None]:
        """The document a dry run shows of the watcher's ServiceAccount, Role or RoleBinding, and its note.
        One of that name someone else made (no managed-by label) submit leaves as it is, so it is left
        out (None), the note naming it and, for a Role, the rules it lacks and the patch that grants them:
        `kubectl apply -f` of the output would otherwise overwrite it (a Role's rules) and label it dtrain's.
        Where an older dtrain's Role lacks rules, the Role as submit's update leaves it (its metadata and
        rules as read, the rules lacking added); dtrain's RoleBinding changed by hand, as submit repairs it. One
        not there, or not readable: as rendered. Nothing is sent."""
        meta = want["metadata"]
        try:
            found = self.api.read(_BY_KIND[want["kind"]], meta["namespace"], meta["name"])
        except DtrainError:
            return want, None
        lacking = lacking_rules(found.get("rules") or [], want["rules"]) if want["kind"] == ROLE.kind else []
        unbound = self._binding_lacking(want, found) if want["kind"] == ROLE_BINDING.kind else None
        if not _dtrains(found):
            said = (_foreign_role_words(found, lacking) if lacking else unbound or
                    f"{want['kind']} {meta['name']} in namespace {meta['namespace']} exists, not made by dtrain (no "
                    f"label {LABEL_MANAGED}=dtrain), and submit leaves it as it is")
            return None, Notice(code="shared-left", message=(
                f"{said}; it is left out of the manifests below, as kubectl apply -f of dtrain's {want['kind']} "
                f"would overwrite it"))
        gap = binding_lacks(found, want) if want["kind"] == ROLE_BINDING.kind else None
        if gap is not None:  # dtrain's, changed by hand: shown as submit's repair leaves it
            how = ("deletes it and makes it anew (a roleRef never changes)" if _ref(found) != _ref(want) else
                   "adds the watcher's ServiceAccount to its subjects")
            return repaired_binding(found, want), Notice(code="binding-repaired", message=(
                f"RoleBinding {meta['name']} in namespace {meta['namespace']}, labelled as made by dtrain, yet "
                f"changed since, {gap[0]}: submit {how}, keeping its other subjects (shown below as repaired)"))
        if not lacking:
            return want, None
        shown = {"apiVersion": want["apiVersion"], "kind": want["kind"],
                 "metadata": {k: found["metadata"][k] for k in ("name", "namespace", "labels", "annotations")
                              if found["metadata"].get(k)},
                 "rules": [*(found.get("rules") or []), *lacking]}
        rules, _ = _grant_words(meta["name"], meta["namespace"], lacking)
        return shown, Notice(code="role-updated", message=(
            f"Role {meta['name']} in namespace {meta['namespace']} exists, made by an earlier dtrain, and lacks "
            f"{rules}, which the snapshot watcher needs: submit updates it, adding them to the rules it has "
            f"(shown below as updated)"))


def _ref(binding: dict) -> tuple:
    ref = binding.get("roleRef") or {}
    return ref.get("kind"), ref.get("name")


def _dtrains(role: dict) -> bool:
    return (role["metadata"].get("labels") or {}).get(LABEL_MANAGED) == "dtrain"


def _grant_words(name: str, namespace: str, lacking: list[dict]) -> tuple[str, str]:
    """The rules `lacking` in words ('patch on jobs.batch, pytorchjobs.kubeflow.org') and the `kubectl
    patch role` that adds them to Role `name` (a JSON Patch appending each, kept rules untouched)."""
    kinds: dict[str, list[str]] = {}  # verbs -> the resources lacking them, as kubectl names them
    for r in lacking:
        group = r["apiGroups"][0]
        kinds.setdefault("/".join(r["verbs"]), []).append(r["resources"][0] + (f".{group}" if group else ""))
    rules = "; ".join(f"{verbs} on {', '.join(names)}" for verbs, names in kinds.items())
    ops = json.dumps([{"op": "add", "path": "/rules/-", "value": r} for r in lacking], separators=(",", ":"))
    return rules, f"kubectl patch role {name} -n {namespace} --type=json -p '{ops}'"


def _foreign_role_words(role: dict, lacking: list[dict]) -> str:
    """The warning (one line) of a watcher Role someone else made that lacks rules: dtrain leaves it."""
    name, namespace = role["metadata"]["name"], role["metadata"]["namespace"]
    rules, patch = _grant_words(name, namespace, lacking)
    return (f"Role {name} in namespace {namespace}, not made by dtrain (no label {LABEL_MANAGED}=dtrain), lacks "
            f"{rules}, which the snapshot watcher needs to record the snapshot it takes on the job, and submit "
            f"leaves another's Role as it is: ask its owner or an admin to grant it ({patch}); the "
            f"watcher takes the snapshot all the same, and the next look at the job records it")
