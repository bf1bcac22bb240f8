"""The Kubernetes backend's leftovers of a ninth audit: `project delete` refused part-way (RBAC, any API
error) left the quota gone and the labels on and said only the API's refusal, or a traceback; a watcher
RoleBinding labelled dtrain's but changed by hand was only warned of, where dtrain's Role is repaired;
the fake API server did not append with a JSON Patch's `/-`, kept the pods of a suspended job, and kept
a deleted namespace's objects.

Each test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.client import Forbidden, Unanswered  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

RBAC = "rbac.authorization.k8s.io"
DTRAINS = {"app.kubernetes.io/managed-by": "dtrain"}


def _team(make_backend, cluster):
    """Namespace dtrain-team another tool made, with dtrain's GPU quota and watcher account."""
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "dtrain-team", "labels": {"dtrain.io/project": "team", "runai/queue": "team"}}})
    backend = make_backend(KubernetesConfig(project="team", image=IMAGE))
    backend.create_project("team", gpu_quota=2)
    for kind, extra in (("ServiceAccount", {}), ("Role", {"rules": []}),
                        ("RoleBinding", {"roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "dtrain-snapshotter"},
                                         "subjects": []})):
        cluster.create({"apiVersion": "v1" if kind == "ServiceAccount" else f"{RBAC}/v1", "kind": kind, **extra,
                        "metadata": {"name": "dtrain-snapshotter", "namespace": "dtrain-team", "labels": DTRAINS}})
    return backend


def _left(cluster) -> list[str]:
    return sorted(f"{o['kind']} {o['metadata']['name']}" for (g, p, ns, _), o in cluster.objects.items()
                  if ns == "dtrain-team")


def test_project_delete_refused_part_way_says_what_went_and_a_rerun_finishes(make_backend, cluster):
    """Reproduced: the quota went first, then a 403 on the watcher's Role came out as the API's refusal
    alone, the project left listed without its quota. Now the watcher's account goes first, the quota
    and the labels (the project as listed) last, and the line says what went, what stays and the fix."""
    backend = _team(make_backend, cluster)
    refusal = ('roles.rbac.authorization.k8s.io "dtrain-snapshotter" is forbidden: User "test" cannot delete '
               'resource "roles" in API group "rbac.authorization.k8s.io" in the namespace "dtrain-team"')
    cluster.fail("DELETE", "/namespaces/dtrain-team/roles/dtrain-snapshotter", 403, refusal)
    with pytest.raises(Forbidden) as err:
        backend.delete_project("team")
    assert str(err.value) == (
        "project 'team' is partly deleted (RoleBinding dtrain-snapshotter went; ServiceAccount dtrain-snapshotter, "
        "ResourceQuota dtrain-quota and labels dtrain.io/project of namespace dtrain-team stay): cannot delete Role "
        f"'dtrain-snapshotter' in namespace dtrain-team: {refusal}; check your credentials and RBAC (kubectl auth "
        "can-i delete roles.rbac.authorization.k8s.io -n dtrain-team); re-run 'dtrain project delete team' once "
        "you may delete Role dtrain-snapshotter")
    # the project is as listed before: its quota and labels kept
    assert _left(cluster) == ["ResourceQuota dtrain-quota", "Role dtrain-snapshotter",
                              "ServiceAccount dtrain-snapshotter"]
    assert [(p.name, p.gpu_quota) for p in backend.list_projects()] == [("team", 2)]
    cluster.faults.clear()  # the admin grants it: the same command finishes
    gone = backend.delete_project("team")
    assert gone.removed == ("Role dtrain-snapshotter", "ServiceAccount dtrain-snapshotter",
                            "ResourceQuota dtrain-quota", "labels dtrain.io/project of namespace dtrain-team")
    assert _left(cluster) == [] and backend.list_projects() == []


