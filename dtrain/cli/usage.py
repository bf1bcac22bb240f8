"""Usage errors on one line, with what was meant: the argparse subclass every verb's parser is made
of, and the hints for words a verb did not take (a Run:AI flag, a near miss, a command without '--')."""

from __future__ import annotations

import argparse
import difflib
import shlex
import sys

from dtrain.cli import jobs
from dtrain.cli.lookup import job_word
from dtrain.names import NAME_RULE, abbreviated, near_choice, shown


MAX_USAGE_ERROR = 400  # characters of an argparse message shown


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors on one line like every other dtrain error (exit 2), and a word
    starting with '-' and a digit read as a value in every verb (see `jobs.NEGATIVE_VALUE`)."""

    def __init__(self, *args, **kwargs):
        # No abbreviations, as kubectl's and runai's flags (pflag): `volume update x --ti` was refused as
        # ambiguous (--timeout, --tier), and a flag added later would turn a working one ambiguous too
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = jobs.NEGATIVE_VALUE  # sub-parsers are made of this class too

    def add_argument(self, *names, **kwargs):
        """As argparse's; a verb printing --json also takes kubectl's and Run:AI's `-o json` (`-o wide`: its
        table), which was "neither an option ... nor a name" or "unrecognized arguments"."""
        action = super().add_argument(*names, **kwargs)
        if "--json" in names and not {"-o", "--output"} & set(self._option_string_actions):
            super().add_argument("-o", "--output", action=OutputFormat, dest=action.dest, default=argparse.SUPPRESS,
                                 help=argparse.SUPPRESS)
        return action

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # this (sub-)parser's words, for error()
        parsed, extra = super().parse_known_args(args, namespace)
        stray = self._stray_among(parsed, extra)
        if stray is not None:  # `delete -x`: optional names, so argparse left '-x' over as unrecognized
            self.error(self._not_a_name(stray))
        if not hasattr(parsed, "options_known"):  # the innermost (sub-)parser's, the one that read the flags
            parsed.options_known = self._long_options()
        return parsed, extra

    def error(self, message: str):
        stray = self._stray_name(message)
        if stray is not None:  # `volume create -x`: argparse said only that the name was missing
            message = self._not_a_name(stray)
        elif message.startswith("the following arguments are required: ") and (unknown := self._unknown_given()):
            # `volume update work --tier fast`, `artifacts JOB --dest d`: the flag typed in place of the
            # required one went unsaid, as if nothing had been given
            hint = abbreviated(unknown, self._options_for(unknown))
            near = difflib.get_close_matches(unknown.split("=", 1)[0], self._long_options(), n=1, cutoff=0.75)
            hint = hint or (f"did you mean {near[0]}?" if near else "")
            message = f"unrecognized arguments: {unknown}{f' ({hint})' if hint else ''}; {message}"
        elif choices := self._missing_choices(message):  # `dtrain volume`: the words it takes, not a bare ACTION
            message = f"{message} (one of {choices})"
        elif near := near_choice(message):  # `dtrain sumbit`: the word meant, not a list of 25 verbs
            message = near
        elif message.endswith(": expected one argument") and (dashed := self._dashed_value(message)):
            option, word = dashed  # `--name -x`: argparse took '-x' for an option and the value as missing
            message += f" ({shown(word)} begins with '-', so it was read as an option: give it as {option}={word})"
        elif message == "argument -p/--project: expected one argument" and self.prog.endswith(" logs"):
            # kubectl's `logs -p` is the previous container's: here -p is the project, as Run:AI's
            message += " (-p names a project here, as Run:AI's does; the attempt before a restart is --previous)"
        elif message == "argument -f/--file: expected one argument" and self.prog.startswith("dtrain submit"):
            # `submit x -f -- CMD` meant as logs' -f: submit's -f is a job file
            message += " (-f names a YAML job file here: -f job.yaml; to follow a job once submitted: 'dtrain logs NAME -f')"
        if len(message) > MAX_USAGE_ERROR:  # argparse repeats what it did not take, whatever its size
            message = message[:MAX_USAGE_ERROR] + "..."
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _dashed_value(self, message: str) -> tuple[str, str] | None:
        """The option and the word after it that argparse read as an option, for "argument --to:
        expected one argument": a value beginning with '-' is given as --to=-x."""
        names = message.removeprefix("argument ").removesuffix(": expected one argument").split("/")
        given = getattr(self, "_given", [])
        for option, word in zip(given, given[1:]):
            if option in names and self._unknown_option(word):
                return option, word
        return None

    def _missing_choices(self, message: str) -> str | None:
        """The words a missing positional takes when it has a list of them (`volume`'s ACTION, `config`'s
        what): 'required: ACTION' alone named a placeholder a new user cannot guess the words for."""
        head, _, missing = message.partition("the following arguments are required: ")
        if head or not missing:
            return None
        wanted = missing.split(", ")
        lists = [a.choices for a in self._actions if not a.option_strings and a.choices is not None
                 and "\0" not in a.choices and (a.metavar or a.dest) in wanted]
        return "; ".join(", ".join(list(c)) for c in lists) or None

    def _stray_name(self, message: str) -> str | None:
        """The word given for a missing name positional (one without choices: every verb's job, volume or
        snapshot; `notebook`'s NAME-or-action, whose choices take any word) that argparse read as an
        unknown option: '-x' before any '--'."""
        head, _, missing = message.partition("the following arguments are required: ")
        names = {a.metavar or a.dest for a in self._actions
                 if not a.option_strings and (a.choices is None or "\0" in a.choices)}  # no list holds "\0"
        if head or not names & set(missing.split(", ")):
            return None
        return self._unknown_given()

    def _not_a_name(self, word: str) -> str:
        if no_all := _no_all(self.prog.removeprefix("dtrain "), word):
            return no_all
        if other := _other_tool_flag(self.prog.removeprefix("dtrain "), word):
            return other
        return f"{shown(word)} is neither an option of '{self.prog}' nor a name: names are {NAME_RULE}"

    def _stray_among(self, parsed, extra: list[str]) -> str | None:
        """A word left over that was meant as a name, for verbs whose names are optional or several
        (`delete`, `suspend`, `wait`, `snapshot verify`): '-x' with one '-' before any '--', where a
        name could still go (a name list, or an optional name not given). A '--word' is left to the
        'unrecognized arguments' line: it is an option's spelling, and that line has the verb's hints."""
        takes = any(not a.option_strings and a.choices is None and a.dest != "what"  # `list jobs`: no name
                    and (a.nargs in ("*", "+") or (a.nargs == "?" and getattr(parsed, a.dest, None) is None))
                    for a in self._actions)
        given = self._head()
        return next((w for w in extra if takes and w in given and not w.startswith("--")
                     and self._unknown_option(w)), None)

    def _unknown_given(self) -> str | None:
        """The first word before any '--' that argparse would read as an option and that is none of this parser's."""
        return next((w for w in self._head() if self._unknown_option(w)), None)

    def _head(self) -> list[str]:
        """This (sub-)parser's words before any '--' (after it: the command's own)."""
        given = getattr(self, "_given", [])
        return given[:given.index("--")] if "--" in given else given

    def _options_for(self, word: str) -> list[str]:
        """The long options `word` may have meant: with a value after it (`artifacts J --out d`), only those
        that take one (it named --output-data, a switch, where --to was missing)."""
        head = self._head()
        after = head[head.index(word) + 1:head.index(word) + 2] if word in head else []
        if "=" in word or not after or after[0].startswith("-"):
            return self._long_options()
        return [o for o in self._long_options() if self._option_string_actions[o].nargs != 0]

    def _long_options(self) -> list[str]:
        return sorted(o for o in self._option_string_actions if o.startswith("--"))

    def _unknown_option(self, word: str) -> bool:
        """A word argparse reads as an option (it begins with '-') that is none of this parser's."""
        option = word.split("=", 1)[0]
        return (word.startswith("-") and word not in ("-", "--") and not self._negative_number_matcher.match(word)
                and option not in self._option_string_actions)


