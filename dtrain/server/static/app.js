// The dashboard: one page, hash routes (#/jobs, #/job/NAME[?project=P], #/notebooks, #/projects, #/nodes, #/storage[?project=P],
// #/submit).
// Every value shown comes from /api/v1 and is put in the page as text, never as HTML.
"use strict";

// Relative to the page's address, as index.html's files: behind a path prefix (kubectl proxy's /api/v1/namespaces/
// NS/services/dtrain:8000/proxy/, an ingress at /dtrain/) an absolute /api/v1 left the prefix and reached another server's path.
const API = "api/v1";
const REFRESH_MS = 2000;
const BACKOFF_MAX_MS = 30000;  // a failing poll waits twice as long each time, up to this
const ANSWER_MS = 30000;  // a read the server has not answered in this long is given up (and retried)
const POD_RETRY_MS = 3000;  // a log stream refused as not found (no pod yet) is opened again this often
const LOG_LINES = 5000;  // the log pane keeps the newest lines only: a chatty job must not fill the tab's memory
const PAGE_SIZE = 50;  // jobs a page of the Jobs table asks for: the server answers thousands in one list slowly
const LAST_PAGE = 200000;  // the API takes offsets up to 10,000,000 (wire.MAX_OFFSET)
let view = 0;  // bumped by route(): a poll of an earlier page draws nothing and schedules nothing
let timers = [];  // {id} of this page's pending setTimeouts: route() clears them
let reads = new Set();  // the AbortControllers of this page's reads: route() cancels them
let stream = null;
let streamSuspended = false;  // the log stream ended at a suspension: the job page follows the job again once it runs
let follows = 0;  // bumped by follow(): a reopen scheduled for another rank's stream does nothing
let jobEnded = false;  // the job page's last read found its job ended: a log stream that fails now is not retried

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick" || k === "onsubmit" || k === "onchange") el[k] = v;
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, opts) {
  return (await request(path, opts)).body;
}

async function request(path, opts) {
  // {body, headers} of one call. A read (GET) is cancelled when the page changes, and given up after ANSWER_MS:
  // a server that accepted the connection and never answers would otherwise hold the page's polling for ever.
  const read = !opts || !opts.method || opts.method === "GET";
  const ctl = new AbortController();
  let late = false;
  const timer = read ? setTimeout(() => { late = true; ctl.abort(); }, ANSWER_MS) : null;
  if (read) reads.add(ctl);
  let resp;
  try {
    resp = await fetch(API + path, Object.assign({credentials: "same-origin", signal: ctl.signal}, opts || {}));
  } catch (e) {
    if (late) throw new Error(`the server did not answer ${path.split("?")[0]} in ${ANSWER_MS / 1000}s; retrying`);
    if (e.name === "AbortError") throw e;
    throw new Error(`cannot reach the server (${e.message}); retrying`);
  } finally {
    clearTimeout(timer);
    reads.delete(ctl);
  }
  if (resp.status === 204) return {body: null, headers: resp.headers};
  const body = await resp.json().catch(() => ({error: resp.statusText}));
  if (!resp.ok) {
    if (resp.status === 401) showBanner("Not signed in: open the URL that 'dtrain server' printed (with ?token=) once.");
    throw Object.assign(new Error(body.error || resp.statusText), {status: resp.status});
  }
  return {body, headers: resp.headers};
}

// The refusal of the last button pressed (a 409, a read-only server): shown until the next button or page, not
// only until the next poll, whose success cleared the banner within 2 s.
let refusal = "";
function showBanner(text) {
  const b = document.getElementById("banner");
  b.textContent = text || refusal;
  b.hidden = !(text || refusal);
}

async function act(path, opts) {  // a button's call: its refusal stays on screen
  try { await api(path, opts); refusal = ""; } catch (e) { refusal = e.message; }
  showBanner("");
  refresh();  // the change shown now, not at the next poll (a finished job's page polls no more)
}

function age(ts) {
  if (!ts) return "-";
  const s = Math.max(0, Math.floor(Date.now() / 1000 - ts));
  for (const [u, n] of [["d", 86400], ["h", 3600], ["m", 60]]) if (s >= n) return Math.floor(s / n) + u;
  return s + "s";
}
const when = ts => ts ? new Date(ts * 1000).toISOString().replace(/\.\d+Z$/, "Z") : "-";
// The browser's local time always with its zone's name ("5/3/2026, 2:03:22 PM GMT+2"), never a bare clock time
const ZONED = {timeZoneName: "short"};
const local = ts => new Date(ts * 1000).toLocaleString(undefined, ZONED);
// An Age cell: the age, and the time it counts from in UTC and local time as its tooltip
const ageCell = (ts, what) => h("td", {class: "age", title: ts ? `${what} ${when(ts)} (${local(ts)})` : null}, age(ts));
const created = x => typeof x === "number" ? when(x) : String(x ?? "-");  // unix seconds (or an ISO text)
// Bytes as a volume's size is given (`--size 1Gi`) and as the CLI writes sizes (cli/format.py's `size`): 0B, 512B,
// 1.5Ki, 3Mi, 1Gi, one decimal and none when whole. The page said "3.0 GiB" where `dtrain volume list` said 3Gi.
function size(n) {
  if (n === null || n === undefined) return "-";
  if (Math.abs(n) < 1024) return Math.round(n) + "B";
  const units = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
  let value = n / 1024, i = 0;
  while (Math.abs(round1(value)) >= 1024 && i < units.length - 1) { value /= 1024; i++; }  // 1023.96Mi is 1Gi
  return round1(value) + units[i];
}
// Python's round(v, 1), which format.py's `size` uses: a tie goes to the even digit (1280 bytes are 1.2Ki, where
// toFixed(1) says 1.3); a size's v is a binary fraction, so v * 10 is exact and a tie is seen as one.
function round1(v) {
  const t = v * 10, down = Math.floor(t);
  return (t - down === 0.5 ? down + Math.abs(down % 2) : Math.round(t)) / 10;
}
// The words of a response's Warning header (RFC 7234: `299 dtrain "<text>"`, several comma-separated, a quote
// or backslash in the text escaped with a backslash): a backend that did not answer (its projects or jobs are
// not in the list), a field of a submitted job that its backend does not use; the CLI prints them as warnings.
function warnings(header) {
  return [...(header || "").matchAll(/\d{3} \S+ "((?:[^"\\]|\\.)*)"/g)].map(m => m[1].replace(/\\(.)/g, "$1"));
}
// Those words above a page's table (null: none), read by a screen reader as a status, not an alarm
function warningNote(headers, id) {
  const said = warnings(headers.get("warning"));
  return said.length ? h("p", {id, class: "warning", role: "status"}, said.join("\n")) : null;
}
// A Warning a button's call got (the Submit form's) and the page it led to shows: said there once
let carried = null;
const statusCell = s => h("td", {class: `status s-${s}`}, s);
// A Jobs or Notebooks row's status, with why a Pending job waits under it (Run:AI's list says so; here only its page
// did) and the job's message on hover.
const jobStatusCell = j => h("td", {class: `status s-${j.status}`, title: j.message || null}, j.status,
  j.status === "Pending" && j.message ? h("div", {class: "why muted"}, j.message) : null);
// A job's address: with its project (every link to a job: a row of the Jobs or Notebooks table, a GPU's holder, a
// snapshot's or a lineage node's job, the Submit form's project): a project
// that config.yaml sends to another backend (Kubernetes) keeps its jobs there, where a job's page and buttons
// find them only with ?project=, as the CLI's job verbs only with -p. The unfiltered tables list every backend's
// jobs, and their links and buttons had no project: 'no job named' for each of team-b's.
const withProject = (path, project) => path + (project ? "?project=" + encodeURIComponent(project) : "");
const jobPath = (name, project, tail) => withProject("/jobs/" + encodeURIComponent(name) + (tail || ""), project);
const jobLink = (name, project) => h("a", {href: "#" + withProject("/job/" + encodeURIComponent(name), project)}, name);

