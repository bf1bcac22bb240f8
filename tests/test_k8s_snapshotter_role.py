"""The snapshot watcher's Role, made once per namespace, brought up to the rules this dtrain's watcher
needs when an older dtrain made it (patch on the job kinds, to record the snapshot it took), against
the fake API server as test_k8s_backend.py drives it; what is sent is validated as test_k8s_render.py
validates every rendered object."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("kubernetes")

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_render import validate  # noqa: E402

from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.render_storage import lacking_rules, render_snapshot_rbac  # noqa: E402
from dtrain.spec import parse_pvc  # noqa: E402

RBAC = "rbac.authorization.k8s.io"
ROLE_PATH = f"/namespaces/{NS}/roles/dtrain-snapshotter"
# The Role as a dtrain before the watcher recorded its snapshot made it: get on the job kinds only
OLD_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"], "verbs": ["get"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get"]},
    {"apiGroups": ["snapshot.storage.k8s.io"], "resources": ["volumesnapshots"], "verbs": ["get", "create"]},
]


def _wanted() -> list[dict]:
    role = next(o for o in render_snapshot_rbac(NS, "lanes", KubernetesConfig()) if o["kind"] == "Role")
    return role["rules"]


def _old_role(cluster, *, labels: dict | None = None, rules: list | None = None) -> None:
    if labels is None:
        labels = {"dtrain.io/project": "lanes", "app.kubernetes.io/managed-by": "dtrain"}
    cluster.create({"apiVersion": f"{RBAC}/v1", "kind": "Role",
                    "metadata": {"name": "dtrain-snapshotter", "namespace": NS, "labels": labels},
                    "rules": OLD_RULES if rules is None else rules})


def _submit_watched(backend) -> None:
    backend.create_volume("data", size="1Gi")
    backend.submit(spec(snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))


def _puts(cluster) -> list[str]:
    return [path for method, path in cluster.requests if method == "PUT"]


def test_an_older_dtrains_role_gets_the_rules_it_lacks_and_keeps_its_own(backend, cluster):
    """Reproduced: a namespace set up before the watcher needed `patch` kept its Role as made (dtrain
    created it once and took the 409 as done), so every watcher there failed to record its snapshot."""
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    extra = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}  # an admin's addition
    _old_role(cluster, rules=[*OLD_RULES, extra])
    _submit_watched(backend)
    role = cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")
    assert lacking_rules(role["rules"], _wanted()) == []
    assert role["rules"][:len(OLD_RULES) + 1] == [*OLD_RULES, extra]
    assert [p.split("?")[0] for p in _puts(cluster)] == [f"/apis/{RBAC}/v1{ROLE_PATH}"]
    [sent] = [o for o in cluster.written if o["kind"] == "Role"]
    sent.pop("status")  # the fake's answer gives every replaced object one; a Role has none, nor did dtrain send it
    validate(sent)  # the replace the real API server takes (Role's schema, strict)
    assert cluster.get("batch", "jobs", NS, "train-snap")  # and the watcher is made
    backend.submit(spec(name="again", snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))
    assert len(_puts(cluster)) == 1  # complete now: no further update


def test_a_complete_role_and_one_dtrain_did_not_make_are_left_as_they_are(backend, cluster):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _old_role(cluster, labels={"team": "vision"})  # an admin's Role of that name
    _submit_watched(backend)
    assert _puts(cluster) == []
    assert cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")["rules"] == OLD_RULES


def test_a_role_granting_every_verb_by_wildcard_lacks_nothing():
    wanted = _wanted()
    assert lacking_rules([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], wanted) == []
    # a rule naming objects grants those only, not the kind
    def grants(rules):
        return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert grants(lacking_rules([{**r, "resourceNames": ["train"]} for r in wanted], wanted)) == grants(wanted)
    assert lacking_rules(OLD_RULES, wanted) == [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["patch"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["patch"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["patch"]}]


def _warned_when_the_update_is_refused(backend, cluster, caplog, message: str) -> str:
    """The one warning a submit logs where the older Role's update is refused (403 `message`)."""
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _old_role(cluster)
    cluster.fail("PUT", ROLE_PATH, 403, message)
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend)
    [said] = [r.getMessage() for r in caplog.records if "dtrain-snapshotter" in r.getMessage()]
    return said


def test_an_account_that_may_not_update_roles_is_told_the_rule_to_grant_and_the_job_runs(backend, cluster, caplog):
    said = _warned_when_the_update_is_refused(backend, cluster, caplog,
                                              'roles.rbac.authorization.k8s.io "dtrain-snapshotter" is forbidden')
    assert "\n" not in said
    assert said.startswith(f"dtrain: warning: Role dtrain-snapshotter in namespace {NS}, made by an earlier dtrain, "
                           f"lacks patch on jobs.batch, pytorchjobs.kubeflow.org, mpijobs.kubeflow.org, "
                           f"trainjobs.trainer.kubeflow.org, which the snapshot watcher needs")
    assert f"this account may not update Roles there (kubectl auth can-i update roles.rbac.authorization.k8s.io " \
           f"-n {NS})" in said
    assert f"kubectl patch role dtrain-snapshotter -n {NS} --type=json -p '[" in said
    assert cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")["rules"] == OLD_RULES
    assert cluster.get("batch", "jobs", NS, "train") and cluster.get("batch", "jobs", NS, "train-snap")