class OutputFormat(argparse.Action):
    """`-o json` / `--output json` (kubectl's, Run:AI's and the AWS CLI's) as --json; `-o yaml` that same
    record as YAML (--json's dest holds "yaml", so every `if args.json` takes it, and fmt.record_text
    prints it); `-o wide` the table, which has every column already; any other format refused, naming them."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values in ("json", "yaml"):
            setattr(namespace, self.dest, True if values == "json" else "yaml")
        elif values != "wide":
            parser.error(f"{option_string} {shown(values)}: the formats here are json (as --json), yaml (the "
                         f"same record as YAML) and wide (the table, the default)")


# Where a verb's command goes, for the words argparse did not take.
_COMMAND_FORMS = {"submit": "dtrain submit NAME [options] -- COMMAND",
                  "submit-dist": "dtrain submit-dist NAME --processes N [options] -- COMMAND",
                  "submit-mpi": "dtrain submit-mpi NAME --processes N [options] -- COMMAND",
                  "exec": "dtrain exec NAME [--rank R] -- COMMAND"}


_JOB_VERBS = ("logs", "artifacts", "bash", *_COMMAND_FORMS)  # verbs taking one job's name
# Those of them that take Run:AI's noun before it (`logs job X`, as `describe job X`); not the submit
# verbs, whose name is a new job's (Run:AI's `submit` takes no noun)
_NOUN_VERBS = ("logs", "artifacts", "exec", "bash")


def _past_job_noun(args, extra: list[str]) -> list[str]:
    """`dtrain logs job X` (Run:AI's `runai describe job X` habit, which describe, delete, wait, suspend
    and resume take): argparse read 'job' as the name and left X over; X is the name. `logs job` alone
    is the job named 'job', as `describe job` is. kubectl's `logs pytorchjob/X` is X too."""
    if (args.verb in _NOUN_VERBS and getattr(args, "name", None) in jobs.JOB_NOUNS and extra
            and not extra[0].startswith("-")):
        args.name, extra = extra[0], extra[1:]
    if args.verb in _NOUN_VERBS and isinstance(getattr(args, "name", None), str):
        args.name = job_word(args.name, args.verb)
    return extra