// Poll fn: the next run is scheduled when this one has ended, never beside it (a slow server got a new
// round of requests every `ms` while the last ones still waited), `ms` after a success and twice the
// last wait after a failure (up to BACKOFF_MAX_MS). A run that ends after the page changed stops there.
// fn's answer STOP ends the polling: a finished job's page changes no more, and was read every 4 s for as
// long as the tab stayed open. A button's action runs the page's polls at once (refresh()), a stopped one too.
const STOP = Symbol("stop");
const FINAL = new Set(["Succeeded", "Failed", "Deleted"]);  // JobStatus.terminal: nothing of the job runs again
let pollers = [];  // run() of this page's polls
function every(fn, ms) {
  const mine = view, timer = {id: null};
  let wait = ms, busy = false, again = false;
  timers.push(timer);
  const run = async () => {
    clearTimeout(timer.id);
    if (busy) { again = true; return; }  // one run at a time: the one in flight runs again when it ends
    busy = true;
    let stop = false;
    try {
      stop = (await fn()) === STOP;
      if (mine !== view) return;
      showBanner("");
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(undefined, ZONED)
        + (stop ? " (final: no longer refreshed)" : "");
      wait = ms;
    } catch (e) {
      if (mine !== view) return;
      showBanner(e.message);
      wait = Math.min(wait * 2, BACKOFF_MAX_MS);
    } finally {
      busy = false;
    }
    if (again) { again = false; return run(); }
    if (!stop) timer.id = setTimeout(run, wait);
  };
  pollers.push(run);
  run();
}

function refresh() {
  pollers.forEach(run => run());
}

// The server's GPU samples of the last minutes, as a page keeps them: each poll asks only for those taken
// after the newest one it holds (the whole history, every GPU of every node for ten minutes, was fetched
// again every few seconds), and drops those older than the server keeps.
const HISTORY_S = 600;
function gpuHistory() {
  let samples = [];
  return async () => {
    const newest = samples.length ? samples[samples.length - 1].time : null;
    const fresh = await api("/nodes/history" + (newest === null ? "" : "?since=" + newest));
    const keep = (fresh.length ? fresh[fresh.length - 1].time : newest) - HISTORY_S;
    samples = samples.filter(x => x.time >= keep).concat(fresh);
    return samples;
  };
}

// Whose a GPU sample is: a job is named by its backend, project and name together (two jobs of one name in two
// projects, or a --local one beside a Kubernetes one, were given each other's GPUs when matched by name), a
// project by its backend and name. The samples are of the default backend's nodes, each naming that backend.
const jobKey = j => JSON.stringify([j.backend, j.project, j.name]);
const sampleJobKey = x => x.job ? JSON.stringify([x.backend, x.project, x.job]) : null;
const projectKey = p => JSON.stringify([p.backend, p.name]);
const sampleProjectKey = x => x.job && x.project ? JSON.stringify([x.backend, x.project]) : null;

// What each job's GPUs do now, from the server's newest round of samples (taken together, every few seconds), as
// Run:AI's job list shows a job's GPU utilisation and memory: {jobKey: {util, used, total}}, util the mean of its
// GPUs' (null where NVML gives none: injected GPUs, MIG), used and total summed (null where unknown). `by`
// "project": each project's jobs' GPUs together ({projectKey: ...}), as Run:AI's Projects view shows them.
function gpusNow(samples, by) {
  const newest = samples.length ? samples[samples.length - 1].time : null;
  const now = {};
  for (const x of samples) {
    const key = by === "project" ? sampleProjectKey(x) : sampleJobKey(x);
    if (x.time !== newest || !key) continue;
    const j = now[key] = now[key] || {utils: [], used: 0, total: 0};
    j.utils.push(x.utilization);
    j.used = j.used === null || x.memory_used === null ? null : j.used + x.memory_used;
    j.total = j.total === null || x.memory_total === null ? null : j.total + x.memory_total;
  }
  for (const j of Object.values(now)) {
    j.util = j.utils.some(u => u === null) ? null : j.utils.reduce((a, b) => a + b, 0) / j.utils.length;
  }
  return now;
}
// A job's GPU utilisation and memory cells' words: "-" for a job holding no GPU or one not sampled yet
const gpuUtil = g => !g || g.util === null ? "-" : g.util.toFixed(0) + "%";
const gpuMemory = g => !g || g.used === null ? "-" : `${size(g.used)} / ${size(g.total)}`;
// A job page's GPU figures now, in words: for a job holding GPUs, why there are none where there are none (it read
// "- / -" alike for a job whose node reports no figures, as injected GPUs and nodes without NVML, and one not sampled yet).
function gpuNowWords(j, g) {
  if (!j.gpus_allocated) return "- (no GPU held)";
  if (!g) return "- (not sampled)";  // yet, or a job of a backend whose nodes the server does not sample
  if (g.util === null && g.used === null) return "no GPU figures: this job's node reports none";
  return `${gpuUtil(g)} / ${gpuMemory(g)}`;
}

// A table, or where it has no rows and `none` is given, that sentence in its place (an empty table showed
// its headers only: no volumes yet, or a table that failed to fill, looked the same).
function table(headers, rows, attrs, none) {
  if (!rows.length && none) return h("p", {class: "muted empty"}, none);
  return h("table", attrs || {}, h("thead", {}, h("tr", {}, headers.map(x => h("th", {}, x)))), h("tbody", {}, rows));
}

// A poll's new drawing of part of a page, in place of the last one. The control a keyboard user was on (a job's
// Suspend button, a project's link) has the focus again in the new drawing: replaced every 2 s, the focus fell back
// to the page's top, and the next Tab started there. It is found by its row (data-job, data-notebook, ...) and its
// words or address; a control gone since (Suspend become Resume) leaves the focus on the one at its place there.
const FOCUSABLE = "a[href], button, select, input, textarea, [tabindex]";
const ROW = "[data-job], [data-notebook], [data-project], [data-volume]";  // a table row: one job, notebook, ...
function redraw(holder, ...children) {
  const had = document.activeElement;
  if (!had || had === holder || !holder.contains(had)) return holder.replaceChildren(...children);
  const row = had.closest(ROW), scope = row && holder.contains(row) ? row : null;
  const key = scope ? [...scope.attributes].find(a => a.name.startsWith("data-")) : null;
  const said = el => el.getAttribute("href") ?? el.textContent;  // a link by where it leads, a button by its words
  const like = el => el.tagName === had.tagName && el.getAttribute("class") === had.getAttribute("class")
    && said(el) === said(had);
  const place = [...(scope || holder).querySelectorAll(FOCUSABLE)].indexOf(had);
  holder.replaceChildren(...children);
  const there = !key ? holder : [...holder.querySelectorAll(`[${key.name}]`)].find(e => e.getAttribute(key.name) === key.value);
  if (!there) return;
  const all = [...there.querySelectorAll(FOCUSABLE)];
  const again = all.find(like) || (place >= 0 ? all[Math.min(place, all.length - 1)] : null);
  if (again) again.focus({preventScroll: true});
}

// ---- jobs ---------------------------------------------------------------------------------
// One page of PAGE_SIZE jobs, newest first (the API's order when it pages); the page number is in the
// hash beside the filters (#/jobs?status=Running&page=3), so a reload or a shared link shows the same page.
// What a project's empty list says (the Projects page opens it), as `dtrain list -p P` words it: how to start a
// job there, or where its deleted ones are. "No jobs match these filters" told a new project's owner nothing.
async function noJobsIn(project) {
  const {headers} = await request("/jobs?" + new URLSearchParams({project, status: "Deleted", limit: "1"}));
  const deleted = Number(headers.get("x-total-count")) || 0;
  if (deleted) return `No jobs in project '${project}' (${deleted} deleted: choose Deleted above to list them).`;
  const command = `'dtrain submit NAME -p ${project} -- COMMAND'`;
  return readOnly() ? `No jobs yet in project '${project}': this server is read-only; submit one with ${command}.`
                    : `No jobs yet in project '${project}': submit one from the Submit tab or with ${command}.`;
}