@pytest.mark.parametrize("refused", ["read", "quota", "labels", "namespace", "unanswered"])
def test_project_delete_names_the_step_and_the_verb_refused_and_a_rerun_finishes(make_backend, cluster, refused):
    if refused == "namespace":  # dtrain's own namespace: one step
        backend = make_backend()
        backend.create_project("lanes", gpu_quota=1)
        cluster.fail("DELETE", f"/api/v1/namespaces/{NS}", 403, "no")
        with pytest.raises(Forbidden, match=(
                f"^project 'lanes' is not deleted: cannot delete Namespace '{NS}': no; check your credentials and "
                f"RBAC \\(kubectl auth can-i delete namespaces\\); re-run 'dtrain project delete lanes' once you may "
                f"delete namespace {NS}$")):
            backend.delete_project("lanes")
        assert [p.name for p in backend.list_projects()] == ["lanes"]
        cluster.faults.clear()
        backend.delete_project("lanes")
        assert backend.list_projects() == []
        return
    backend = _team(make_backend, cluster)
    before = len(cluster.requests)
    if refused == "read":  # every read comes first: nothing is sent before it
        cluster.fail("GET", "/roles/", 403, "no")
        with pytest.raises(Forbidden, match=(
                "^project 'team' is not deleted: cannot read Role 'dtrain-snapshotter' in namespace dtrain-team: no; "
                ".* once you may get Role dtrain-snapshotter in namespace dtrain-team$")):
            backend.delete_project("team")
        assert [m for m, _ in cluster.requests[before:] if m != "GET"] == []
    elif refused == "quota":
        cluster.fail("DELETE", "/resourcequotas/", 403, "no")
        with pytest.raises(Forbidden, match=(
                "^project 'team' is partly deleted \\(RoleBinding dtrain-snapshotter, Role dtrain-snapshotter and "
                "ServiceAccount dtrain-snapshotter went; labels dtrain.io/project of namespace dtrain-team stay\\): "
                "cannot delete ResourceQuota 'dtrain-quota' in namespace dtrain-team: no; .* once you may delete "
                "ResourceQuota dtrain-quota$")):
            backend.delete_project("team")
    elif refused == "labels":
        cluster.fail("PATCH", "/api/v1/namespaces/dtrain-team", 403, "no")
        with pytest.raises(Forbidden, match=(
                "^project 'team' is partly deleted \\(RoleBinding dtrain-snapshotter, Role dtrain-snapshotter, "
                "ServiceAccount dtrain-snapshotter and ResourceQuota dtrain-quota went\\): cannot patch Namespace "
                "'dtrain-team': no; .* once you may patch namespace dtrain-team$")):
            backend.delete_project("team")
    else:  # a 5xx: the delete may have been done; the re-run looks again
        cluster.fail("DELETE", "/roles/", 503, "etcd is busy")
        with pytest.raises(Unanswered, match=(
                "^project 'team' is partly deleted \\(RoleBinding dtrain-snapshotter went; .*\\): cannot delete Role "
                "'dtrain-snapshotter' in namespace dtrain-team: HTTP 503 etcd is busy; .*; re-run 'dtrain project "
                "delete team' once the cluster answers \\(the step may have been done; the re-run looks again\\)$")):
            backend.delete_project("team")
    assert [p.name for p in backend.list_projects()] == ["team"]  # still listed: the labels go last
    cluster.faults.clear()
    backend.delete_project("team")
    assert _left(cluster) == [] and backend.list_projects() == []


# --------------------------------------------------------------- the watcher's RoleBinding changed by hand


def _binding(cluster, subjects: list[dict], *, role: str = "dtrain-snapshotter", labels: dict | None = None) -> dict:
    return cluster.create({"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding",
                           "metadata": {"name": "dtrain-snapshotter", "namespace": NS,
                                        "labels": {**DTRAINS, "team": "vision"} if labels is None else labels},
                           "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": role}, "subjects": subjects})


def _submit_watched(backend, name: str) -> None:
    from dtrain.spec import parse_pvc

    backend.submit(spec(name=name, snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))


def _bound(cluster) -> dict:
    return cluster.get(RBAC, "rolebindings", NS, "dtrain-snapshotter")


EDITOR = {"kind": "ServiceAccount", "name": "default-editor", "namespace": NS}
WATCHER = {"kind": "ServiceAccount", "name": "dtrain-snapshotter", "namespace": NS}


def test_dtrains_rolebinding_changed_by_hand_is_repaired_as_kubectl_auth_reconcile_does(backend, cluster, caplog):
    """Reproduced: dtrain's RoleBinding whose subjects or roleRef were edited by hand was only warned of
    (dtrain's Role in that state is repaired), and every watcher there failed until an admin fixed it."""
    import logging

    from test_k8s_render import validate

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    backend.create_volume("data", size="1Gi")
    _binding(cluster, [EDITOR])  # its subjects changed: the watcher's account added, the editor kept
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend, "one")
    assert [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()] == []
    fixed = _bound(cluster)
    assert fixed["subjects"] == [EDITOR, WATCHER] and fixed["metadata"]["labels"]["team"] == "vision"
    assert [m for m, p in cluster.requests if "/rolebindings/" in p] == ["GET", "PUT"]
    [sent] = [o for o in cluster.written if o["kind"] == "RoleBinding"]
    sent.pop("status")  # the fake's answer gives every replaced object one; dtrain sent none
    validate(sent)
    # its roleRef changed (an admin bound `view`): a roleRef never changes, so it is deleted and made anew
    cluster.objects.pop((RBAC, "rolebindings", NS, "dtrain-snapshotter"))
    old = _binding(cluster, [EDITOR], role="view")
    cluster.requests.clear()
    cluster.written.clear()
    _submit_watched(backend, "two")
    fixed = _bound(cluster)
    assert fixed["roleRef"] == {"apiGroup": RBAC, "kind": "Role", "name": "dtrain-snapshotter"}
    assert fixed["subjects"] == [EDITOR, WATCHER] and fixed["metadata"]["uid"] != old["metadata"]["uid"]
    assert [m for m, p in cluster.requests if "rolebindings" in p] == ["POST", "GET", "DELETE", "POST"]
    [sent] = [o for o in cluster.written if o["kind"] == "RoleBinding"]
    validate(sent)
    cluster.requests.clear()
    _submit_watched(backend, "three")  # bound right now: read, not written
    assert [m for m, p in cluster.requests if "/rolebindings/" in p] == ["GET"]


