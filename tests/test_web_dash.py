"""The dashboard walked as a Run:AI user would, in a real browser: a failed job whose command holds a long
word, and a finished job whose volume was deleted since."""

from __future__ import annotations

import pytest

from server_util import ServerProcess, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
browser_tests = pytest.importorskip("test_dashboard_browser")
pytestmark = browser_tests.pytestmark  # slow; chromium needed
text_of = browser_tests.text_of

SIDEWAYS = "return document.documentElement.scrollWidth - document.documentElement.clientWidth"


def test_a_long_command_word_wraps_in_the_spec_card_rather_than_widening_the_page(home, tmp_path):
    """The Spec card's <pre> wrapped only at spaces: a 400-character word in a failed job's command widened the
    page, and the whole job page scrolled sideways to read it."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "fails", "--", "sh", "-c", "echo " + "x" * 400 + " >&2; exit 3")
        dt.wait_for("fails", {"Failed"})
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/fails")
            wait_until(lambda: "x" * 400 in text_of(browser, "#job-spec"), what="the job's spec")
            assert text_of(browser, "#job-status") == "Failed"
            assert browser.execute_script(SIDEWAYS) == 0
    finally:
        server.stop()


def test_a_finished_jobs_volume_deleted_since_has_a_disabled_snapshot_button_that_says_so(home, tmp_path):
    """A finished job's page offered "Snapshot data" for a volume deleted after the job ran: pressing it could only
    be refused (404 no volume named 'data'). Its button is disabled and says the volume was deleted; a volume
    still there keeps its working button."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("volume", "create", "data", "--size", "10Mi")
        dt("volume", "create", "kept", "--size", "10Mi")
        dt("submit", "used-data", "--pvc", "data:/data", "--pvc", "kept:/kept", "--", "true")
        dt.wait_for("used-data", {"Succeeded"})
        dt("volume", "delete", "data")
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/used-data")
            wait_until(lambda: text_of(browser, "#job-status") == "Succeeded", what="the job's page")
            wait_until(lambda: browser.execute_script("return document.querySelectorAll('button.snapshot').length")
                       == 2, what="the Snapshot buttons")
            buttons = browser.execute_script("return [...document.querySelectorAll('button.snapshot')]"
                                             ".map(b => [b.dataset.volume, b.textContent, b.disabled])")
            assert buttons == [["data", "Snapshot data (deleted)", True], ["kept", "Snapshot kept", False]]
    finally:
        server.stop()