function jobsPage(main) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const page = Math.min(Math.max(1, Math.floor(Number(params.get("page"))) || 1), LAST_PAGE);
  const to = n => go("jobs", {status: status.value, project: project.value, page: n > 1 ? n : null});
  const status = h("select", {id: "status-filter", "aria-label": "Status", onchange: () => to(1)},
                   ["", "Pending", "Running", "Suspended", "Succeeded", "Failed", "Deleted"].map(s => h("option", {value: s}, s || "any status but Deleted")));
  const project = h("input", {id: "project-filter", "aria-label": "Project", placeholder: "all projects", size: 14, onchange: () => to(1)});
  status.value = params.get("status") || "";
  project.value = params.get("project") || "";
  const prev = h("button", {id: "jobs-prev", disabled: true, onclick: () => to(page - 1)}, "Prev");
  const next = h("button", {id: "jobs-next", disabled: true, onclick: () => to(page + 1)}, "Next");
  const range = h("span", {id: "jobs-range", class: "muted"});
  const holder = h("div", {class: "card wide"});
  const history = gpuHistory();
  main.append(h("h1", {}, "Jobs"), h("div", {class: "toolbar"}, status, project,
              h("span", {class: "pager"}, prev, range, next)), holder);
  every(async () => {
    const first = (page - 1) * PAGE_SIZE;
    const q = new URLSearchParams({limit: String(PAGE_SIZE), offset: String(first)});
    if (status.value) q.set("status", status.value);
    if (project.value) q.set("project", project.value);
    const [{body: jobs, headers}, hist] = await Promise.all([request("/jobs?" + q), history()]);
    const now = gpusNow(hist);
    const total = Number(headers.get("x-total-count"));
    range.textContent = jobs.length ? `${first + 1}-${first + jobs.length} of ${total}`
                                    : `none on page ${page} (${total} in all)`;
    prev.disabled = page <= 1;
    next.disabled = first + jobs.length >= total;
    const rows = jobs.map(j => h("tr", {"data-job": j.name},
      h("td", {}, jobLink(j.name, j.project)), jobStatusCell(j), ageCell(j.created, "created"), h("td", {}, j.project),
      h("td", {}, j.node || "-"), h("td", {}, j.kind), h("td", {class: "gpus"}, `${j.gpus_allocated} (${j.gpus_requested})`),
      h("td", {class: "procs"}, `${j.processes_running} (${j.processes_pending})`),
      h("td", {class: "gpu-util"}, j.gpus_allocated ? gpuUtil(now[jobKey(j)]) : "-"),
      h("td", {class: "gpu-memory"}, j.gpus_allocated ? gpuMemory(now[jobKey(j)]) : "-"),
      h("td", {class: "actions"}, ...jobButtons(j, "", j.project))));
    const none = total ? "No jobs on this page: go back with Prev."
      : status.value ? "No jobs match these filters."
      : project.value ? await noJobsIn(project.value)
      : readOnly() ? "No jobs yet: this server is read-only; submit one with 'dtrain submit'."
      : "No jobs yet: submit one from the Submit tab or with 'dtrain submit'.";
    // Some jobs could not be listed (SageMaker without AWS credentials: the --local ones only), as `dtrain list` warns
    redraw(holder, ...[warningNote(headers, "jobs-warning")].filter(Boolean),
      jobs.length ? table(["Name", "Status", "Age", "Project", "Node", "Type",
      "GPUs allocated (requested)", "Processes running (pending)", "GPU util.", "GPU memory used / total", ""], rows,
      {id: "jobs-table"})
      : h("p", {class: "muted"}, none));
  }, REFRESH_MS);
}

async function deleteJob(name, active, project) {
  const what = active ? "Its processes are stopped." : "It leaves the list; the status filter's Deleted still shows it.";
  if (!confirm(`Delete job ${name}? ${what}`)) return;
  await act(jobPath(name, project), {method: "DELETE"});
}

async function pauseJob(name, verb, project) {  // "suspend" or "resume"
  await act(jobPath(name, project, "/" + verb), {method: "POST"});
}

// A read-only server (dtrain server --read-only) marks its page: no button it would refuse is shown.
function readOnly() {
  return document.body.hasAttribute("data-read-only");
}

// A volume's Snapshot button (a row of the Volumes table; a finished job's page, one per volume it mounted, the
// snapshot linked to the job): `dtrain snapshot create VOLUME [--job JOB] -p PROJECT`. The name is asked for, offered
// as the server names one left out (VOLUME-<UTC time>, then -2, -3... past the names taken: a valid name, a volume's
// name being one); a name left empty is the server's. The new snapshot is said in `said`; a refusal (a name taken
// meanwhile: the server's 409) stays in the banner, as any button's does.
const snapshotName = volume => volume.slice(0, 34).replace(/-+$/, "") + "-"
  + new Date().toISOString().slice(0, 19).replace(/[-:]/g, "").replace("T", "-");
async function freeSnapshotName(volume, project) {
  const stem = snapshotName(volume);
  let taken = new Set();
  try {
    taken = new Set((await api(withProject("/snapshots", project))).map(s => s.name));
  } catch (e) { /* offered unchecked: a name taken is the server's 409, shown as before */ }
  let name = stem;
  for (let n = 2; taken.has(name); n++) name = `${stem}-${n}`;
  return name;
}
async function takeSnapshot(volume, job, project, said) {
  const name = prompt(`Name of the new snapshot of volume ${volume}:`, await freeSnapshotName(volume, project));
  if (name === null) return;  // cancelled
  const body = Object.assign({volume}, name.trim() ? {name: name.trim()} : {}, job ? {job} : {});
  said.textContent = `taking a snapshot of volume ${volume}...`;
  try {
    const s = await api(withProject("/snapshots", project), {method: "POST", headers: {"content-type": "application/json"},
                                                             body: JSON.stringify(body)});
    refusal = "";
    said.textContent = `Snapshot ${s.name} of volume ${s.volume} taken: ${s.files ?? "-"} files, ${size(s.bytes)}.`;
  } catch (e) {
    refusal = e.message;
    said.textContent = "";
  }
  showBanner("");
  refresh();  // the Snapshots table with it now (a finished job's page polls no more)
}

// A Running notebook's Open: its URL (with Jupyter's token) asked for now, opened in a new tab, as `dtrain
// notebook open` prints it; a refusal (Jupyter still starting: 409) stays on screen as a button's does.
async function openNotebook(name, project) {
  try {
    const {url} = await api(withProject(`/notebooks/${encodeURIComponent(name)}/url`, project));
    refusal = "";
    window.open(url, "_blank", "noopener");
  } catch (e) { refusal = e.message; }
  showBanner("");
}

// A job's buttons: Open for a Running notebook, Suspend while it may run, Resume while suspended, Delete until
// deleted (a finished job leaves the list, as Run:AI's delete of a completed job does). A read-only server has
// none: it refuses changes, and a notebook's URL (its token runs code). Resume waits while a rank still stops
// (Terminating: writing its checkpoint): a click then held the request until it had exited, up to the grace
// period and more, with nothing on screen, and was refused after it; the button says so and is enabled after.
function jobButtons(j, noun, project) {
  if (readOnly()) return [];
  const running = j.status === "Pending" || j.status === "Running";
  const active = running || j.status === "Suspended";
  const stopping = (j.processes || []).filter(p => p.status === "Terminating").length;
  const resume = stopping
    ? {class: "resume", disabled: true, title: `${stopping === 1 ? "A process is" : stopping + " processes are"} still `
        + "stopping (Terminating: writing a checkpoint); Resume once the job's processes read Stopped"}
    : {class: "resume", onclick: () => pauseJob(j.name, "resume", project)};
  return [
    ...(j.spec.notebook && j.status === "Running" ? [h("button", {class: "open-notebook", onclick: () => openNotebook(j.name, project)}, "Open")] : []),
    ...(running ? [h("button", {class: "suspend", onclick: () => pauseJob(j.name, "suspend", project)}, "Suspend" + noun)] : []),
    ...(j.status === "Suspended" ? [h("button", resume, "Resume" + noun)] : []),
    ...(j.status !== "Deleted" ? [h("button", {class: "danger", onclick: () => deleteJob(j.name, active, project)}, "Delete" + noun)] : [])];
}

