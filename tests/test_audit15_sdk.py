"""The SDK as a notebook user meets it (audit 15): an argument of the wrong type (a list, a Path, a
number, bytes, None where names are asked for) is one SpecError line naming it, never a TypeError,
a ValueError or sqlite3's error from inside; every public verb says what it does to help()."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import dtrain
from dtrain.errors import SpecError


@pytest.mark.parametrize("project", [["team-a"], {"team-a": 1}, Path("default"), 5])
@pytest.mark.parametrize("verb", ["list", "page", "summary", "list_notebooks", "list_volumes", "has_project",
                                  "check_project", "create_project", "backend"])
def test_a_project_that_is_not_a_name_is_a_spec_error(home, verb, project):
    """list(project=['team-a']) was a TypeError (unhashable type: 'list'), page(project=Path(...))
    sqlite3's ProgrammingError."""
    client = dtrain.Client(home=home)
    call = {"has_project": lambda: client.has_project(project), "check_project": lambda: client.check_project(project),
            "create_project": lambda: client.create_project(project)}.get(verb)
    with pytest.raises(SpecError, match=r"^invalid project name .*: use 1-53 lower-case") as err:
        (call or (lambda: getattr(client, verb)(project=project)))()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("backend", [["local"], {"local": 1}, Path("local")])
def test_a_backend_that_is_not_a_name_is_a_spec_error(home, backend):
    with pytest.raises(SpecError, match=r"^unknown backend .*; use one of local, kubernetes, sagemaker$"):
        dtrain.Client(home=home, backend=backend)
    with pytest.raises(SpecError, match=r"^unknown backend .*; use one of local, kubernetes, sagemaker$"):
        dtrain.Client(home=home).backend(backend)


@pytest.mark.parametrize("names", [5, None, 1.5, Path("fast"), b"fast", [["fast"]], {"fast": 1}.items()])
def test_lists_of_names_of_another_type_are_spec_errors(home, names):
    """unset=None, unset=5 were TypeErrors ('NoneType' object is not iterable), unset=b'vpc' a
    TypeError from inside difflib, mounting=5 one from frozenset()."""
    client = dtrain.Client(home=home)
    calls = [lambda: client.configure_sagemaker(unset=names), lambda: client.configure_kubernetes(unset=names),
             lambda: client.configure_node_labels(unset=names), lambda: client.unset_storage_classes(names),
             *([lambda: client.volume_jobs(mounting=names)] if names is not None else [])]  # None: every job
    for call in calls:
        with pytest.raises(SpecError, match=r"^invalid (unset|storage class names|mounting) .*: give a name or a "
                                            r"list of names, e.g. "):
            call()
    assert not (home / "config.yaml").exists() or "sagemaker" not in (home / "config.yaml").read_text()


def test_one_name_is_taken_where_a_list_of_names_is(home):
    client = dtrain.Client(home=home)
    client.configure_node_labels({"gpu-type": "a100", "zone": "a"})
    assert client.configure_node_labels(unset="zone").settings == {"gpu-type": "a100"}
    assert client.volume_jobs(mounting="data").total == 0


@pytest.mark.parametrize("labels", ["gpu-type=a100", ["gpu-type"], 5])
def test_node_labels_that_are_not_a_mapping_are_a_spec_error(home, labels):
    """'gpu-type=a100' was a ValueError (dictionary update sequence element #0 has length 1)."""
    with pytest.raises(SpecError, match=r"^invalid node labels .*: give a mapping of label to value"):
        dtrain.Client(home=home).configure_node_labels(labels)


def test_a_node_label_value_that_is_no_string_names_the_argument_to_write(home):
    """configure_node_labels({"gpu": 8}) said "must be a string, e.g. None={'gpu': '8'}": no argument is None."""
    with pytest.raises(SpecError) as refused:
        dtrain.Client(home=home).configure_node_labels({"gpu": 8})
    assert str(refused.value) == ("invalid value 8 of node label gpu: must be a string, e.g. labels={'gpu': '8'}; "
                                  "nothing was changed")


def test_a_storage_class_name_that_is_not_a_name_is_a_spec_error(home, tmp_path):
    with pytest.raises(SpecError, match=r"^storage class \['fast'\]: use a lower-case name"):
        dtrain.Client(home=home).set_storage_class(["fast"], tmp_path)
    assert not (home / "config.yaml").exists() or "fast" not in (home / "config.yaml").read_text()



def test_every_public_verb_of_the_client_has_a_docstring():
    """help(Client.create_volume), get_volume, create_snapshot, ... showed only the signature."""
    missing = [name for name, member in inspect.getmembers(dtrain.Client)
               if not name.startswith("_") and (callable(member) or isinstance(member, property))
               and not inspect.getdoc(member.fget if isinstance(member, property) else member)]
    assert missing == []


@pytest.mark.parametrize("word", ["Done", "succeeded", 5, None, ["Running"]])
def test_a_job_status_made_from_a_word_it_is_not_is_a_spec_error_naming_the_statuses(word):
    """JobStatus('Done') was enum's bare ValueError ('Done' is not a valid JobStatus); a ValueError still."""
    with pytest.raises(SpecError, match=r"^invalid status .*: use one of Pending, Running, Succeeded, Failed, "
                                        r"Deleted, Suspended$"):
        dtrain.JobStatus(word)
    assert dtrain.JobStatus("Running") is dtrain.JobStatus.RUNNING


@pytest.mark.parametrize("items", [5, 1.5, Path("env.txt"), True, b"A=1"])
def test_parse_env_of_something_that_is_no_list_is_a_spec_error(items):
    """parse_env(5) was a TypeError ('int' object is not iterable)."""
    with pytest.raises(SpecError, match=r"^invalid -e list .*: give a list of KEY=VALUE strings"):
        dtrain.parse_env(items)
    assert dtrain.parse_env(["A=1", "A=2"]) == {"A": "2"} and dtrain.parse_env(None) == {}


def test_a_log_stream_prints_what_it_is_and_how_to_read_it(home):
    """client.logs(name) in a notebook cell printed <dtrain.backends.logstream.LogStream object at 0x...>."""
    client = dtrain.Client(home=home)
    client.submit(dtrain.JobSpec(name="hello", command=["python", "-c", "print('hi')"]))
    assert client.wait("hello", timeout=120).status == dtrain.JobStatus.SUCCEEDED
    stream = client.logs("hello")
    assert repr(stream) == ("<LogStream of job 'hello': an iterator of LogLine(rank, time, text), read with list() "
                            "or a for loop; 0 notices so far>")
    assert [line.text for line in stream] == ["hi"]


def test_exec_of_a_command_that_is_no_list_of_words_is_a_spec_error(home):
    """exec(name, 5) was a TypeError ('int' object is not iterable); exec(name, {'ls': 1}) ran `ls`."""
    client = dtrain.Client(home=home)
    client.submit(dtrain.JobSpec(name="sleeper", command=["sleep", "60"]))
    try:
        for command in (5, Path("/bin/true"), {"true": 1}, "true", [Path("/bin/true")]):
            with pytest.raises(SpecError, match=r"^invalid command .*: exec needs a command as a list of its words"):
                client.exec("sleeper", command, running_timeout=60)
        assert client.get("sleeper").status.suspendable  # Pending or Running still: refused, not run
    finally:
        client.delete("sleeper")