_WATCHED = "'dtrain list' prints once: follow a job with 'dtrain logs NAME -f', or wait for its end with 'dtrain wait NAME'"
_STOPPED = ("the one form is 'dtrain delete NAME': its processes get SIGTERM (a workload checkpoints), then SIGKILL "
            "after the backend's grace period (30 s locally); --purge also forgets its record")
# Other tools' flags on the verb of theirs that dtrain's matches (kubectl's `get -w`, the AWS CLI's
# describe-training-job --training-job-name, kubectl delete's --force and --grace-period): dtrain's form
OTHER_TOOL_FLAGS = {("list", "-w"): ("kubectl", _WATCHED), ("list", "--watch"): ("kubectl", _WATCHED),
                    ("describe", "--training-job-name"): ("the AWS CLI", "name the job after the verb: dtrain describe NAME"),
                    ("delete", "--force"): ("kubectl", _STOPPED), ("delete", "--grace-period"): ("kubectl", _STOPPED)}


def _other_tool_flag(verb: str, word: str) -> str | None:
    """'FLAG is TOOL's: dtrain's form' for another tool's flag in OTHER_TOOL_FLAGS (it was 'unrecognized
    arguments' alone, or 'neither an option nor a name'), else None."""
    flag = word.split("=", 1)[0]
    if (verb, flag) not in OTHER_TOOL_FLAGS:
        return None
    tool, form = OTHER_TOOL_FLAGS[verb, flag]
    return f"{flag} is {tool}'s: {form}"