// ---- one job -------------------------------------------------------------------------------
function jobPage(main, name, project, note) {
  const head = h("div", {class: "card", id: "job-head"});
  const curves = h("div", {class: "row", id: "curves"});
  const procs = h("div", {class: "card"}), events = h("div", {class: "card"}), snaps = h("div", {class: "card", id: "job-snapshots"});
  const spec = h("pre", {id: "job-spec"});
  const rank = h("select", {id: "rank", "aria-label": "Logs of rank", onchange: () => follow(name, rank.value, project)}, h("option", {value: ""}, "all ranks"));
  const logs = h("pre", {id: "logs", tabindex: 0, "aria-label": "Logs", "aria-live": "off"});
  const taken = h("p", {id: "snapshot-message", role: "status"});
  main.append(h("h1", {}, "Job ", h("span", {id: "job-name"}, name)), ...[note].filter(Boolean), head, taken,
              h("h2", {}, "Logs ", rank), h("div", {class: "card"}, logs),
              h("h2", {}, "Training curves"), curves, h("div", {class: "row"},
              h("div", {class: "card"}, h("h2", {}, "Processes"), procs),
              h("div", {class: "card"}, h("h2", {}, "Status events"), events)),
              h("div", {class: "row"}, h("div", {class: "card"}, h("h2", {}, "Snapshots"), snaps),
              h("div", {class: "card"}, h("h2", {}, "Spec"), spec)));
  // A job in a final state changes no more: its page stops polling once it has read it so twice (the second
  // read takes what came just after the end: the snapshot of its results, its last curve points).
  let ranksShown = 0, wasSuspended = false, following = false, finalReads = 0;
  const history = gpuHistory();
  every(async () => {
    let j;
    try {
      j = await api(jobPath(name, project));
    } catch (e) {
      // No such job (purged, or never submitted): it will not come back, so the page stops asking (it asked every
      // 30 s for as long as the tab stayed open, under a 404 banner), and says why in place of the job.
      if (e.status !== 404 && e.status !== 422) throw e;  // 422: a name no job can have
      if (stream) { stream.close(); stream = null; }
      redraw(head, h("p", {class: "error", id: "job-gone"}, e.message));
      // A job this page never read (a typo, a link to a job purged since) has no logs, curves or events: their
      // empty headings and cards below the message looked like a job that had not started. A purged job's keep
      // what they showed.
      if (!following) while (head.nextSibling) head.nextSibling.remove();
      return STOP;
    }
    // A resumed job runs again: its log stream ended at the suspension, so read it anew. The stream's end says
    // so too: a job suspended and resumed between two polls was never seen Suspended here, and was not followed.
    // It is followed once it runs again, not while it waits (Pending): a stream opened then gave the suspended
    // run's lines, and the resumed run's after them, so each line showed twice.
    const waits = j.status === "Suspended" || j.status === "Pending";
    if ((wasSuspended || streamSuspended) && !waits) follow(name, rank.value, project);
    wasSuspended = j.status === "Suspended" || (wasSuspended && waits);
    const [kept, hist] = await Promise.all([volumesKept(j), history()]);
    const now = gpusNow(hist);
    redraw(head, h("div", {class: "kv"},
      h("div", {}, "Status"), h("div", {class: `status s-${j.status}`, id: "job-status"}, j.status),
      h("div", {}, "Message"), h("div", {}, j.message || "-"),
      h("div", {}, "Type / project / backend"), h("div", {}, `${j.kind} / ${j.project} / ${j.backend}`),
      h("div", {}, "Node"), h("div", {}, j.node || "-"),
      h("div", {}, "GPUs allocated (requested)"), h("div", {}, `${j.gpus_allocated} (${j.gpus_requested})`),
      h("div", {}, "CPUs / memory requested per process"), h("div", {id: "job-requests"}, `${j.spec.cpu ?? "-"} / ${j.spec.memory || "-"}`),
      h("div", {}, "GPU utilization / memory used now"), h("div", {id: "job-gpu-now"}, gpuNowWords(j, now[jobKey(j)])),
      h("div", {}, "Created / started / finished"), h("div", {}, `${when(j.created)} / ${when(j.started)} / ${when(j.finished)}`),
      h("div", {}, "Restarts"), h("div", {}, j.restarts),
      h("div", {}, "Snapshot taken / started from"), h("div", {}, `${marked(j.snapshot, j.snapshot_deleted)} / ${startedFrom(j) || "-"}`)),
      h("p", {class: "actions"}, ...jobButtons(j, " job", project), ...snapshotButtons(j, taken, kept)));
    redraw(procs, table(["Rank", "Status", "Exit code", "Devices", "Node"], j.processes.map(p => h("tr", {},
      h("td", {}, p.rank), statusCell(p.status), h("td", {}, p.exit_code ?? "-"), h("td", {}, p.devices.join(",") || "-"), h("td", {}, p.node || "-"))), {},
      j.status === "Pending" ? "none started yet" : "none"));
    redraw(events, table(["Time", "Status", "Message"], j.events.map(e => h("tr", {},
      h("td", {}, when(e.time)), statusCell(e.status), h("td", {class: "message"}, e.message))), {}, "none"));
    spec.textContent = JSON.stringify(j.spec, null, 2);
    for (; ranksShown < j.spec.processes; ranksShown++) rank.appendChild(h("option", {value: ranksShown}, "rank " + ranksShown));
    // The logs are followed once the ranks are known: lines that came before marked no rank ("[rank 1] ...").
    if (!following) { following = true; follow(name, "", project); }
    // Listed where the job is (its project's backend, when the page has its project): elsewhere it is unknown (404)
    const s = await api("/snapshots?job=" + encodeURIComponent(name) + (project ? "&project=" + encodeURIComponent(project) : ""));
    redraw(snaps, s.length ? table(["Name", "Volume", "Files", "Size", "Created"], s.map(x => h("tr", {"data-snapshot": x.name},
      h("td", {}, x.name, ...earlierRun(x)), h("td", {}, marked(x.volume, x.volume_deleted)), h("td", {}, x.files ?? "-"), h("td", {}, size(x.bytes)), h("td", {}, created(x.created)))))
      : h("p", {class: "muted"}, "none"));
    await drawCurves(curves, j, hist, project);
    jobEnded = FINAL.has(j.status);
    finalReads = jobEnded ? finalReads + 1 : 0;
    return finalReads >= 2 ? STOP : undefined;
  }, REFRESH_MS * 2);
}

// A snapshot of a job purged since, whose name a later submit took: the CLI's "(earlier run)". No link: the job
// page of that name is the later run's, and its Snapshots card listed this one as its own.
// A name the backend says was deleted since (a record's volume_deleted, origin_snapshot_deleted,
// source_snapshot_deleted, as `--json` has them), marked as the CLI marks it: "data (deleted)".
const marked = (name, deleted) => name ? name + (deleted ? " (deleted)" : "") : "-";

const earlierRun = x => x.earlier_run ? [h("span", {class: "muted earlier", title: `taken by an earlier job named ${x.job}, `
  + "purged since: the job of that name now is a later submit"}, " (earlier run)")] : [];

// A finished job's Snapshot buttons: one per volume it mounted, its results kept as a snapshot linked to it (what
// --snapshot-on-success does, taken after the fact, or after a failure); none on a read-only server.
// A volume deleted since the job ran has a disabled button that says so: pressing it could only be refused (404).
function snapshotButtons(j, said, kept) {
  if (!offersSnapshots(j)) return [];
  return (j.volumes || []).map(v => kept && !kept.has(v)
    ? h("button", {class: "snapshot", "data-volume": v, disabled: true, title: `volume ${v} was deleted after the job ran`},
        `Snapshot ${v} (deleted)`)
    : h("button", {class: "snapshot", "data-volume": v, title: `snapshot volume ${v}, linked to job ${j.name}`,
        onclick: () => takeSnapshot(v, j.name, j.project, said)}, "Snapshot " + v));
}

const offersSnapshots = j => !readOnly() && (j.status === "Succeeded" || j.status === "Failed") && (j.volumes || []).length > 0;

