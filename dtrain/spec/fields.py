"""The rules every job field shares (pure): text without NUL bytes and in UTF-8, true or false, an
image reference, a notebook's idle timeout, and the bounds on the numbers a job asks for (--processes,
--gpu, --cpu, --memory, --max-restarts) with their refusals."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from dtrain.errors import SpecError, Worded
from dtrain.names import STORED, given_as, named, parse_least_size, shown, written
from dtrain.numbers import exact


# Bounds on what a user can ask for: above any real node or job, low enough that nothing
# downstream (a rank table, a loop over processes, a restart loop) can be made to run away.
# MAX_PROCESSES (names.py's) is the one bound on a job's processes.
MAX_GPU_PER_PROCESS = 16
MIN_CPU, MAX_CPU = 0.01, 1024  # 0.01: the smallest share a cgroup quota (1 ms per 100 ms) enforces
MIN_MEMORY = 4 * 2**20  # 4Mi: less than a process (an interpreter, a shell) needs to start
MEMORY_EXAMPLE = "8Gi"  # the --memory every refusal of one suggests (the flag's help says it too)
MAX_RESTARTS = 100
# A notebook's --idle-timeout, in seconds: Jupyter looks for activity once a minute, and a month is
# beyond any session that is still someone's.
MIN_IDLE_TIMEOUT, MAX_IDLE_TIMEOUT = 60, 30 * 86400

MAX_TEXT = 65536  # one command word, env value or path
# The command's words and the environment together: the kernel refuses to start a program whose
# arguments and environment pass ARG_MAX (2 MiB with the usual 8 MiB stack), and the launcher and
# the host add their own; a Kubernetes object must fit etcd's 1.5 MiB.
MAX_ARGS_ENV = 1 << 20


def _text(value, what: str, *, fix: str = "") -> str:
    """A string without NUL bytes (the kernel cuts argv, env and paths at the first NUL)."""
    if not isinstance(value, str):
        raise SpecError(f"invalid {what} {shown(value)}: must be a string{fix}")
    if "\0" in value or len(value) > MAX_TEXT:
        raise SpecError(f"invalid {what} {shown(value)}: must hold no NUL byte and at most {MAX_TEXT} characters")
    try:  # what is stored, shown and sent (the API, Kubernetes, SageMaker) is UTF-8
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(f"invalid {what} {shown(value)}: it is not valid UTF-8 text (a raw byte or a lone "
                        f"surrogate); write it in UTF-8") from None
    return value


def as_text(value) -> str:
    """`value` as a Python caller writes the string a text field takes instead: 1 -> '1', True -> 'true'."""
    if isinstance(value, bool):
        return repr(str(value).lower())
    return repr(str(value)) if isinstance(value, (int, float)) else "'...'"


def _python_text(value, what: str, example, *, yaml: str) -> str:
    """A field's text, where one that is no string is refused in the words of the door it came through
    (errors.Worded): the SDK's with `example(text)` (how Python writes it, e.g. env={'A': '1'}), the CLI's
    and the HTTP API's as they were, `yaml` (a job file's fix: ' (quote it in YAML)') after them."""
    if not isinstance(value, str):
        raise Worded(lambda door: f"invalid {what} {shown(value)}: must be a string{yaml}" if door != "sdk"
                     else f"invalid {what} {shown(value)}: must be a string, e.g. {example(as_text(value))}")
    return _text(value, what)


def at_door(check):
    """`check(door)`, a pure check whose refusal names what it checks as `door` spells it (names.FLAGS): its
    refusal worded by door (errors.Worded), raised in the SDK's words; whoever knows the door says it again."""
    try:
        return check("sdk")
    except Worded:
        raise
    except SpecError:
        def words(door: str) -> str:
            try:
                check(door)
            except SpecError as err:
                return str(err)
            raise AssertionError(f"{check} refused at the SDK's door but not at {door!r}")  # pure: the same twice
        raise Worded(words) from None


def named_at_door(check, arg: str):
    """`check(name)`, a pure check naming what it checks `name`: at_door's, naming argument `arg` as each
    door does (names.named): the SDK's working_dir, the CLI's --working-dir (the HTTP body's too)."""
    return at_door(lambda door: check(named(arg, door)))


# An image reference as the kubelet and container runtimes parse it (the distribution/reference
# grammar): [HOST[:PORT]/]PATH[:TAG][@DIGEST], PATH lower-case, the name (HOST and PATH) at most 255
# characters. Kubernetes stores any string without outer spaces and its kubelet then refuses the
# pod (InvalidImageName: the job waits for good); SageMaker takes any 255 characters and fails the
# job minutes later; the local backend never reads it.
_IMAGE_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*" \
              r"|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(rf"(?P<name>(?:{_IMAGE_HOST}/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*)(?::\w[\w.-]{{0,127}})?"
                      rf"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?", re.ASCII)
MAX_IMAGE_NAME = 255


def check_image(value, param: str, *, required: bool = False) -> str:
    """An image reference ('' too where not `required`: the backend's configured image stands in),
    refused up front rather than by a pod or a job that never starts."""
    if value == "" and not required:
        return value
    match = IMAGE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None or len(match["name"]) > MAX_IMAGE_NAME:
        empty = "" if required else ", or '' for the backend's configured image"
        raise SpecError(f"invalid {param} {shown(value)}: use an image reference such as "
                        f"registry.example.com/team/image:1.0 ([HOST/]PATH[:TAG][@sha256:DIGEST], PATH lower-case, "
                        f"HOST/PATH at most {MAX_IMAGE_NAME} characters){empty}")
    return value