def test_another_tools_rolebinding_is_left_and_a_refused_repair_is_one_warning(backend, cluster, caplog):
    import logging

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    backend.create_volume("data", size="1Gi")
    _binding(cluster, [EDITOR], role="view", labels={"team": "vision"})  # not dtrain's: left as it is
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend, "one")
    assert _bound(cluster)["roleRef"]["name"] == "view"
    assert [m for m, p in cluster.requests if "/rolebindings/" in p] == ["GET"]
    (said,) = [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()]
    assert "not made by dtrain" in said and "submit leaves the RoleBinding as it is" in said
    # dtrain's, but this account may not update RoleBindings: one line names the fix, the job runs
    cluster.objects.pop((RBAC, "rolebindings", NS, "dtrain-snapshotter"))
    _binding(cluster, [EDITOR])
    cluster.fail("PUT", "/rolebindings/", 403, "no")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend, "two")
    (said,) = [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()]
    assert said.startswith(
        f"dtrain: warning: RoleBinding dtrain-snapshotter in namespace {NS}, labelled as made by dtrain, yet changed "
        f"since, does not bind ServiceAccount dtrain-snapshotter, so the snapshot watcher may not read the job or take "
        f"its snapshot, and this account may not update RoleBindings there (kubectl auth can-i update "
        f"rolebindings.rbac.authorization.k8s.io -n {NS}): ask its owner or an admin to run kubectl patch rolebinding")
    assert cluster.get("batch", "jobs", NS, "two")
    # a roleRef to put right, and this account may not delete RoleBindings: the two commands named
    cluster.objects.pop((RBAC, "rolebindings", NS, "dtrain-snapshotter"))
    _binding(cluster, [EDITOR], role="view")
    cluster.fail("DELETE", "/rolebindings/", 403, "no")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend, "three")
    (said,) = [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()]
    assert (", and this account may not delete RoleBindings there" in said
            and f"kubectl delete rolebinding dtrain-snapshotter -n {NS}, then kubectl create rolebinding "
                f"dtrain-snapshotter -n {NS} --role=dtrain-snapshotter" in said)
    assert _bound(cluster)["roleRef"]["name"] == "view"


def test_a_dry_run_shows_dtrains_changed_rolebinding_as_submit_repairs_it(backend, cluster, tmp_path, capsys):
    import yaml

    from test_k8s_render import validate
    from test_k8s_snapshotter_role import _dry_run_watched

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _binding(cluster, [EDITOR], role="view")
    out, _ = _dry_run_watched(backend, tmp_path, capsys)
    (note,) = [line for line in out.splitlines() if line.startswith("# RoleBinding ")]
    assert note == (f"# RoleBinding dtrain-snapshotter in namespace {NS}, labelled as made by dtrain, yet changed "
                    f"since, binds Role view, not Role dtrain-snapshotter: submit deletes it and makes it anew (a "
                    f"roleRef never changes), keeping its other subjects (shown below as repaired)")
    (shown,) = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "RoleBinding"]
    assert shown["roleRef"]["name"] == "dtrain-snapshotter" and shown["subjects"] == [EDITOR, WATCHER]
    validate(shown)
    assert [m for m, p in cluster.requests if "rolebindings" in p] == ["GET"]  # nothing sent


# --------------------------------------------------------------- the fake API server as the real one