// The names of the volumes there are in the job's project, for its Snapshot buttons; null when not asked or unread.
async function volumesKept(j) {
  if (!offersSnapshots(j)) return null;
  try {
    return new Set((await api(withProject("/volumes", j.project))).map(v => v.name));
  } catch (e) {
    return null;  // unread (the backend's volumes): every button stays, as before
  }
}

async function drawCurves(holder, j, hist, project) {
  const name = j.name;
  const metrics = await api(jobPath(name, project, "/metrics"));
  const recs = metrics.filter(r => typeof r.step === "number");
  const keys = [["loss", "loss"], ["images_per_s", "images/s"]];
  const cards = keys.map(([k, title]) => {
    const series = [{name: title, points: recs.filter(r => r[k] !== undefined).map(r => [r.step, r[k]])}];
    return h("div", {class: "card", "data-curve": k}, h("h2", {}, title + " by step"),
             lineChart(series, {label: title + " by step", empty: "no '" + k + "' logged (dtrain.training.MetricsWriter)"}));
  });
  // the GPUs this job held, from the server's samples of the last minutes
  const mine = hist.filter(x => sampleJobKey(x) === jobKey(j));
  const gpus = [...new Set(mine.map(x => x.node + "/" + x.gpu))];
  const byGpu = key => gpus.map(g => ({name: "GPU " + g, points: mine.filter(x => x.node + "/" + x.gpu === g).map(x => [x.time, x[key]])}));
  const series = byGpu("utilization"), memory = byGpu("memory_used");
  const t = x => new Date(x * 1000).toLocaleTimeString();
  cards.push(h("div", {class: "card", "data-curve": "gpu"}, h("h2", {}, "Its GPUs' utilization %"),
    lineChart(series, {label: "Its GPUs' utilization %", xfmt: t, ymin: 0, ymax: 100, empty: gpus.length ? "no utilization reported (no NVML: injected GPUs)" : "no GPU samples for this job"}), legend(series)));
  // Run:AI's job view shows its GPU memory beside its utilisation: a job near its GPUs' memory is the one to watch
  cards.push(h("div", {class: "card", "data-curve": "gpu-memory"}, h("h2", {}, "Its GPUs' memory used"),
    lineChart(memory, {label: "Its GPUs' memory used", xfmt: t, yfmt: size, ymin: 0, empty: gpus.length ? "no memory reported (no NVML: injected GPUs)" : "no GPU samples for this job"}), legend(memory)));
  redraw(holder, ...cards);
}

// The log pane. Lines are drawn once a frame, not one by one: each line's append and scroll laid the pane
// out again, so a job printing thousands of lines a second froze the tab. It keeps the newest LOG_LINES,
// and so do the lines waiting for a frame (a hidden tab draws none). `live()`: false once the pane is
// another stream's (another rank, another page), whose lines it must not draw.
function logPane(logs, live) {
  let shown = 0, waiting = [], frame = null;
  const draw = () => {
    frame = null;
    if (!live() || !waiting.length) return;
    const bottom = logs.scrollHeight - logs.scrollTop - logs.clientHeight < 40;  // else the reader scrolled up
    const batch = document.createDocumentFragment();
    for (const text of waiting) batch.appendChild(document.createTextNode(text));
    logs.appendChild(batch);
    for (shown += waiting.length; shown > LOG_LINES; shown--) logs.removeChild(logs.firstChild);
    waiting = [];
    if (bottom) logs.scrollTop = logs.scrollHeight;
  };
  return {
    clear() {  // the lines; the line saying why none come stays until the stream opens
      const why = document.getElementById("logs-waiting");
      logs.textContent = ""; shown = 0; waiting = [];
      if (why) logs.appendChild(why);
    },
    add(text) {
      waiting.push(text);
      if (waiting.length > LOG_LINES) waiting.splice(0, waiting.length - LOG_LINES);
      if (frame === null) frame = requestAnimationFrame(draw);
    },
    close(id, text) { draw(); this.waiting(null); logs.appendChild(h("span", {class: "muted", id}, text)); },
    // One line under the last, replaced by the next call and gone with null: why no lines come yet
    waiting(text) {
      const had = document.getElementById("logs-waiting");
      if (had) had.remove();
      if (text !== null && live()) logs.appendChild(h("span", {class: "muted", id: "logs-waiting"}, text));
    },
  };
}

function follow(name, rank, project) {
  if (stream) stream.close();
  streamSuspended = false;
  const mine = view, me = ++follows, timer = {id: null}, live = () => mine === view && me === follows;
  const pane = logPane(document.getElementById("logs"), live);
  pane.clear();
  timers.push(timer);
  // The newest time shown and the lines shown at that time. A dropped connection (the server restarted)
  // is reopened here from that time on: EventSource's own reconnect repeats its URL, so the last 500 lines
  // came again below the ones shown. Without a time (a backend that gives none) the tail is read again,
  // in place of the lines shown.
  // A stream refused as not found while the job lives (Kubernetes: its pod is not made yet, or was made again) is
  // opened again every few seconds under a "waiting for the pod" line, until the job ends: it ended the pane's
  // lines for good (an `event: error`), or was retried unseen, every 30 s at last (a 404 answer).
  let last = null, atLast = new Set(), from = null, retry = 1000;
  const again = (why, ms) => {
    if (jobEnded) return pane.close("logs-error", `-- the job has ended; its log could not be read (${why}) --\n`);
    pane.waiting(`-- waiting for the pod: ${why}; trying again in ${Math.round(ms / 1000)}s --\n`);
    timer.id = setTimeout(open, ms);
  };
  const open = () => {
    if (!live()) return;
    const q = new URLSearchParams(last === null ? {tail: "500"} : {since: String(last)});
    if (rank !== "") q.set("rank", rank);
    if (project) q.set("project", project);
    if (last === null) pane.clear();
    from = last;
    const es = stream = new EventSource(`${API}/jobs/${encodeURIComponent(name)}/logs/stream?${q}`);
    es.onopen = () => { retry = 1000; pane.waiting(null); };
    es.onmessage = ev => {
      const line = JSON.parse(ev.data);
      const key = line.rank + "\u0000" + line.text;
      if (typeof line.time === "number") {
        if (from !== null && line.time < from) return;  // before the time asked for: shown already
        if (line.time === last && atLast.has(key)) return;  // the line the stream was reopened at
        if (last === null || line.time > last) { last = line.time; atLast = new Set(); }
        if (line.time === last) atLast.add(key);
      }
      const many = document.getElementById("rank").options.length > 2 && rank === "";
      pane.add((many ? `[rank ${line.rank}] ` : "") + line.text + "\n");
    };
    es.addEventListener("end", ev => {
      const status = (JSON.parse(ev.data || "{}") || {}).status;
      es.close();
      if (live()) streamSuspended = status === "Suspended";
      pane.close("logs-end", status === "Suspended" ? "-- the job was suspended: its lines go on here once it is resumed --\n" : "-- the job has stopped --\n");
    });
    // The server's `event: error` (a pod that cannot start, a reader that stalled) carries {error, kind}
    // and ends the stream; an error event without data is a dropped connection, reopened after a pause.
    // A refusal before the stream began (a 404: no pod to read yet) is such an error too: EventSource does not
    // say a status, so the reopen's line says what the log endpoint answers, read once.
    es.addEventListener("error", ev => {
      const opened = es.readyState !== EventSource.CLOSED || ev.data;  // a CLOSED one without data: refused
      es.close();
      if (!live()) return;
      if (ev.data) {
        const failed = JSON.parse(ev.data);
        if (failed.kind === "NotFoundError") return again(failed.error, POD_RETRY_MS);
        return pane.close("logs-error", `-- ${failed.error} --\n`);
      }
      const wait = retry;
      retry = Math.min(retry * 2, BACKOFF_MAX_MS);
      if (opened) { timer.id = setTimeout(open, wait); return; }
      refused(es.url).then(why => {
        if (!live()) return;
        if (why) again(why, POD_RETRY_MS);
        else timer.id = setTimeout(open, wait);
      });
    });
  };
  open();
}