def idle_timeout_refusal(typed, door: str = "cli") -> SpecError:
    """The refusal of a notebook's idle timeout (`typed`: as the user wrote it: the SDK's and the HTTP
    API's seconds, the CLI's duration), in the words of `door`: the SDK's idle_timeout= in seconds; the
    CLI's --idle-timeout, which takes a duration too and which the HTTP API's answer names."""
    if door == "sdk":
        return SpecError(f"invalid idle_timeout {shown(typed)}: use a whole number of seconds from {MIN_IDLE_TIMEOUT} "
                         f"(1m) to {MAX_IDLE_TIMEOUT} (30d), e.g. idle_timeout=3600 (1h)")
    unit = "" if isinstance(typed, str) else " (seconds)"
    return SpecError(f"invalid {named('idle_timeout', door)} {shown(typed)}{unit}: give 1m to 30d, i.e. a whole number of seconds "
                     f"from {MIN_IDLE_TIMEOUT} to {MAX_IDLE_TIMEOUT}, e.g. 3600 (1h)")


def check_idle_timeout(value, typed=None, door: str = "cli") -> int:
    """A notebook's idle timeout: whole seconds from MIN_IDLE_TIMEOUT to MAX_IDLE_TIMEOUT (`value`: a
    Fraction for the CLI's exact duration, '1.5h'; None, a duration the CLI could not read). The CLI's
    plain seconds ('10') are named as the number, as the SDK and the HTTP API name theirs; the refusal
    in `door`'s words (idle_timeout_refusal)."""
    whole = not isinstance(value, bool) and isinstance(value, (int, Fraction)) and value == int(value)
    if not whole or not MIN_IDLE_TIMEOUT <= value <= MAX_IDLE_TIMEOUT:
        if isinstance(typed, str) and re.fullmatch(r"[0-9]{1,20}", typed.strip(), re.ASCII):
            typed = written(int(typed), typed.strip())
        raise idle_timeout_refusal(value if typed is None else typed, door)
    return int(value)


def check_cpu(value, *, stored: bool) -> None:
    """--cpu: CPU threads per process, from MIN_CPU (above 0 where `stored`) to MAX_CPU as typed
    (1024.0000000000001 is over; NaN compares false); refused naming it as its door does (at_door)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not exact(0 if stored else MIN_CPU) <= exact(value) <= MAX_CPU or value == 0):
        at_door(lambda door: _refuse(f"invalid {named('cpu', door)} {shown(value)}: use a number of CPU threads from "
                                     f"{MIN_CPU} to {MAX_CPU}, e.g. {given_as('cpu', '2', door)} or "
                                     f"{given_as('cpu', '0.5', door)}"))


def check_memory(value, *, stored: bool) -> None:
    """--memory: a Kubernetes quantity from MIN_MEMORY (1 byte where `stored`), refused naming it as its
    door does (at_door): the SDK's memory, the CLI's --memory."""
    if value is not None:
        at_door(lambda door: parse_least_size(
            _text(value, named("memory", door), fix=" such as '512Mi'" if door == "sdk" else " such as 512Mi"),
            named("memory", door), minimum=1 if stored else MIN_MEMORY, example=MEMORY_EXAMPLE))


def _refuse(message: str):
    raise SpecError(message)


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"invalid {what} {shown(value)}: must be true or false (unquoted in YAML), "
                        f"not a string or number")
    return value


# Set while a spec is read back from where a backend kept it (JobSpec.from_stored): names.STORED.
_STORED = STORED


def _keys(keys: list) -> str:
    """Mapping keys for a message: short words as they are, anything else as shown(); five at most."""
    words = [k if isinstance(k, str) and len(k) <= 40 and k.isprintable() else shown(k) for k in keys[:5]]
    return ", ".join(words) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def _check_gpu(value) -> None:
    """--gpu: whole GPUs per process. Run:AI also takes a fraction of one (--gpu 0.5), which is not
    shared out here: named as such wherever it comes from (a flag, a job file, the SDK, the HTTP API),
    in the words of its door (the SDK's gpu=)."""
    if (isinstance(value, float) and math.isfinite(value) and 0 < value < MAX_GPU_PER_PROCESS
            and exact(value).denominator != 1):  # as typed: 1.0000000000000001 is a fraction though float() says 1.0
        at_door(lambda door: _refuse(
            f"{given_as('gpu', shown(value), door)} is a fraction of a GPU, and GPUs are not shared between jobs "
            f"here: give whole GPUs per process ({given_as('gpu', '1', door)}), or leave {named('gpu', door)} out to "
            f"run on CPUs"))
    _check_int(value, "gpu", 0, MAX_GPU_PER_PROCESS)


_EXAMPLES = {"processes": 4, "gpu": 1, "max_restarts": 3}


def _check_int(value, arg: str, minimum: int, maximum: int) -> None:
    """A whole-number field (processes, gpu, max_restarts) from `minimum` to `maximum`, refused naming it as
    its door does (at_door)."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        at_door(lambda door: _refuse(f"invalid {named(arg, door)} {shown(value)}: use a whole number from {minimum} "
                                     f"to {maximum}, e.g. {given_as(arg, str(_EXAMPLES[arg]), door)}"))