def test_the_fake_applies_a_json_patch_to_arrays_as_rfc_6902_says(backend, cluster):
    """Reproduced: `/subjects/-` (the append the RoleBinding warning names) was stored as a member named
    '-', and an index into an array was refused."""
    from dtrain.backends.kubernetes.client import ROLE_BINDING
    from dtrain.errors import BackendError

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _binding(cluster, [EDITOR])
    other = {"kind": "User", "name": "alice", "apiGroup": RBAC}
    sent = backend.api.patch(ROLE_BINDING, NS, "dtrain-snapshotter", [
        {"op": "add", "path": "/subjects/-", "value": WATCHER},  # appended
        {"op": "add", "path": "/subjects/0", "value": other},  # inserted before the first
        {"op": "replace", "path": "/subjects/1/name", "value": "editor"}])  # a member of an element
    assert sent["subjects"] == [other, {**EDITOR, "name": "editor"}, WATCHER] == _bound(cluster)["subjects"]
    backend.api.patch(ROLE_BINDING, NS, "dtrain-snapshotter", [{"op": "remove", "path": "/subjects/0"}])
    assert _bound(cluster)["subjects"] == [{**EDITOR, "name": "editor"}, WATCHER]
    for bad in ({"op": "add", "path": "/subjects/3", "value": other},  # past the end: only '-' appends
                {"op": "remove", "path": "/subjects/-"}, {"op": "replace", "path": "/subjects/2", "value": other},
                {"op": "add", "path": "/subjects/01", "value": other}):
        with pytest.raises(BackendError, match="the cluster rejected the request to patch RoleBinding"):
            backend.api.patch(ROLE_BINDING, NS, "dtrain-snapshotter", [bad])
    assert _bound(cluster)["subjects"] == [{**EDITOR, "name": "editor"}, WATCHER]  # nothing applied


@pytest.mark.parametrize("how", [dict(launcher="none"), dict(launcher="torchrun", processes=2),
                                 dict(launcher="torchrun", processes=2, trainer="v2")],
                         ids=["Job", "PyTorchJob", "TrainJob"])
def test_the_fake_deletes_the_running_pods_of_a_suspended_job(make_backend, cluster, how):
    """Reproduced: a suspended job's pods stayed Running, where its controller deletes them."""
    how = dict(how)
    trainer = {"trainer": how.pop("trainer")} if "trainer" in how else {}
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, **trainer))
    backend.submit(spec(**how))
    backend.submit(spec(name="other", **how))
    cluster.run_pods(NS, "other")
    others = {p["metadata"]["name"] for p in cluster.items("", "pods", NS)}
    mine = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.set_pod_phase(NS, mine[0], "Succeeded")  # one that ended stays, as a finished pod does
    if how["launcher"] == "none":  # a batch Job's one pod: another running beside the one that ended
        mine += [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    assert len(mine) > 1
    backend.suspend("train")
    going = {p["metadata"]["name"] for p in cluster.items("", "pods", NS) if p["metadata"].get("deletionTimestamp")}
    assert going == set(mine[1:])  # deleted with their grace period (Terminating) ...
    cluster.finish_deletions()
    assert {p["metadata"]["name"] for p in cluster.items("", "pods", NS)} == {*others, mine[0]}  # ... then gone


def test_the_fake_terminates_a_deleted_namespace_with_what_it_holds(backend, cluster):
    """Reproduced: a namespace DELETE left its objects behind, listed and readable, in no namespace."""
    from dtrain.backends.kubernetes.client import NAMESPACE, POD, SERVICE_ACCOUNT
    from dtrain.spec import parse_pvc

    backend.submit(spec(volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    cluster.bind_volumes()
    cluster.run_pods(NS, "train")
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
    kept = cluster.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa",
                                                                                     "namespace": "elsewhere"}})
    answer = backend.api.delete(NAMESPACE, None, NS)
    assert answer["status"]["phase"] == "Terminating" and answer["metadata"]["deletionTimestamp"]
    assert [k for k in cluster.objects if k[2] == NS] == [] and backend.api.list(POD, NS) == []
    assert ("", "namespaces", "", NS) not in cluster.objects  # emptied, it goes
    assert cluster.get("", "serviceaccounts", "elsewhere", "sa") == kept
    # an object whose finalizer stays holds its namespace Terminating, and nothing new may be made there
    cluster.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "held", "namespace": "elsewhere", "finalizers": ["example.com/hold"]}})
    backend.api.delete(NAMESPACE, None, "elsewhere")
    assert cluster.get("", "namespaces", "", "elsewhere")["status"]["phase"] == "Terminating"
    assert cluster.get("", "serviceaccounts", "elsewhere", "held")["metadata"]["deletionTimestamp"]
    with pytest.raises(Forbidden, match='serviceaccounts "new" is forbidden: unable to create new content in '
                                        'namespace elsewhere because it is being terminated'):
        backend.api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "new", "namespace": "elsewhere"}}, SERVICE_ACCOUNT)
    cluster.get("", "serviceaccounts", "elsewhere", "held")["metadata"]["finalizers"] = []  # its owner lets go
    cluster.finish_deletions()
    assert [k for k in cluster.objects if "elsewhere" in k] == []