// Why a log stream's address was refused before it began: the server's line where it answered 404 (no pod yet),
// else null (the server unreachable, or another refusal: retried as a dropped connection). Asked with a tail of 1
// and without following, so that the answer comes at once.
async function refused(url) {
  const u = new URL(url);
  u.pathname = u.pathname.replace(/\/stream$/, "");
  u.searchParams.delete("since");
  u.searchParams.set("tail", "1");
  try {
    const resp = await fetch(u, {credentials: "same-origin"});
    if (resp.status !== 404) return null;
    return (await resp.json()).error || "not found";
  } catch (e) { return null; }
}

// ---- notebooks -----------------------------------------------------------------------------
// Kubeflow's Notebooks view: every project's notebooks (GET /notebooks), each with Open once it is Running and,
// while it waits, why (the scheduler's message: GPUs busy, a quota, older jobs first).
function notebooksPage(main) {
  const holder = h("div", {class: "card wide"});
  main.append(h("h1", {}, "Notebooks"), holder);
  every(async () => {
    const {body, headers} = await request("/notebooks");  // a backend that did not answer: in its Warning
    const books = body.slice().reverse();  // newest first, as the Jobs table
    const rows = books.map(b => h("tr", {"data-notebook": b.name},
      h("td", {}, jobLink(b.name, b.project)), statusCell(b.status), ageCell(b.created, "created"), h("td", {}, b.project),
      h("td", {}, b.spec.volumes.join(", ") || "-"), h("td", {class: "gpus"}, `${b.gpus_allocated} (${b.gpus_requested})`),
      h("td", {class: "message"}, b.message || "-"),
      h("td", {class: "actions"}, ...jobButtons(b, "", b.project))));
    redraw(holder, ...[warningNote(headers, "notebooks-warning")].filter(Boolean), table(["Name", "Status", "Age", "Project", "Volumes", "GPUs allocated (requested)",
      "Message (why it waits)", ""], rows, {id: "notebooks-table"}, readOnly()
      ? "No notebooks yet: this server is read-only; start one with 'dtrain notebook start NAME --pvc VOLUME:/home/jovyan'."
      : "No notebooks yet: start one with 'dtrain notebook start NAME --pvc VOLUME:/home/jovyan' "
        + "(or without --pvc: a folder of its own)."));
  }, REFRESH_MS);
}

// ---- projects ------------------------------------------------------------------------------
// Run:AI's Projects view: each project's GPU quota, the GPUs its jobs hold, its jobs running and waiting. On the
// local backend a project without a quota runs over quota (its jobs take idle GPUs only, and a job of a project
// with a quota preempts them), as does one holding more than a quota lowered since; a cluster's quota is a limit.
function overQuota(p) {
  if (p.backend !== "local") return "-";
  if (p.gpu_quota === null) return "yes: no quota (preemptible)";
  if (p.gpus_allocated > p.gpu_quota) return `yes: ${p.gpus_allocated - p.gpu_quota} GPU over its quota (preemptible)`;
  return "no";
}

// A project's Delete (`dtrain project delete`, DELETE /projects/NAME): confirmed first; the server's refusal (jobs,
// notebooks, volumes or snapshots still in it; the configured default project) stays in the banner, as a job's
// Delete's does, and what went is said above the table. `default`, and the default project config.yaml names (the
// record's `default`; the page could not tell it, and offered a Delete the server refuses), have a disabled button
// saying why. None on a read-only server.
const UNDELETABLE = "project 'default' cannot be deleted: every job given no project runs in it";
const undeletable = p => p.name === "default" ? UNDELETABLE
  : `project '${p.name}' is the default project (config.yaml's project): make another the default first ('dtrain project set default'), then delete it`;
function projectButtons(p, said) {
  if (readOnly()) return [];
  if (p.name === "default" || p.default) return [h("button", {class: "danger delete-project", disabled: true, title: undeletable(p)}, "Delete")];
  return [h("button", {class: "danger delete-project", title: `delete project ${p.name}`,
                       onclick: () => deleteProject(p.name, said)}, "Delete")];
}
async function deleteProject(name, said) {
  if (!confirm(`Delete project ${name}? Its GPU quota goes; its deleted jobs keep their records. `
               + "It is refused while it holds jobs, notebooks, volumes or snapshots.")) return;
  said.textContent = "";
  try {
    const gone = await api("/projects/" + encodeURIComponent(name), {method: "DELETE"});
    refusal = "";
    said.textContent = `Project ${gone.name} deleted` + (gone.removed.length ? ` (removed: ${gone.removed.join(", ")})` : "")
      + (gone.kept ? `; kept: ${gone.kept}` : "") + ".";
  } catch (e) { refusal = e.message; }
  showBanner("");
  refresh();
}

function projectsPage(main) {
  const holder = h("div", {class: "card wide"});
  const said = h("p", {id: "project-message", role: "status"});
  const history = gpuHistory();
  main.append(h("h1", {}, "Projects"), said, holder);
  every(async () => {
    // every backend's projects; one that did not answer is named in the Warning header, its projects missing
    const [{body: projects, headers}, hist] = await Promise.all([request("/projects"), history()]);
    const now = gpusNow(hist, "project");
    const rows = projects.map(p => h("tr", {"data-project": p.name},
      h("td", {}, h("a", {href: "#/jobs?project=" + encodeURIComponent(p.name)}, p.name),
        // its namespace being deleted (Kubernetes): kubectl's word, as `project list` marks it
        ...(p.terminating ? [" ", h("span", {class: "terminating", title: "being deleted: nothing new may be made in it"}, "(Terminating)")] : []),
        ...(p.default ? [" ", h("span", {class: "muted default-project", title: "config.yaml's default project: a job given none goes here"}, "(default)")] : [])),
      h("td", {class: "quota"}, p.gpu_quota === null ? "none" : p.gpu_quota), h("td", {class: "gpus"}, p.gpus_allocated),
      h("td", {class: "running"}, p.running), h("td", {class: "pending"}, p.pending), h("td", {class: "jobs"}, p.jobs),
      h("td", {class: "gpu-util"}, gpuUtil(now[projectKey(p)])), h("td", {class: "gpu-memory"}, gpuMemory(now[projectKey(p)])),
      h("td", {class: "over-quota", title: p.extra.unknown || null}, overQuota(p)), h("td", {class: "backend"}, p.backend),
      h("td", {class: "actions"}, ...projectButtons(p, said))));
    redraw(holder, ...[warningNote(headers, "projects-warning")].filter(Boolean), table(["Project", "GPU quota",
      "GPUs allocated", "Running jobs", "Pending jobs", "Jobs (all but deleted)", "GPU util.", "GPU memory used / total", "Over quota (local)", "Backend", ""], rows, {id: "projects-table"},
      "No projects yet: create one with 'dtrain project create NAME --gpu-quota 2'."));
  }, REFRESH_MS * 2);
}

// ---- nodes ---------------------------------------------------------------------------------
// Each node's card holds the same parts: their ids are suffixed with the node's name (an id is one element of
// the page: #gpus-table and #gpu-alloc were repeated on every node), their classes are not (.gpus-table).
// Who holds a GPU: a dtrain job (a link), another workload (its pod), unknown (pods not readable), else free.
function gpuHolder(g) {
  if (g.job) return jobLink(g.job, g.project);
  if (g.held_by) return `another workload (${g.held_by})`;
  return g.unknown ? "unknown" : "free";
}