def test_the_jobs_table_says_why_a_pending_job_waits(home, tmp_path):
    """A Pending job's reason ("waiting: needs 1 GPU, 0 free") was only on its own page: the Jobs table, where a
    Run:AI user looks for it, said "Pending" alone. It says why under the status, and every row's message on hover."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "1"}, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "holds", "--gpu", "1", "--", "sleep", "120")
        dt.wait_for("holds", {"Running"})
        dt("submit", "waits", "--gpu", "1", "--", "true")
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/jobs")
            cell = "tr[data-job='waits'] td.status"
            wait_until(lambda: text_of(browser, cell).startswith("Pending"), what="the jobs table")
            message = server.http.get("/api/v1/jobs/waits").json()["message"]
            assert message.startswith("waiting: needs 1 GPU")
            assert text_of(browser, cell) == "Pending\n" + message
            assert browser_tests.attrs_of(browser, cell, "title") == [message]
            assert text_of(browser, "tr[data-job='holds'] td.status") == "Running"  # no line under a running job
    finally:
        server.stop()


def test_the_pages_write_sizes_as_the_cli_does(home, tmp_path):
    """The pages wrote "3.0 GiB / 80.0 GiB" and "0 B" where the CLI writes sizes as volumes are given (3Gi, 80Gi,
    0B: cli/format.py's `size`): the page's formatter now gives the CLI's text for every size, 1280 bytes as 1.2Ki
    (Python rounds a tie to the even digit) and 1023.96Mi as 1Gi."""
    from dtrain.cli.format import size

    sizes = [None, 0, 1, 512, 1023, 1024, 1075, 1280, 1536, 2047, 2**20 - 52, 2**20 - 51, 2**20, 3 * 2**30,
             int(1023.96 * 2**20), 80 * 2**30, 5 * 2**40 + 2**39, 2**50, 2**60, 2**62]
    sizes += [(7 ** k) % 2**50 for k in range(1, 200)]
    server = ServerProcess(home, cwd=tmp_path)
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            wait_until(lambda: browser.execute_script("return typeof size === 'function'"), what="the page's script")
            shown = browser.execute_script("return arguments[0].map(size)", sizes)
        assert shown[:6] == ["-", "0B", "1B", "512B", "1023B", "1Ki"] and "3Gi" in shown and "80Gi" in shown
        assert shown == [size(n) for n in sizes]
    finally:
        server.stop()


def test_two_gpus_held_at_once_are_each_seen_on_the_held_or_free_chart(home, tmp_path):
    """The nodes page drew each GPU's held (1) or free (0) as a line on one chart: with GPU 0 and GPU 1 both held the
    two lines lay on each other and only one colour showed. Each GPU has its own row now, held drawn in its colour."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "two-gpus", "--gpu", "2", "--", "sleep", "300")
        dt.wait_for("two-gpus", {"Running"})
        wait_until(lambda: {s["gpu"] for s in server.http.get("/api/v1/nodes/history").json() if s["held"]} == {"0", "1"},
                   what="a sample with both GPUs held")
        chart = """const card = [...document.querySelectorAll('.node .card')]
                     .find(c => c.querySelector('h2').innerText.startsWith('Held or free'));
                   const svg = card && card.querySelector('svg');
                   return svg ? {label: svg.getAttribute('aria-label'), rows: [...svg.querySelectorAll('text')]
                     .map(t => t.textContent).filter(t => t.startsWith('GPU ')), held: [...svg.querySelectorAll('rect.held')]
                     .map(r => [r.getAttribute('fill'), r.getBBox().y, r.getBBox().height])} : null;"""
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/nodes")
            wait_until(lambda: (browser.execute_script(chart) or {}).get("held"), what="a held bar on the chart")
            drawn = browser.execute_script(chart)
        assert drawn["rows"] == ["GPU 0", "GPU 1"]
        assert drawn["label"].endswith("newest GPU 0: held, GPU 1: held"), drawn["label"]
        bands = {fill: (y, y + height) for fill, y, height in drawn["held"]}
        assert len(bands) == 2, drawn["held"]  # a colour each
        (top0, bottom0), (top1, bottom1) = sorted(bands.values())
        assert bottom0 <= top1  # one row each: neither bar hides the other
    finally:
        server.stop()


def test_the_storage_page_marks_a_deleted_volume_and_snapshot_as_the_cli_does(home, tmp_path):
    """`snapshot list` says VOLUME 'data (deleted)' and `volume list` FROM SNAPSHOT 's1 (deleted)'; the page left the
    marks in the records' `extra` (as `--json` and the API have them) and showed 'data' and 's1' as if still there."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("volume", "create", "data", "--size", "10Mi")
        dt("snapshot", "create", "data", "--name", "s1")
        dt("snapshot", "create", "data", "--name", "kept")
        dt("snapshot", "restore", "s1", "--to", "copy")
        dt("submit", "j", "--pvc", "copy:/mnt", "--snapshot-on-success", "copy", "--", "true")
        dt.wait_for("j", {"Succeeded"})
        dt("delete", "j", "--purge")
        dt("volume", "delete", "data")
        dt("snapshot", "delete", "s1")
        assert [r.split()[5:7] for r in dt("volume", "list").stdout.splitlines()[1:]] == [["s1", "(deleted)"]]
        listed = dt("snapshot", "list").stdout
        assert sorted(r.split()[1:6] for r in listed.splitlines()[1:]) == [
            ["copy", "j", "(deleted)", "s1", "(deleted)"], ["data", "(deleted)", "-", "-", "0"]], listed
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            wait_until(lambda: "kept" in text_of(browser, "#snapshots-table"), what="the snapshots")
            wait_until(lambda: "j (deleted)" in text_of(browser, "#snapshots-table"), what="the job's snapshot")
            rows = ("return [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
                    ".map(r => [[...r.cells].map(c => c.textContent), !!r.querySelector('a')])")
            volumes = browser.execute_script(rows, "#volumes-table")
            snapshots = {cells[0]: (cells[1:4], linked) for cells, linked in browser.execute_script(rows, "#snapshots-table")}
        assert [(cells[0], cells[5]) for cells, _ in volumes] == [("copy", "s1 (deleted)")], volumes
        assert snapshots.pop("kept") == (["data (deleted)", "-", "-"], False), snapshots
        [(cells, linked)] = snapshots.values()  # the purged job's: no page to link to
        assert (cells, linked) == (["copy", "j (deleted)", "s1 (deleted)"], False), snapshots
    finally:
        server.stop()
