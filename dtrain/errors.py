"""One exception tree for every user-facing mistake.

    DtrainError                 base: the CLI prints str(err) on one line, exits 2
    ├── SpecError               a malformed flag, YAML field or SDK argument
    │   └── Worded              one that names the input as the door it came through spells it
    ├── NotFoundError           an unknown job, volume, snapshot or project
    ├── ConflictError           a name clash, a volume in use, a restore onto an existing volume
    │   └── NotReadyError       a Running notebook whose Jupyter does not serve yet, a Running job's rank
    │                           (pod) still being launched: asking again may work
    ├── QuotaError              a request larger than a project's quota or the machine
    │   └── WordedQuota         one that names the spec's arguments as the door spells them (--cpu, cpu=)
    ├── SetupError              this machine lacks a tool (bwrap, mpirun, torchrun), a package or namespace
    │                           support (EnvironmentError_, its name before, is the same class)
    ├── DataError               a malformed label line, image or archive; a checksum mismatch
    ├── StorageError            a full disk or a damaged snapshot store
    ├── BackendError            a cluster or cloud API refused a request
    │   └── UnavailableError    it gave no answer or asked to retry later (dropped, 429, 5xx)
    ├── NotSupportedError       the chosen backend has no such verb (e.g. in-place restore, dry run)
    ├── JobFailedError          a job a caller waited on (a pipeline step) ended Failed or Deleted
    └── WaitTimeoutError        `wait` ran out of time (also a built-in TimeoutError); the job goes on
                                (TimeoutError_, its name before, is the same class)

Every message names the bad value and says how to fix it.
"""


class DtrainError(Exception):
    """Base of every error dtrain raises on purpose."""


class SpecError(DtrainError, ValueError):
    """A job, volume or snapshot description is malformed."""


def said(words, door: str) -> str:
    """`words(door)`, or as the door says it where it has its own way (wording.FileDoor: led by the file)."""
    says = getattr(door, "said", None)
    return says(words) if says is not None else words(door)


class Worded(SpecError):
    """A refusal that names what was given as the door it came through spells it: `words(door)` says it for
    "sdk" (an argument, a field), "cli" (a flag; a job file's field as written, wording.FileDoor) or "http" (a
    body, answered as the CLI where said so).
    Raised in `door`'s words; whoever knows the door (JobSpec.from_dict's door, Client.door) says it again
    with `in_words(door)`."""

    def __init__(self, words, door: str = "sdk"):
        self.words = words
        super().__init__(said(words, door))

    def in_words(self, door: str) -> "Worded":
        return Worded(self.words, door)


class NotFoundError(DtrainError, LookupError):
    """A named object does not exist."""


class ConflictError(DtrainError):
    """The request clashes with what is stored (a name in use, a volume in use)."""


class NotReadyError(ConflictError):
    """A Running notebook's Jupyter is not serving yet (starting, or started again on another port), or
    a Running job's rank (pod) is still being launched: exec and `notebook open --wait` ask again."""


class QuotaError(DtrainError):
    """A request asks for more than a project or the machine can give."""


class WordedQuota(QuotaError):
    """A QuotaError that names the spec's arguments as the door it came through spells them, as Worded does:
    a backend raises it in the CLI's words (--cpu), and the Client says it again in its own door's
    (`in_words(door)`: the SDK's cpu=, the HTTP API's as the CLI)."""

    def __init__(self, words, door: str = "cli"):
        self.words = words
        super().__init__(said(words, door))

    def in_words(self, door: str) -> "WordedQuota":
        return WordedQuota(self.words, door)


def said_as(err: Exception, door: str) -> tuple[type, str]:
    """`err`'s message in `door`'s words, and a class that takes that message alone (a Worded's SpecError, a
    WordedQuota's QuotaError, else its own): for whoever says a refusal again in other words (a pipeline's)."""
    if isinstance(err, (Worded, WordedQuota)):
        return (QuotaError if isinstance(err, WordedQuota) else SpecError), str(err.in_words(door))
    return type(err), str(err)


class SetupError(DtrainError, RuntimeError):
    """This machine lacks a tool, package or kernel feature the request needs; the message names how to
    install or enable it."""


# Its name before: a traceback said `dtrain.errors.EnvironmentError_: ...`, a trailing '_' that reads as
# private and a stand-in for the built-in EnvironmentError (an OSError, which it is not); `except
# EnvironmentError_` still catches it (the same class).
EnvironmentError_ = SetupError


class DataError(DtrainError, ValueError):
    """Input data is malformed: a label line, an image, an archive, a checksum."""


class StorageError(DtrainError, OSError):
    """The storage layer failed: a full disk, a damaged object."""


class BackendError(DtrainError, RuntimeError):
    """A remote API (Kubernetes, SageMaker) refused or failed a request."""


class UnavailableError(BackendError):
    """The API gave no answer, or asked to be asked again later (429, 5xx): a poll may retry it."""


class JobFailedError(DtrainError, RuntimeError):
    """A job that a caller waited on (a pipeline step) ended Failed or Deleted; names its last log lines."""


class NotSupportedError(DtrainError):
    """The chosen backend does not offer this verb; the message names another way or backend."""


class WaitTimeoutError(DtrainError, TimeoutError):
    """`wait` ran out of time; the job goes on. `look`: the command its message names to look
    further (describe job for a job still Pending, logs for a running one)."""

    def __init__(self, message: str, look: str | None = None):
        super().__init__(message)
        self.look = look


# Its name before: a traceback said `dtrain.errors.TimeoutError_: ...`, a name whose trailing '_' reads as
# private and a stand-in for the built-in; `except TimeoutError_` still catches it (the same class).
TimeoutError_ = WaitTimeoutError

# The HTTP API's words for them before the classes' renames: what a client matches stays.
_KINDS = {WaitTimeoutError: "TimeoutError", SetupError: "EnvironmentError"}


def kind_of(err: BaseException) -> str:
    """The `kind` an HTTP answer's error body names: the class's name, or what a class renamed read before
    (TimeoutError, EnvironmentError)."""
    return _KINDS.get(type(err), type(err).__name__)