function nodesPage(main) {
  const holder = h("div", {});
  main.append(h("h1", {}, "Nodes"), holder);
  const history = gpuHistory();
  every(async () => {
    const [{body: nodes, headers}, hist] = await Promise.all([request("/nodes"), history()]);
    // Pods Kubernetes did not let us list: GPUs allocated count some or none, as `dtrain nodes` warns
    redraw(holder, ...[warningNote(headers, "nodes-warning")].filter(Boolean), ...nodes.map(n => {
      const gpus = table(["GPU", "Name", "Job", "Project", "Utilization", "Memory used / total"], n.gpus.map(g => h("tr", {"data-gpu": g.index},
        h("td", {}, g.index), h("td", {}, g.name || "-"), h("td", {class: "job"}, gpuHolder(g)), h("td", {class: "project"}, g.job && g.project || "-"),
        h("td", {}, g.utilization === null ? "-" : h("span", {}, h("span", {class: "bar"}, h("i", {style: `width:${g.utilization}%`})), ` ${g.utilization.toFixed(0)}%`)),
        h("td", {}, `${size(g.memory_used)} / ${size(g.memory_total)}`))), {id: "gpus-table-" + n.name, class: "gpus-table"});
      const mine = hist.filter(s => s.node === n.name);
      const byGpu = key => n.gpus.map(g => ({name: "GPU " + g.index, points: mine.filter(s => s.gpu === g.index).map(s => [s.time, s[key]])}));
      const t = x => new Date(x * 1000).toLocaleTimeString();
      const held = n.gpus.map(g => ({name: "GPU " + g.index, points: mine.filter(s => s.gpu === g.index).map(s => [s.time, s.held === null ? null : s.held ? 1 : 0])}));
      return h("div", {class: "card node", "data-node": n.name},
        h("h2", {}, n.name), h("div", {class: "kv"},
          h("div", {}, "GPUs allocated / allocatable"), h("div", {id: "gpu-alloc-" + n.name, class: "gpu-alloc"}, `${n.gpus_allocated} / ${n.gpus_allocatable}`),
          h("div", {}, "CPUs"), h("div", {}, n.cpus ?? "-"), h("div", {}, "Memory"), h("div", {}, size(n.memory))),
        h("h2", {}, "GPUs"), n.gpus.length ? gpus : h("p", {class: "muted"}, "no GPUs"),
        n.gpus.length ? h("div", {class: "row"},
          h("div", {class: "card"}, h("h2", {}, "Held or free, last minutes"), heldRows(held, {label: `Held or free, ${n.name}`, xfmt: t, empty: "the first sample comes a few seconds after the server starts"})),
          h("div", {class: "card"}, h("h2", {}, "Utilization % (last minutes)"), lineChart(byGpu("utilization"), {label: `Utilization %, ${n.name}`, xfmt: t, ymin: 0, ymax: 100, empty: "no utilization reported (NVML absent: injected GPUs)"}), legend(byGpu("utilization"))),
          h("div", {class: "card"}, h("h2", {}, "Memory used (last minutes)"), lineChart(byGpu("memory_used"), {label: `Memory used, ${n.name}`, xfmt: t, yfmt: size, ymin: 0, empty: "no memory reported (NVML absent: injected GPUs)"}), legend(byGpu("memory_used")))) : null);
    }));
  }, REFRESH_MS * 2);
}

// The snapshots a job's data came from, one per mounted volume, each marked where deleted since.
function startedFrom(j) {
  if (!(j.data_sources || []).length) return j.source_snapshot;
  return j.data_sources.map(d => `${d.snapshot}${d.snapshot_deleted ? " (deleted)" : ""} on ${d.volume}`
    + (d.volume_deleted ? " (deleted)" : "")).join(", ");
}

// The project of a snapshot's job, as its spec was recorded with the snapshot; else the page's filter. The filter
// alone sent a job of another project on a shared store (local volumes are every project's) to "no job named".
const snapshotJobProject = (x, asked) => (x.job_spec && x.job_spec.project) || asked;

// ---- volumes, snapshots, lineage ----------------------------------------------------------------
// A volume's or a snapshot's Delete (`dtrain volume delete`, `dtrain snapshot delete`; DELETE /volumes/NAME or
// /snapshots/NAME, with the page's project): confirmed first; what went is said above the Volumes table in the
// CLI's words; the server's refusal (a volume a job uses) stays in the banner, as a job's Delete's does. None on a
// read-only server.
function deleteButton(kind, name, asked, said) {
  return readOnly() ? null : h("button", {class: `danger delete-${kind}`, title: `delete ${kind} ${name}`,
                                          onclick: () => deleteStored(kind, name, asked, said)}, "Delete");
}
function freedText(f) {  // the tail of `dtrain snapshot delete`'s line
  if (f.bytes === null) return "; the storage system frees its space";
  if (f.no_room) return ", its data not freed yet: the home disk had no room; the next snapshot list frees it";
  return `, ${size(f.bytes)} freed` + (f.pending ? " (more once running snapshots finish)" : "");
}
// A volume's refusal that --force would overcome (a job uses it; the refusal says "--force") is quoted in a second
// confirm that offers the force (`dtrain volume delete --force`, ?force=true): the page never forced, so such a
// volume could be deleted from the CLI only.
async function deleteStored(kind, name, asked, said, force) {
  const what = kind === "volume" ? "Its files are lost; snapshots taken of it stay." : "Data no other snapshot holds is freed.";
  if (!force && !confirm(`Delete ${kind} ${name}? ${what}`)) return;
  said.textContent = "";
  try {
    const path = withProject(`/${kind}s/${encodeURIComponent(name)}`, asked);
    const r = await api(force ? path + (path.includes("?") ? "&" : "?") + "force=true" : path, {method: "DELETE"});
    refusal = "";
    said.textContent = kind === "snapshot" ? `Snapshot ${name} deleted${freedText(r)}.`
      : r && r.kept ? `Volume ${name} deleting (${r.kept}).` : `Volume ${name} deleted.`;
  } catch (e) {
    if (kind === "volume" && !force && e.status === 409 && e.message.includes("--force")
        && confirm(`${e.message}\n\nDelete volume ${name} anyway (--force)? The jobs using it lose its files.`)) {
      return deleteStored(kind, name, asked, said, true);
    }
    refusal = e.message;
  }
  showBanner("");
  refresh();
}

// A project's volumes and snapshots are on its backend (its namespace on Kubernetes), where the CLI's volume
// and snapshot verbs find them with -p: the filter asks each read for them there (#/storage?project=team-b), as
// the Jobs page's does, and the job links and hints name it. Without it: the configured project's backend.
function storagePage(main) {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const project = h("input", {id: "project-filter", "aria-label": "Project", placeholder: "configured project", size: 14,
                              onchange: () => go("storage", {project: project.value.trim()})});
  project.value = params.get("project") || "";
  const taken = h("p", {id: "snapshot-message", role: "status"});
  const vols = h("div", {class: "card"}), snaps = h("div", {class: "card"}), graph = h("div", {class: "card", style: "overflow:auto"});
  main.append(h("h1", {}, "Volumes and snapshots"), h("div", {class: "toolbar"}, project),
              h("h2", {}, "Lineage"), graph, h("h2", {}, "Volumes"), taken, vols, h("h2", {}, "Snapshots"), snaps);
  every(async () => {
    const asked = project.value.trim();  // as the Jobs page's: the links name it, their project's backend holds them
    const p = asked ? " -p " + asked : "";
    const [v, s, g] = await Promise.all([api(withProject("/volumes", asked)), api(withProject("/snapshots", asked)),
                                         api(withProject("/lineage", asked))]);
    // the columns of `dtrain volume list`, space used and status included
    redraw(vols, table(["Name", "Class", "Size", "Used", "Status", "From snapshot", "Head snapshot", "Created", ""], v.map(x => h("tr", {"data-volume": x.name},
      h("td", {}, x.name), h("td", {}, x.storage_class || "-"), h("td", {}, x.size || "-"), h("td", {class: "used"}, size(x.used_bytes)),
      h("td", {}, x.status || "-"), h("td", {}, marked(x.origin_snapshot, x.origin_snapshot_deleted)),
      h("td", {}, x.extra.head_snapshot || "-"), h("td", {}, created(x.created)),
      h("td", {class: "actions"}, readOnly() ? null : h("button", {class: "snapshot", title: `snapshot volume ${x.name}`,
        onclick: () => takeSnapshot(x.name, null, asked, taken)}, "Snapshot"), deleteButton("volume", x.name, asked, taken)))), {id: "volumes-table"},
      `No volumes yet: make one with 'dtrain volume create NAME --size 10Gi${p}'.`));
    redraw(snaps, table(["Name", "Volume", "Job", "From snapshot", "Files", "Size", "Added", "Created", ""], s.map(x => h("tr", {"data-snapshot": x.name},
      h("td", {}, x.name), h("td", {}, marked(x.volume, x.volume_deleted)), h("td", {class: "job"}, !x.job ? "-" : x.earlier_run ? [x.job, ...earlierRun(x)]
        : x.job_deleted ? marked(x.job, true) : jobLink(x.job, snapshotJobProject(x, asked))), h("td", {}, marked(x.source_snapshot, x.source_snapshot_deleted)),
      h("td", {}, x.files ?? "-"), h("td", {}, size(x.bytes)), h("td", {}, size(x.extra.added_bytes)), h("td", {}, created(x.created)),
      h("td", {class: "actions"}, deleteButton("snapshot", x.name, asked, taken)))), {id: "snapshots-table"},
      `No snapshots yet: take one with 'dtrain snapshot create${p}', or submit a job with --snapshot-on-success.`));
    redraw(graph, g.nodes.length ? lineageGraph(g, asked) : h("p", {class: "muted"}, "no volumes or snapshots yet"),
      ...(g.jobs_unread ? [h("p", {class: "muted", id: "lineage-unread"}, `drawn from the newest jobs: ${g.jobs_unread} `
        + `older job${g.jobs_unread === 1 ? "" : "s"} not read`)] : []));
  }, REFRESH_MS * 3);
}