def _no_all(verb: str, word: str) -> str | None:
    """For --all (-A) on a job verb without it (README: --all takes every job of the project where the verb
    takes it): the verbs that take it; it was "neither an option ... nor a name" or only "unrecognized"."""
    if word not in ("--all", "-A") or verb not in ("wait", "logs", "describe", "exec", "bash", "artifacts"):
        return None
    jobs = f"the jobs (dtrain {verb} NAME [NAME...])" if verb == "wait" else f"the job (dtrain {verb} NAME)"
    return (f"'dtrain {verb}' takes no {word}: name {jobs}; --all is delete's, suspend's and resume's "
            f"(every job of the project), -A list's (every project's)")


def _flag_hint(args, extra: list[str]) -> str:
    """'; <what to type>' for the first unknown flag that is Run:AI's or close to one of the verb's own
    (`--proceses 2`, whose '2' made the hint say that the command goes after '--'), else ''."""
    for word in extra:
        flag = word.split("=", 1)[0]
        if not flag.startswith("-") or jobs.NEGATIVE_VALUE.match(word) or flag in ("-", "--"):
            continue
        if args.verb in _COMMAND_FORMS and args.verb != "exec" and flag in jobs.RUNAI_FLAGS:
            return f"; {flag} is Run:AI's: {jobs.RUNAI_FLAGS[flag].format(verb=args.verb)}"
        if args.verb in _COMMAND_FORMS and args.verb != "exec" and flag in jobs.KUBECTL_FLAGS:
            return f"; {flag} is kubectl's: {jobs.KUBECTL_FLAGS[flag]}"
        if args.verb in _COMMAND_FORMS and args.verb != "exec" and flag in jobs.LAUNCHER_FLAGS:
            form = _COMMAND_FORMS["submit-mpi" if args.verb == "submit-mpi" else "submit-dist"]
            return f"; {flag} is {jobs.LAUNCHER_FLAGS[flag]}'s: give --processes N and it is started for you ({form})"
        if args.verb in _COMMAND_FORMS and args.verb != "exec" and flag in jobs.WATCH_FLAGS:
            return f"; {jobs.WATCH_FLAGS[flag].format(verb=args.verb)}"
        if no_all := _no_all(args.verb, flag):
            return f"; {no_all}"
        if other := _other_tool_flag(args.verb, flag):
            return f"; {other}"
        if whole := abbreviated(word, getattr(args, "options_known", [])):
            return f"; {whole}"
        near = difflib.get_close_matches(flag, getattr(args, "options_known", []), n=1, cutoff=0.75)
        if near:
            return f"; did you mean {near[0]}?"
    return ""


def _several_processes(args, extra: list[str]) -> str | None:
    """'' for submit-dist's --processes or --launcher given to submit, 'did you mean --processes? ' for a
    misspelling of one that is near none of submit's own flags (`--proceses 2` was told that the command
    goes after '--', `--proceses=2` nothing), else None."""
    flags = [w.split("=", 1)[0] for w in extra if w.startswith("--")]
    if {"--processes", "--launcher"} & set(flags):
        return ""
    own = getattr(args, "options_known", [])
    for flag in flags:
        near = difflib.get_close_matches(flag, ["--processes", "--launcher"], n=1, cutoff=0.75)
        if near and not difflib.get_close_matches(flag, own, n=1, cutoff=0.75):
            return f"did you mean {near[0]}? "
    return None


def _top_abbreviation(head: list[str]) -> str | None:
    """'--back (flags are not abbreviated: ...)' for a start of a top-level flag before the verb."""
    i = 0
    while i < len(head) and head[i].startswith("--"):
        if head[i] in ("--home", "--backend"):
            i += 2
            continue
        if hint := abbreviated(head[i], ["--backend", "--help", "--home", "--version"]):
            return f"{head[i]} ({hint})"
        i += 1
    return None


def _backend_first(head: list[str], extra: list[str]) -> str | None:
    """`head` (a command line's words before '--') with the --backend that the verb did not take
    (`extra` holds it) moved before the verb, where the top parser takes it; None without one."""
    for i, word in enumerate(head):
        if word.split("=", 1)[0] == "--backend" and word in extra:
            taken = 1 if "=" in word or i + 1 == len(head) else 2
            given = head[i:i + taken] if taken == 2 or "=" in word else [word, "BACKEND"]
            moved = given + head[:i] + head[i + taken:]
            return " ".join(shlex.quote(w) for w in moved)[:MAX_USAGE_ERROR]
    return None


