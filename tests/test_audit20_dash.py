"""Audit 20, the dashboard: GPU figures matched to jobs by name alone (two jobs of one name shared them), a job's
"- / -" where its node reports no GPU figures, a Projects table that could not tell config.yaml's default, and a
volume Delete that never forced."""

from __future__ import annotations

import pytest
import yaml

from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from server_util import ServerProcess, wait_until

browser_tests = pytest.importorskip("test_dashboard_browser")
text_of, attrs_of = browser_tests.text_of, browser_tests.attrs_of
in_browser = browser_tests.in_browser
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from test_k8s_backend import IMAGE, NS  # noqa: E402

# each Jobs row's project and its GPU utilisation and memory cells (rows are found by name, which both share)
ROWS = ("return [...document.querySelectorAll(\"#jobs-table tr[data-job='train']\")].map(r => "
        "[r.children[3].innerText, r.querySelector('td.gpu-util').innerText, r.querySelector('td.gpu-memory').innerText])")


@in_browser
def test_two_jobs_of_one_name_on_two_backends_each_show_their_own_gpus(home, tmp_path, monkeypatch):
    """Samples (of the default backend's nodes) were matched to jobs by name: a Kubernetes job `train` of project
    lanes showed the GPU figures of the local `train` beside it (42% of a stand-in NVML). Each shows its own now, in
    the Jobs table and on its page: a job is its backend, project and name."""
    from test_audit6_dash import nvml_env

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    cluster = FakeCluster()
    cluster.add_node("gpu-1", gpus=1)
    kube = FakeKubeServer(cluster).start()
    kube.write_kubeconfig(tmp_path / "kubeconfig")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"project_backends": {"lanes": "kubernetes"}, "kubernetes": {
        "kubeconfig": str(tmp_path / "kubeconfig"), "image": IMAGE}}))
    server = ServerProcess(home, env=nvml_env(tmp_path), cwd=tmp_path)
    try:
        http = server.http
        for project in ("default", "lanes"):
            r = http.post("/api/v1/jobs", json={"name": "train", "command": ["sleep", "300"], "gpu": 1,
                                                "project": project})
            assert r.status_code == 201, r.text
        cluster.run_pods(NS, "train", nodes=("gpu-1",))
        wait_until(lambda: {(j["backend"], j["status"], j["gpus_allocated"]) for j in http.get("/api/v1/jobs").json()}
                   == {("local", "Running", 1), ("kubernetes", "Running", 1)}, what="both jobs running on a GPU")
        wait_until(lambda: any(s["job"] == "train" for s in http.get("/api/v1/nodes/history").json()),
                   what="a sample of the local job's GPU")
        want = {"default": ("42%", "3Gi / 80Gi"), "lanes": ("-", "-")}
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/jobs")

            def shown():
                return {p: (u, m) for p, u, m in browser.execute_script(ROWS)}
            wait_until(lambda: shown() == want, what=f"each job's own GPU use {want}")
            browser.get(server.url + "/#/job/train?project=default")
            wait_until(lambda: text_of(browser, "#job-gpu-now") == "42% / 3Gi / 80Gi", what="its GPU use now")
            browser.get(server.url + "/#/job/train?project=lanes")
            wait_until(lambda: text_of(browser, "#job-gpu-now") == "- (not sampled)", what="the other's")
            browser_tests.no_errors(browser)
    finally:
        server.stop()
        kube.close()


@in_browser
def test_a_job_on_a_node_reporting_no_gpu_figures_says_so(home, tmp_path):
    """A job holding injected GPUs (as a node without NVML) read '- / -' on its page, as if it were not sampled; it
    says its node reports no figures now. A CPU job still reads that it holds no GPU."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        http = server.http
        for name, gpu in (("on-gpu", 1), ("cpu-only", 0)):
            r = http.post("/api/v1/jobs", json={"name": name, "command": ["sleep", "300"], "gpu": gpu})
            assert r.status_code == 201, r.text
        wait_until(lambda: [j["status"] for j in http.get("/api/v1/jobs").json()] == ["Running"] * 2,
                   what="both jobs running")
        wait_until(lambda: any(s["job"] == "on-gpu" for s in http.get("/api/v1/nodes/history").json()),
                   what="a sample of its GPU")
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/on-gpu")
            wait_until(lambda: text_of(browser, "#job-gpu-now") == "no GPU figures: this job's node reports none",
                       what="why it has no GPU figures")
            browser.get(server.url + "/#/job/cpu-only")
            wait_until(lambda: text_of(browser, "#job-gpu-now") == "- (no GPU held)", what="a CPU job's GPU use")
            browser_tests.no_errors(browser)
    finally:
        server.stop()


@in_browser
def test_the_projects_table_marks_config_yamls_default_project_and_offers_no_delete_for_it(home, tmp_path):
    """The page could not tell which project config.yaml makes the default, so it offered a Delete the server
    refuses; that project is marked, its Delete disabled with the server's reason, and the API says `default`."""
    server = ServerProcess(home, cwd=tmp_path)
    dt = server.dtrain()
    try:
        dt("project", "create", "lanes")
        dt("project", "create", "other")
        dt("project", "set", "lanes")
        refused = server.http.delete("/api/v1/projects/lanes")
        assert refused.status_code == 409, refused.text
        flags = {p["name"]: p["default"] for p in server.http.get("/api/v1/projects").json()}
        assert flags == {"default": False, "lanes": True, "other": False}, flags
        assert server.http.get("/api/v1/projects/lanes").json()["default"] is True
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/projects")
            button = "tr[data-project='{}'] button.delete-project"
            wait_until(lambda: attrs_of(browser, button.format("lanes"), "disabled") == [""], what="lanes' Delete off")
            [title] = attrs_of(browser, button.format("lanes"), "title")
            assert title == refused.json()["error"]  # the server's own reason
            assert attrs_of(browser, button.format("other"), "disabled") == [None]
            marks = attrs_of(browser, "#projects-table tr[data-project]", "data-project", ".default-project")
            assert marks == [["default", ""], ["lanes", "(default)"], ["other", ""]], marks
            browser_tests.no_errors(browser)
    finally:
        server.stop()