def test_the_patch_the_warning_gives_makes_the_role_complete(backend, cluster, caplog):
    """The command the warning names, applied as the API server applies a JSON Patch, leaves nothing lacking."""
    import json
    import shlex

    said = _warned_when_the_update_is_refused(backend, cluster, caplog, "forbidden")
    assert "kubectl patch role" in said
    words = shlex.split(said[said.index("kubectl patch role"):said.index("); the watcher")])
    ops = json.loads(words[words.index("-p") + 1])
    role = cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")
    # '/rules/-' appends to the list, as RFC 6902 says
    patched = {**role, "rules": [*role["rules"], *(op["value"] for op in ops if op["path"] == "/rules/-")]}
    assert all(op["op"] == "add" and op["path"] == "/rules/-" for op in ops)
    assert lacking_rules(patched["rules"], _wanted()) == []
    validate(patched)


def test_a_replace_refused_as_stale_reads_the_role_again_and_the_submit_goes_on(backend, cluster, caplog):
    """A 409 (another submit updated the Role since it was read) is a fresh read and try, three at most;
    then the submit goes on unsaid (the other submit's update is under way)."""
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _old_role(cluster)
    cluster.fail("PUT", ROLE_PATH, 409, "the object has been modified; please apply your changes to the latest version")
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend)
    reads = [p for m, p in cluster.requests if m == "GET" and p.split("?")[0].endswith(ROLE_PATH)]
    assert len(_puts(cluster)) == 3 and len(reads) == 3
    assert not [r for r in caplog.records if "dtrain-snapshotter" in r.getMessage()]
    assert cluster.get("batch", "jobs", NS, "train-snap")


def _dry_run_watched(backend, tmp_path, capsys, *, name: str = "train", as_json: bool = False,
                     new_volume: bool = True) -> tuple[str, str]:
    """`dtrain submit --dry-run` of a job with --snapshot-on-success on volume data (made first where
    `new_volume`), as cli.submit prints it: (stdout, stderr)."""
    from dtrain.cli.submit import dry_run
    from dtrain.client import Client

    if new_volume:
        backend.create_volume("data", size="1Gi")
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    capsys.readouterr()
    assert dry_run(spec(name=name, snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),),
                        backend="kubernetes"), client, as_json=as_json) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_a_dry_run_shows_the_update_an_older_dtrains_role_gets_and_sends_nothing(backend, cluster, tmp_path, capsys):
    """Reproduced: the dry run showed the Role as a create only (submit takes its 409 as done, then
    updates the Role), so the update a submit makes went unsaid and unseen."""
    import yaml

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    extra = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    _old_role(cluster, rules=[*OLD_RULES, extra])
    backend.create_volume("data", size="1Gi")
    writes = len([m for m, _ in cluster.requests if m != "GET"])
    out, err = _dry_run_watched(backend, tmp_path, capsys, new_volume=False)
    assert len([m for m, _ in cluster.requests if m != "GET"]) == writes  # a GET of the Role, nothing sent
    assert cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")["rules"] == [*OLD_RULES, extra]
    [note] = [line for line in out.splitlines() if line.startswith("# Role ")]
    assert note == (f"# Role dtrain-snapshotter in namespace {NS} exists, made by an earlier dtrain, and lacks patch on "
                    f"jobs.batch, pytorchjobs.kubeflow.org, mpijobs.kubeflow.org, trainjobs.trainer.kubeflow.org, "
                    f"which the snapshot watcher needs: submit updates it, adding them to the rules it has (shown "
                    f"below as updated)")
    [role] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Role"]
    assert role["rules"] == [*OLD_RULES, extra, *lacking_rules(OLD_RULES, _wanted())]  # as the replace sends them
    assert lacking_rules(role["rules"], _wanted()) == []
    assert role["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dtrain"
    assert not {"resourceVersion", "uid", "creationTimestamp"} & set(role["metadata"])
    validate(role)  # what kubectl apply -f takes
    # --json: the note goes to stderr, stdout stays one JSON object a line
    out, err = _dry_run_watched(backend, tmp_path, capsys, as_json=True, new_volume=False)
    assert err.startswith(f"# --snapshot-on-success takes snapshot train-success ") and \
        f"\n{note}\n" in err and not [line for line in out.splitlines() if line.startswith("#")]


def test_a_dry_run_of_a_complete_role_says_nothing_of_it(backend, cluster, tmp_path, capsys):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _old_role(cluster, rules=_wanted())
    out, err = _dry_run_watched(backend, tmp_path, capsys)
    assert not [line for line in (out + err).splitlines() if line.startswith("# Role ")]


def test_a_role_someone_else_made_lacking_patch_is_warned_of_at_submit_and_left(backend, cluster, caplog,
                                                                                  tmp_path, capsys):
    """Reproduced: an admin's Role of the watcher's name, without patch, got no word at submit (its
    watcher said so in its own log, later)."""
    import json
    import shlex

    import yaml

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _old_role(cluster, labels={"team": "vision"})
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend)
    [said] = [r.getMessage() for r in caplog.records if "dtrain-snapshotter" in r.getMessage()]
    assert "\n" not in said
    assert said.startswith(f"dtrain: warning: Role dtrain-snapshotter in namespace {NS}, not made by dtrain (no label "
                           f"app.kubernetes.io/managed-by=dtrain), lacks patch on jobs.batch, pytorchjobs.kubeflow.org, "
                           f"mpijobs.kubeflow.org, trainjobs.trainer.kubeflow.org, which the snapshot watcher needs")
    assert _puts(cluster) == [] and cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")["rules"] == OLD_RULES
    assert cluster.get("batch", "jobs", NS, "train-snap")
    words = shlex.split(said[said.index("kubectl patch role"):said.index("); the watcher")])
    assert words[:6] == ["kubectl", "patch", "role", "dtrain-snapshotter", "-n", NS]
    ops = json.loads(words[words.index("-p") + 1])
    assert lacking_rules([*OLD_RULES, *(op["value"] for op in ops)], _wanted()) == []
    # the dry run says the same, and leaves the admin's Role out of what kubectl apply -f would take
    out, _ = _dry_run_watched(backend, tmp_path, capsys, name="again", new_volume=False)
    [note] = [line for line in out.splitlines() if line.startswith("# Role ")]
    assert note == (f"# {said.removeprefix('dtrain: warning: ')}; it is left out of the manifests below, as "
                    f"kubectl apply -f of dtrain's Role would overwrite it")
    assert "Role" not in [d["kind"] for d in yaml.safe_load_all(out) if d]


