"""SageMaker hyperparameters keep their JSON type, as the SageMaker Python SDK keeps it.

The SDK sends each value json.dumps'd (2 -> "2", True -> "true", "abc" -> '"abc"') and the training
toolkit json.loads each one back, so `SageMakerOptions(hyperparameters={"epochs": 2})` must reach the
script as the int 2 in SM_HPS, "2" in SM_HP_EPOCHS and `--epochs 2` in its arguments; it used to be
turned into the string "2" (sent as '"2"'). `--hp KEY=VALUE` reads VALUE as the toolkit reads a value
typed into the console: JSON where it parses, the text otherwise. A stored spec's strings stay strings.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import DTRAIN, Dtrain
from dtrain.backends.sagemaker import render
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.errors import SpecError
from dtrain.spec import JobSpec
from dtrain.spec_sagemaker import (MAX_HP_VALUE, MAX_HYPERPARAMETERS, HP_KEY_RE, SageMakerOptions,
                                   parse_hyperparameters)

CFG = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMakerRole", bucket="my-bucket", region="eu-west-1")
TYPED = {"epochs": 2, "amp": True, "lr": 0.001, "name": "abc", "tag": "2", "off": False}


def _spec(hps, command=("python", "train.py"), **sm) -> JobSpec:
    return JobSpec(name="hp", command=command, backend="sagemaker",
                   sagemaker=SageMakerOptions(hyperparameters=hps, **sm))


def _user(request: dict) -> dict:
    return {k: v for k, v in request["HyperParameters"].items() if not k.startswith("sagemaker_")}


# ---------------------------------------------------------------- the toolkit's reading, for the checks below

def toolkit_hps(file: dict) -> dict:
    """What the training toolkit makes of hyperparameters.json: each value json.loads'd, the raw
    string where that fails; its own sagemaker_* names left out of the user's."""
    out = {}
    for k, v in file.items():
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return {k: v for k, v in out.items() if not k.startswith("sagemaker_")}


def toolkit_env(hps: dict) -> dict:
    """SM_HP_<NAME>: a string as it is, anything else compact sorted JSON."""
    return {f"SM_HP_{k.upper()}": v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))
            for k, v in hps.items()}


def toolkit_args(hps: dict) -> list[str]:
    """The script's arguments: sorted names, `--name str(value)`."""
    return [a for k in sorted(hps) for a in (f"--{k}" if len(k) > 1 else f"-{k}", str(hps[k]))]


# ---------------------------------------------------------------- the spec and the request

def test_the_spec_keeps_json_types_and_the_request_carries_them_as_the_sdk_does():
    s = _spec(TYPED)
    assert dict(s.sagemaker.hyperparameters) == TYPED
    assert [type(v) for v in s.sagemaker.hyperparameters.values()] == [type(v) for v in TYPED.values()]
    req = render.training_job_request(s, CFG)
    pytest.importorskip("botocore")
    from dtrain.backends.sagemaker.validate import check_request
    check_request("sagemaker", "CreateTrainingJob", req)
    sent = _user(req)
    assert sent == {k: json.dumps(v) for k, v in TYPED.items()}  # the SDK's _json_encode_hyperparameters
    assert (sent["epochs"], sent["amp"], sent["name"], sent["tag"]) == ("2", "true", '"abc"', '"2"')
    assert toolkit_hps(req["HyperParameters"]) == TYPED  # the script sees the types it was given


def test_a_stored_spec_of_an_older_job_keeps_its_strings():
    """Specs stored before hyperparameters kept their type hold strings: they read back as strings
    and render as those jobs were sent."""
    old = {"name": "old", "command": ["python", "train.py"], "backend": "sagemaker",
           "sagemaker": {"hyperparameters": {"epochs": "2", "amp": "True"}, "local": True}}
    s = JobSpec.from_stored(json.loads(json.dumps(old)))
    assert dict(s.sagemaker.hyperparameters) == {"epochs": "2", "amp": "True"}
    assert _user(render.training_job_request(s, CFG)) == {"epochs": '"2"', "amp": '"True"'}
    assert JobSpec.from_stored(json.loads(json.dumps(s.to_dict()))) == s