// ---- submit --------------------------------------------------------------------------------
function splitCommand(text) {
  // The words a shell makes of the line, without expanding anything, as Python's shlex.split (the CLI shows a
  // command with shlex.join): whitespace separates; '...' keeps what it holds; "..." too, but for \" and \\; a
  // backslash outside quotes keeps the next character; quotes join the text beside them into one word
  // (--name="my run" is one word: it was two, quotes kept). A quote left open is refused (Error), naming it.
  const out = [];
  let word = null, i = 0;
  while (i < text.length) {
    const c = text[i];
    if (/\s/.test(c)) {
      if (word !== null) out.push(word);
      word = null;
      i++;
      continue;
    }
    word = word ?? "";
    if (c === "'" || c === '"') {
      let j = i + 1;
      for (; j < text.length && text[j] !== c; j++) {
        if (c === '"' && text[j] === "\\" && '"\\'.includes(text[j + 1])) j++;
        word += text[j];
      }
      if (j >= text.length) throw new Error(`invalid command: the ${c} at character ${i + 1} is not closed; close it, or put a \\ before it`);
      i = j + 1;
    } else if (c === "\\" && i + 1 < text.length) {
      word += text[i + 1];
      i += 2;
    } else {
      word += c;
      i++;
    }
  }
  if (word !== null) out.push(word);
  return out;
}

function submitPage(main) {
  if (readOnly()) {
    main.append(h("h1", {}, "Submit a job"), h("div", {class: "card"}, h("p", {id: "submit-message"},
      "This server is read-only (it was started with --read-only): submit with 'dtrain submit', or from a server started without it.")));
    return;
  }
  const f = (label, input) => [h("label", {for: input.id}, label), input];
  const inp = (id, attrs) => h("input", Object.assign({id, name: id}, attrs || {}));
  const launcher = h("select", {id: "launcher"}, ["none", "torchrun", "mpi"].map(x => h("option", {value: x}, x)));
  const msg = h("p", {id: "submit-message"});
  const form = h("form", {class: "submit", id: "submit-form"},
    f("Name", inp("name", {required: true, placeholder: "train-lanes-1"})),
    f("Command", inp("command", {required: true, placeholder: "python train.py --epochs 2"})),
    f("Processes", inp("processes", {type: "number", min: 1, value: 1})), f("Launcher", launcher),
    f("GPUs per process", inp("gpu", {type: "number", min: 0, value: 0})),
    f("CPU threads per process", inp("cpu", {type: "number", min: 0, step: "any"})),
    f("Memory per process", inp("memory", {placeholder: "8Gi"})),
    f("Environment (KEY=VALUE per line)", h("textarea", {id: "env"})),
    f("Volumes (--pvc per line)", h("textarea", {id: "volumes", placeholder: "local:10Gi:/mnt"})),
    f("Project", inp("project", {placeholder: "default"})),
    f("Backend", h("select", {id: "backend"}, ["", "local", "kubernetes", "sagemaker"].map(x => h("option", {value: x}, x || "(the server's configured default)")))),
    f("Image (Kubernetes)", inp("image", {placeholder: "ghcr.io/org/train:1"})),
    f("Max restarts", inp("max_restarts", {type: "number", min: 0, value: 0})),
    f("Snapshot on success (volume)", inp("snapshot_on_success")),
    f("Working directory", inp("working_dir", {placeholder: "/abs/path"})),
    f("Large /dev/shm", inp("large_shm", {type: "checkbox"})),
    h("span", {}), h("button", {class: "primary", type: "submit"}, "Submit"));
  form.onsubmit = async ev => {
    ev.preventDefault();
    const val = id => document.getElementById(id).value.trim();
    let command;
    try { command = splitCommand(val("command")); } catch (e) { msg.className = "error"; msg.textContent = e.message; return; }
    const body = {name: val("name"), command, processes: +val("processes") || 1,
                  launcher: launcher.value, gpu: +val("gpu") || 0, max_restarts: +val("max_restarts") || 0,
                  large_shm: document.getElementById("large_shm").checked};
    for (const k of ["memory", "project", "snapshot_on_success", "working_dir", "backend", "image"]) if (val(k)) body[k] = val(k);
    if (val("cpu")) body.cpu = +val("cpu");
    const lines = val("env").split("\n").filter(l => l.trim());
    const bad = lines.find(l => l.indexOf("=") < 1);  // no '=', or nothing before it: refused whole, as the CLI's -e
    if (bad !== undefined) {
      msg.className = "error";
      msg.textContent = `invalid environment line ${JSON.stringify(bad)}: use KEY=VALUE, one per line (e.g. BATCH_SIZE=33)`;
      return;
    }
    const env = Object.fromEntries(lines.map(l => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
    if (lines.length) body.env = env;
    const vols = val("volumes").split("\n").map(x => x.trim()).filter(Boolean);
    if (vols.length) body.volumes = vols;
    try {
      const {body: j, headers} = await request("/jobs", {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
      carried = warningNote(headers, "submit-warning");  // submitted, with a field its backend does not use
      location.hash = "#" + withProject("/job/" + encodeURIComponent(j.name), body.project);
    } catch (e) { msg.className = "error"; msg.textContent = e.message; }
  };
  main.append(h("h1", {}, "Submit a job"), h("div", {class: "card"}, form, msg));
}

// ---- routing -------------------------------------------------------------------------------
function go(page, params) {
  const q = new URLSearchParams(Object.entries(params || {}).filter(([, v]) => v));
  location.hash = "#/" + page + (q.toString() ? "?" + q : "");
}

// A name from the address as typed: a '%' that starts no escape (#/job/50%) is itself, where decodeURIComponent
// threw and left the page blank; the server then says what is wrong with the name.
function decoded(text) {
  try { return decodeURIComponent(text); } catch (e) { return text; }
}

function route() {
  view++;
  timers.forEach(t => clearTimeout(t.id));
  timers = [];
  pollers = [];
  reads.forEach(ctl => ctl.abort());
  reads = new Set();
  if (stream) { stream.close(); stream = null; }
  streamSuspended = false;
  jobEnded = false;
  refusal = "";
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, ...rest] = path.split("/");
  document.querySelector("nav a[data-page=submit]").hidden = readOnly();
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.dataset.page === (page === "job" ? "jobs" : page || "jobs")));
  const main = document.getElementById("main");
  main.replaceChildren();
  const note = carried;  // the Submit form's warning, for the page it opened; gone after that page
  carried = null;
  if (page === "job" && rest.length) jobPage(main, decoded(rest.join("/")), new URLSearchParams(query || "").get("project"), note);
  else if (page === "projects") projectsPage(main);
  else if (page === "notebooks") notebooksPage(main);
  else if (page === "nodes") nodesPage(main);
  else if (page === "storage") storagePage(main);
  else if (page === "submit") submitPage(main);
  else jobsPage(main);
}

window.addEventListener("hashchange", route);
route();