def _loose_words(extra: list[str]) -> list[str]:
    """The words left over that are no unknown flag's value: `--ttl-after-finish 1h` is one flag
    with its value (they said "the command goes after '--'", the command being there already);
    `python train.py` given without '--' is the command."""
    return [w for i, w in enumerate(extra) if not w.startswith("-")
            and not (i and extra[i - 1].startswith("-") and "=" not in extra[i - 1])]


def unrecognized(args, extra: list[str], head: list[str] | None = None) -> str:
    """The one line for words no option of the verb takes, naming the verb's own help; a word
    that is not an option on a verb that runs a command is most likely that command, given
    without '--' (`dtrain submit train python train.py`)."""
    prog = " ".join(["dtrain", args.verb, *([args.action] if isinstance(getattr(args, "action", None), str) else [])])
    words = " ".join(extra)
    if len(words) > MAX_USAGE_ERROR:
        words = words[:MAX_USAGE_ERROR] + "..."
    hint = ""
    if moved := _backend_first(head or [], extra):  # submit, volume and snapshot take it after the verb
        hint = f"; '{prog}' takes --backend before the verb: dtrain {moved}"
    elif args.verb in _JOB_VERBS and getattr(args, "name", None) in ("job", "jobs") and not extra[0].startswith("-"):
        hint = f"; '{prog}' takes the job's name alone: {prog} {extra[0][:60]}"  # Run:AI's `describe job X`
    elif args.verb == "list" and not extra[0].startswith("-") and not jobs.NEGATIVE_VALUE.match(extra[0]):
        # kubectl's `get pytorchjob X`: one job is described, not listed
        hint = f"; 'dtrain list' takes no job's name: see one job with 'dtrain describe job {extra[0][:60]}'"
    elif args.verb == "submit" and (meant := _several_processes(args, extra)) is not None:
        hint = f"; {meant}a job of several processes is submitted with {_COMMAND_FORMS['submit-dist']}"
    elif args.verb == "exec" and {"-i", "-t", "-it", "-ti", "--stdin", "--tty"} & set(extra):
        hint = ("; 'dtrain exec' takes no -i/-t (kubectl's, Run:AI's): locally the command always reads this terminal, "
                "so drop them: dtrain exec NAME -- bash")
    elif flag_hint := _flag_hint(args, extra):
        hint = flag_hint
    elif args.verb in _COMMAND_FORMS and _loose_words(extra):
        hint = f"; the command goes after '--': {_COMMAND_FORMS[args.verb]}"
    return f"{prog}: error: unrecognized arguments: {words}{hint} (see '{prog} --help')"


# Verbs of Run:AI's and kubectl's CLIs that dtrain spells otherwise: named in one line, not argparse's list
OTHER_VERBS = {
    "attach": "follow a job's output with 'dtrain logs JOB -f', or open a shell with 'dtrain bash JOB'",
    "get": "list with 'dtrain list' (jobs), 'dtrain volume list' or 'dtrain snapshot list'",
    "status": "see a job's status with 'dtrain describe job JOB' or 'dtrain list'",
    "stop": "stop a job for now with 'dtrain suspend JOB' (it goes on with 'dtrain resume JOB'), or for good with "
            "'dtrain delete JOB'",
    "kill": "stop a job with 'dtrain delete JOB'",
    "rm": "delete a job with 'dtrain delete JOB'",
    "run": "submit a job with 'dtrain submit JOB -- COMMAND'",
    "apply": "submit a job file with 'dtrain submit -f FILE'",
    "create": "submit a job with 'dtrain submit', make a volume with 'dtrain volume create' or a project with "
              "'dtrain project create'",
    "cp": "copy a job's model folder with 'dtrain artifacts JOB --to DIR'",
    "version": "print the version with 'dtrain --version'",
    "help": "help is the --help flag, of dtrain (every verb) or of a verb (its options, e.g. 'dtrain submit --help')",
}