def test_the_bounds_are_botocores():
    botocore = pytest.importorskip("botocore.session")
    shape = botocore.get_session().get_service_model("sagemaker").shape_for("HyperParameters")
    assert (MAX_HYPERPARAMETERS, MAX_HP_VALUE) == (shape.metadata["max"], shape.value.metadata["max"])
    assert HP_KEY_RE.match("k" * shape.key.metadata["max"]) and not HP_KEY_RE.match("k" * (shape.key.metadata["max"] + 1))


@pytest.mark.parametrize("hps, says", [
    ({"ids": [1, 2]}, "invalid sagemaker hyperparameter ids value [1, 2]: use a string, a number or true/false"),
    ({"cfg": {"a": 1}}, "invalid sagemaker hyperparameter cfg value {'a': 1}: use a string"),
    ({"seed": None}, "invalid sagemaker hyperparameter seed value None: use a string, a number or true/false; "
                     "leave seed out"),
    ({"lr": float("nan")}, "invalid sagemaker hyperparameter lr value nan: JSON has no nan"),
    ({"prompt": "x" * (MAX_HP_VALUE - 1)}, f"sagemaker hyperparameter prompt is {MAX_HP_VALUE + 1} characters as "
                                           f"the request carries it (JSON-encoded), more than SageMaker's {MAX_HP_VALUE}"),
    ({"big": 10 ** 5000}, f"sagemaker hyperparameter big is over {MAX_HP_VALUE} characters"),
    ({f"k{i}": i for i in range(MAX_HYPERPARAMETERS + 1)}, f"{MAX_HYPERPARAMETERS + 1} sagemaker hyperparameters are "
                                                            f"more than SageMaker's {MAX_HYPERPARAMETERS}"),
    ({"bad key": 1}, "invalid sagemaker hyperparameter name 'bad key'"),
])
def test_what_sagemaker_cannot_carry_is_refused_in_one_line(hps, says):
    with pytest.raises(SpecError) as err:
        SageMakerOptions(hyperparameters=hps)
    assert str(err.value).startswith(says) and "\n" not in str(err.value), str(err.value)


def test_the_value_fits_as_the_request_carries_it():
    s = _spec({"prompt": "x" * (MAX_HP_VALUE - 2)})  # 2500 with its quotes: SageMaker's most
    req = render.training_job_request(s, CFG)
    assert len(req["HyperParameters"]["prompt"]) == MAX_HP_VALUE


def test_hp_flags_read_values_as_the_toolkit_reads_a_typed_in_value():
    got = parse_hyperparameters(["epochs=2", "amp=true", "lr=1e-3", "name=abc", 'tag="2"', "empty=", "n=NaN"])
    assert got == {"epochs": 2, "amp": True, "lr": 0.001, "name": "abc", "tag": "2", "empty": "", "n": "NaN"}
    assert type(got["epochs"]) is int and type(got["amp"]) is bool
    for text in ("ids=[1,2]", "x=null", 'o={"a":1}'):
        with pytest.raises(SpecError, match=r"a hyperparameter is a string, a number or true/false; to pass this "
                                            r"text as a string, quote it as JSON: --hp '"):
            parse_hyperparameters([text])


def test_yaml_and_the_flags_give_the_same_spec(tmp_path):
    (tmp_path / "job.yaml").write_text("name: hp\ncommand: [python, train.py]\nbackend: sagemaker\nsagemaker:\n"
                                       "  local: true\n  hyperparameters: {epochs: 2, amp: true, name: abc, tag: '2'}\n")
    (tmp_path / "train.py").write_text("")
    d = Dtrain(tmp_path / "home")
    (tmp_path / "home").mkdir()
    from_file = d("submit", "-f", str(tmp_path / "job.yaml"), "--dry-run", cwd=str(tmp_path)).stdout
    from_flags = d("submit", "hp", "--backend", "sagemaker", "--local", "--hp", "epochs=2", "--hp", "amp=true",
                   "--hp", "name=abc", "--hp", 'tag="2"', "--dry-run", "--", "python", "train.py",
                   cwd=str(tmp_path)).stdout
    assert from_file == from_flags
    assert '"epochs": "2"' in from_flags and '"amp": "true"' in from_flags and '"tag": "\\"2\\""' in from_flags