def _apply(cluster, out: str) -> None:
    """What `kubectl apply -f` of a dry run's output does to the objects it names: each one there is
    replaced by the document (its rules, subjects and labels), each one not there is created."""
    import yaml

    for doc in yaml.safe_load_all(out):
        if doc and doc["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            key = cluster._key(doc)
            if key in cluster.objects:
                was = cluster.objects[key]
                cluster.objects[key] = {**doc, "metadata": {**was["metadata"], **doc["metadata"]}}
            else:
                cluster.create(doc)


def test_a_dry_run_leaves_out_the_rbac_someone_else_made_so_applying_it_keeps_theirs(backend, cluster, tmp_path,
                                                                                      capsys):
    """Reproduced: a complete Role, and a RoleBinding, of the watcher's name that an admin made (a
    Kubeflow profile's namespace) were shown as dtrain renders them, without a word: applying the dry
    run's output replaced the admin's rules and subjects and labelled both dtrain's."""
    import yaml

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    admins = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    _old_role(cluster, labels={"team": "vision"}, rules=admins)
    binding = {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
               "metadata": {"name": "dtrain-snapshotter", "namespace": NS},
               "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "dtrain-snapshotter"},
               "subjects": [{"kind": "ServiceAccount", "name": "dtrain-snapshotter", "namespace": NS},
                            {"kind": "ServiceAccount", "name": "default-editor", "namespace": NS}]}
    cluster.create(binding)
    out, _ = _dry_run_watched(backend, tmp_path, capsys)
    notes = [line for line in out.splitlines() if line.startswith(("# Role ", "# RoleBinding "))]
    assert notes == [f"# {kind} dtrain-snapshotter in namespace {NS} exists, not made by dtrain (no label "
                     f"app.kubernetes.io/managed-by=dtrain), and submit leaves it as it is; it is left out of the "
                     f"manifests below, as kubectl apply -f of dtrain's {kind} would overwrite it"
                     for kind in ("Role", "RoleBinding")]
    _apply(cluster, out)
    role = cluster.get(RBAC, "roles", NS, "dtrain-snapshotter")
    assert role["rules"] == admins and "app.kubernetes.io/managed-by" not in role["metadata"]["labels"]
    assert cluster.get(RBAC, "rolebindings", NS, "dtrain-snapshotter")["subjects"] == binding["subjects"]
    assert cluster.get("", "serviceaccounts", NS, "dtrain-snapshotter")  # dtrain's own: shown, and made by apply
    # the watcher's account dtrain made: shown as rendered, with no note
    out, _ = _dry_run_watched(backend, tmp_path, capsys, name="again", new_volume=False)
    assert "ServiceAccount" in [d["kind"] for d in yaml.safe_load_all(out) if d] and not [line for line in out.splitlines()
                                                    if line.startswith("# ServiceAccount ")]