@in_browser
def test_a_volume_delete_refused_for_a_job_using_it_offers_the_force_quoting_the_refusal(home, tmp_path):
    """The volume Delete never forced: a volume a running job uses was refused and could be deleted from the CLI
    only (`dtrain volume delete --force`). The refusal, verbatim, is now asked about in a second confirm that forces."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        http = server.http
        assert http.post("/api/v1/volumes", json={"name": "scratch", "size": "1Gi"}).status_code == 201
        r = http.post("/api/v1/jobs", json={"name": "uses-it", "command": ["sleep", "300"], "volumes": ["scratch:/mnt"]})
        assert r.status_code == 201, r.text
        wait_until(lambda: http.get("/api/v1/jobs/uses-it").json()["status"] == "Running", what="the job running")
        refused = http.delete("/api/v1/volumes/scratch")  # nothing changes by asking
        assert refused.status_code == 409 and "--force" in refused.json()["error"], refused.text
        with browser_tests.chrome() as browser:
            wait = WebDriverWait(browser, 30)
            browser.get(server.url + "/#/storage")
            wait_until(lambda: text_of(browser, "tr[data-volume='scratch']"), what="the volume's row")
            browser_tests.click(browser, "tr[data-volume='scratch'] button.delete-volume")
            first = wait.until(expected_conditions.alert_is_present())
            assert first.text.startswith("Delete volume scratch?"), first.text
            first.accept()
            second = wait.until(expected_conditions.alert_is_present())
            assert second.text.startswith(refused.json()["error"] + "\n"), second.text
            assert "--force" in second.text.splitlines()[-1]
            second.accept()
            wait_until(lambda: text_of(browser, "#snapshot-message") == "Volume scratch deleted.", what="it went")
            assert "scratch" not in [v["name"] for v in http.get("/api/v1/volumes").json()]
            browser_tests.no_errors(browser, but="409 (Conflict)")  # the refusal asked about
    finally:
        server.stop()


# each match's text height over its line height: 1 for one line
LINES = ("return [...document.querySelectorAll(arguments[0])].map(e => { const s = getComputedStyle(e);"
         " return [e.innerText, (e.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom))"
         " / parseFloat(s.lineHeight)]; })")


@in_browser
def test_the_jobs_table_headers_and_a_jobs_labels_are_one_line_in_a_1280_px_window(home, tmp_path):
    """The Jobs table's headers wrapped (four lines) below a 1400 px window and the job head's requests label below
    1400 px; at 1280 px each is one line, and the table's buttons stay in the window."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        for name, command in (("train", ["sleep", "300"]), ("done", ["true"])):
            r = server.http.post("/api/v1/jobs", json={"name": name, "command": command, "cpu": 1, "memory": "1Gi"})
            assert r.status_code == 201, r.text
        with browser_tests.chrome() as browser:
            browser.set_window_size(1280, 1000)
            assert browser.execute_script("return window.innerWidth") == 1280
            browser.get(server.url + "/#/jobs")
            wait_until(lambda: attrs_of(browser, "tr[data-job='train'] button.danger", "class"), what="the rows")
            headers = browser.execute_script(LINES, "#jobs-table th")
            assert len(headers) == 11 and all(abs(lines - 1) < 0.1 for _, lines in headers), headers
            fits = browser.execute_script("""const width = document.documentElement.clientWidth;
                return [document.documentElement.scrollWidth <= width,
                        [...document.querySelectorAll('#jobs-table button')].every(b => b.getBoundingClientRect().right <= width)];""")
            assert fits == [True, True]
            browser.get(server.url + "/#/job/train")
            wait_until(lambda: text_of(browser, "#job-requests") == "1 / 1Gi", what="its requests")
            labels = browser.execute_script(LINES, "#job-head .kv > div:nth-child(odd)")
            assert labels and all(abs(lines - 1) < 0.1 for _, lines in labels), labels
    finally:
        server.stop()
