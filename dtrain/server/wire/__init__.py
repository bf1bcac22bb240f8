"""Every HTTP payload, in one package: pydantic lives here and nowhere else in dtrain. Each is
`wire.NAME` (the routes' spelling); they live by family: common.py (name patterns, parameters,
validators, Error and the statuses, the Warning header), jobs.py, notebooks.py, storage.py
(volumes, snapshots, lineage) and cluster.py (nodes, projects, backends).

Requests are checked twice on purpose: the models below reject wrong types and out-of-range
numbers with a 422 before anything runs, then the typed `JobSpec` (the same one the CLI and
the SDK build) applies dtrain's own rules and messages. Responses are built from the
client's frozen records by the `*_out` functions.
"""

from __future__ import annotations

from dtrain.server.wire.common import (STATUSES,  # noqa: F401  (re-exported)
                                       STATUS_FILTER,
                                       NAME, SIZE, CLASS, CLAIM, JobName, NotebookName, VolumeName, ClaimName,
                                       SnapshotName, SnapshotProject, StorageProject, LineageProject, JobProject,
                                       JobBackend, NAMED, Count, MaybeCount, Real, QueryWhole, QueryReal, QueryTyped,
                                       Error, ERRORS, CHANGES, warning_header, warn, MAX_OFFSET, MAX_PAGE, MAX_TIME,
                                       LOCATION, locate, page_limit, page_offset, total_count)
from dtrain.server.wire.jobs import (TaintEffect,  # noqa: F401  (re-exported)
                                     TolerationIn, SpecIn, Process, Event, DataSource, Job, SUBMIT_WARNING,
                                     TOTAL_COUNT, JOBS_WARNING, LogLine, LogFailure, LOG_ITEM, job_out)
from dtrain.server.wire.notebooks import (NotebookIn,  # noqa: F401  (re-exported)
                                          NotebookUrl)
from dtrain.server.wire.storage import (_DIGITS,  # noqa: F401  (re-exported)
                                        VOLUME_SIZE, VolumeIn, VolumeUpdate, SnapshotIn, RestoreTo, RestoreInPlace,
                                        IN_PLACE_CLASS, RESTORE_BODY, Volume, StorageClass, Snapshot, VolumeDeleting, Freed, Damage,
                                        VerifyReport, Change, LineageNode, LineageEdge, Lineage)
from dtrain.server.wire.cluster import (ProjectIn,  # noqa: F401  (re-exported)
                                        PROJECTS_WARNING, PROJECT_MADE_WARNING, NODES_WARNING, Gpu, Node, GpuSample,
                                        Project, project_out, node_out, ForgotBackend, DeletedProject)