# ---------------------------------------------------------------- --local: what the script receives

SCRIPT = """import json, os, sys
print("GOT " + json.dumps({"hps": json.loads(os.environ["SM_HPS"]),
                          "env": {k: v for k, v in os.environ.items() if k.startswith("SM_HP_")},
                          "argv": sys.argv[1:],
                          "file": json.load(open("/opt/ml/input/config/hyperparameters.json"))}), flush=True)
"""


def test_a_local_job_gets_what_the_toolkit_gives_for_the_sdks_request(home, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    d = Dtrain(home, env={"OMP_NUM_THREADS": "1"})
    d("config", "backend", "sagemaker")
    try:
        d("submit", "hpl", "--backend", "sagemaker", "--local", "--hp", "epochs=2", "--hp", "amp=true",
          "--hp", "lr=0.5", "--hp", "name=abc", "--hp", 'tag="2"', "--", "python", "train.py", "--batch-size", "8",
          cwd=str(tmp_path))
        assert d("wait", "hpl", "--timeout", "120", check=False).returncode == 0, d("logs", "hpl").stdout
        [line] = [ln for ln in d("logs", "hpl").stdout.splitlines() if ln.startswith("GOT ")]
    finally:
        d("delete", "hpl", check=False)
    got = json.loads(line[4:])
    file = got["file"]  # the request's values, as SageMaker writes them: the SDK's JSON strings
    assert {k: v for k, v in file.items() if not k.startswith("sagemaker_")} == {
        "epochs": "2", "amp": "true", "lr": "0.5", "name": '"abc"', "tag": '"2"', "batch-size": '"8"'}
    hps = toolkit_hps(file)
    assert got["hps"] == hps == {"epochs": 2, "amp": True, "lr": 0.5, "name": "abc", "tag": "2", "batch-size": "8"}
    assert got["env"] == toolkit_env(hps) and got["env"]["SM_HP_AMP"] == "true"
    assert got["argv"] == toolkit_args(hps)
    assert got["argv"][:2] == ["--amp", "True"]  # Python's str of the decoded bool, as on SageMaker


# ---------------------------------------------------------------- the HTTP API

def test_the_http_api_keeps_the_types_and_refuses_as_the_cli_does(home, tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from dtrain import Client
    from server_util import local_api

    (tmp_path / "train.py").write_text("")
    Dtrain(home)("config", "backend", "sagemaker")
    with local_api(home) as http:
        body = {"name": "hpa", "command": ["python", "train.py"], "backend": "sagemaker",
                "sagemaker": {"local": True, "source_dir": str(tmp_path), "hyperparameters": TYPED}}
        r = http.post("/api/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["sagemaker"]["hyperparameters"] == TYPED
        got = http.get("/api/v1/jobs/hpa")
        assert got.status_code == 200, got.text
        back = got.json()["spec"]["sagemaker"]["hyperparameters"]
        assert back == TYPED and [type(v) for v in back.values()] == [type(v) for v in TYPED.values()]
        bad = {**body, "name": "hpb", "sagemaker": {**body["sagemaker"], "hyperparameters": {"ids": [1, 2]}}}
        r = http.post("/api/v1/jobs", json=bad)
        assert r.status_code == 422, r.text
        api_error = r.json()["error"]
        Client(home=home).wait("hpa", timeout=120)
    (tmp_path / "job.yaml").write_text(json.dumps(bad))
    cli = subprocess.run([DTRAIN, "submit", "-f", str(tmp_path / "job.yaml")], capture_output=True, text=True,
                         env={**os.environ, "DTRAIN_HOME": str(home)}, cwd=tmp_path, timeout=120)
    assert cli.returncode == 2 and cli.stderr.strip() == f"dtrain: error: {api_error}", (cli.stderr, api_error)
