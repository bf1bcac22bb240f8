"""`dtrain completion bash|zsh`: a shell script completing verbs, nouns, each verb's flags and the
names of jobs, volumes and snapshots, as `kubectl completion bash` prints one.

The words come from walking the argparse tree when the script is printed, so a verb or flag added
later is completed without touching this file. A workload's flags (`dtrain lanes train --<TAB>`) come
from workload_flags.py, a table written from the workloads' own parsers by scripts/workload_flags.py
(a test holds the two equal): those parsers live in modules that import torch, which printing the
script (at every shell start) must not load. Names are asked of `dtrain ... list --json` when TAB
is pressed, quietly and for at most COMPLETION_TIMEOUT seconds; the answer is kept under the home, and
offered when a later lookup does not answer (then not asked again for COMPLETION_RETRY seconds). zsh runs the same script through
its bashcompinit (whose compgen offers every word: zsh itself keeps those the typed start begins).
"""

from __future__ import annotations

import argparse
import re

from dtrain.cli.lookup import JOB_NOUNS
from dtrain.cli.workload_flags import WORKLOAD_FLAGS

# seconds one name lookup may take: `dtrain volume list` of a local home takes 0.4 s of CPU, but 1.8 s
# of wall time on 2 busy cores; a cluster that does not answer costs this pause, never a hung shell
COMPLETION_TIMEOUT = 5
# seconds after a lookup that did not answer in time during which the same lookup is not asked again:
# each TAB offers the last names it gave (kept under the home, in completion/) at once, instead of
# waiting COMPLETION_TIMEOUT at every TAB for a cluster that is down
COMPLETION_RETRY = 30

# The verbs whose first name is one that exists, and the list whose names it takes: the submit verbs
# name a new job, so theirs is not completed
NAMES = {"describe": "jobs", "logs": "jobs", "delete": "jobs", "suspend": "jobs", "resume": "jobs",
         "artifacts": "jobs", "exec": "jobs", "bash": "jobs", "wait": "jobs", "volume": "volumes",
         "snapshot": "snapshots"}
LISTS = {"jobs": "list", "volumes": "volume list", "snapshots": "snapshot list"}
# a metavar that lists the words a flag takes (true|false), as its help writes them
_WORDS = re.compile(r"[a-z0-9-]+(\|[a-z0-9-]+)+")


def register(sub, handler) -> None:
    """The `completion` verb; `handler(args, client)` prints `script` of the whole parser (cli.main builds it:
    this module stays below main, which imports it)."""
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)",
                       description="Print a script completing dtrain's verbs, flags and names. Load it with "
                                   "'source <(dtrain completion bash)' (or zsh), e.g. in ~/.bashrc.")
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell the script is for")
    p.set_defaults(handler=handler)


def show(parser: argparse.ArgumentParser, shell: str) -> int:
    print(script(parser, shell))
    return 0


def flags_of(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    """Each flag `parser` shows (not a hidden one: an old spelling) and what is offered after it: its
    choices, or the words its metavar names (cifar10's `--resume true|false`, which its own reader
    checks), '' for a value of its own (nothing offered: the shell's file names), None for no value.
    One spelling of a flag: `--batch_size`, the underscore alias of `--batch-size` that SageMaker's
    hyperparameters need, is accepted but not offered (TAB offered both)."""
    flags: dict[str, str | None] = {}
    for action in parser._actions:
        if action.option_strings and action.help != argparse.SUPPRESS:
            words = action.choices or (action.metavar.split("|") if isinstance(action.metavar, str)
                                       and _WORDS.fullmatch(action.metavar) else ())
            offered = None if action.nargs == 0 else " ".join(map(str, words))
            shown = [o for o in action.option_strings if "_" not in o or o.replace("_", "-") not in action.option_strings]
            flags.update(dict.fromkeys(shown, offered))
    return flags


def _walk(parser: argparse.ArgumentParser, at: str, table: dict) -> None:
    """Fill `table` for the words `at` (a command path, e.g. 'volume create'): its sub-commands (or
    its first positional's choices: `config WHAT`, `top node`), flags, and each flag's choices ('' for
    a flag taking a value of its own: nothing is offered after it)."""
    subs, choices = [], []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, child in action._name_parser_map.items():  # not .choices: notebook takes any word
                subs.append(word)
                _walk(child, f"{at} {word}", table)
        elif not action.option_strings and action.choices and not choices and "\0" not in action.choices:
            choices = [str(c) for c in action.choices]
    # a workload's flags are its own parser's (prefix_chars that no flag uses), read from their table
    flags = flags_of(parser) if parser.prefix_chars == "-" else WORKLOAD_FLAGS.get(at.removeprefix("dtrain "), {})
    shown = " ".join(flags)
    values = {o: v for o, v in flags.items() if v is not None}
    for where in [at, *(f"{at} {c}" for c in choices)]:  # `config kubernetes --<TAB>`: config's flags
        table["subs"][where] = " ".join(subs or choices) if where == at else ""
        table["flags"][where] = shown
        table["values"].update({f"{where} {o}": v for o, v in values.items()})


def _array(name: str, items: dict) -> str:
    body = "\n".join(f"  [{_quoted(k)}]={_quoted(v)}" for k, v in sorted(items.items()))
    return f"declare -gA {name}=(\n{body}\n)"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    table: dict = {"subs": {}, "flags": {}, "values": {}}
    _walk(parser, "dtrain", table)  # the root's key: bash's associative arrays take no empty one
    names = {at: NAMES[at.split()[1]] for at in table["subs"] if len(at.split()) > 1 and at.split()[1] in NAMES
             and not table["subs"][at] and not at.endswith((" create", " list"))}
    names["dtrain snapshot create"] = "volumes"  # a snapshot is made of a volume
    head = ("(( ${+functions[compdef]} )) || { autoload -U +X compinit && compinit -i; }\n"  # bashcompinit's complete needs it
            "autoload -U +X bashcompinit && bashcompinit\n") if shell == "zsh" else ""
    return head + "\n".join([
        "# dtrain completion: source <(dtrain completion bash)",
        _array("_dtrain_subs", table["subs"]), _array("_dtrain_flags", table["flags"]),
        _array("_dtrain_values", table["values"]), _array("_dtrain_names", names),
        _array("_dtrain_lists", LISTS),
        _FUNCTION.replace("TIMEOUT", str(COMPLETION_TIMEOUT)).replace("RETRY", str(COMPLETION_RETRY))
        .replace("NOUNS", " ".join(JOB_NOUNS))])  # `describe pytorchjob X` as `describe job X`


# `at` (not `path`: zsh ties $path to $PATH) is the command path read so far: the words that name a
# sub-command of the path before them; other words are flags, their values and names
_FUNCTION = r"""
# A file of the cache written as a new file of its own (noclobber: O_EXCL, which no link planted at the
# name passes) and renamed over the old, so a link someone put there is replaced, never written through
_dtrain_keep() {
  rm -f "$1.$$" 2>/dev/null
  (set -C; printf '%s\n' "$2" >"$1.$$") 2>/dev/null && mv -f "$1.$$" "$1" 2>/dev/null
}

_dtrain_list_names() {
  local words=(${_dtrain_lists[$1]}) home=() i dir=${DTRAIN_HOME:-$HOME/.dtrain} kept= now out rc since=
  for ((i = 1; i < COMP_CWORD; i++)); do  # --home, --backend and -p PROJECT of the line being typed
    case ${COMP_WORDS[i]} in
      --home|--backend|-p|--project) home+=("${COMP_WORDS[i]}" "${COMP_WORDS[i+1]}") ;;
    esac
    if [[ ${COMP_WORDS[i]} == --home ]]; then dir=${COMP_WORDS[i+1]}; fi
  done
  # the last answer of this lookup (its words: home, backend, project, list), kept under an existing home
  if [[ -d $dir ]]; then kept="$dir/completion/$(printf '%s\n' "${home[@]}" "${words[@]}" | cksum | cut -d' ' -f1)"; fi
  now=$(date +%s)
  if [[ -n $kept && -f $kept.stalled ]]; then read -r since <"$kept.stalled"; fi
  if [[ $since =~ ^[0-9]+$ ]] && (( now - since < RETRY )); then
    cat "$kept" 2>/dev/null; return  # it did not answer a moment ago: no wait at each TAB
  fi
  out=$(timeout TIMEOUT "${COMP_WORDS[0]}" "${home[@]}" "${words[@]}" --json 2>/dev/null); rc=$?
  if [[ $rc == 0 ]]; then
    out=$(printf '%s\n' "$out" | sed -n 's/^    "name": "\([^"]*\)",\{0,1\}$/\1/p')
    if [[ -n $kept ]] && mkdir -p "${kept%/*}" 2>/dev/null; then
      _dtrain_keep "$kept" "$out"; rm -f "$kept.stalled"
    fi
    printf '%s\n' "$out"
  elif [[ -n $kept ]]; then  # no answer (a cluster down, or slow): the names it gave last
    if [[ $rc == 124 ]] && mkdir -p "${kept%/*}" 2>/dev/null; then _dtrain_keep "$kept.stalled" "$now"; fi
    cat "$kept" 2>/dev/null
  fi
}

_dtrain() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} at=dtrain w i named=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    if [[ $w == -- ]]; then COMPREPLY=(); return; fi  # the command's own words: files, as the shell does
    if [[ $w != -* && " ${_dtrain_subs[$at]} " == *" $w "* ]]; then at="$at $w"
    elif [[ $w != -* && " NOUNS " != *" $w "* && ${COMP_WORDS[i-1]} != -* ]]; then named=1  # `describe job X`
    fi
  done
  # a flag whose value is optional (cifar10's --resume [true|false]) may be followed by another flag
  if [[ $prev == -* && -n ${_dtrain_values["$at $prev"]+x} && ( $cur != -* || -z ${_dtrain_values["$at $prev"]} ) ]]; then
    COMPREPLY=($(compgen -W "${_dtrain_values["$at $prev"]}" -- "$cur")); return
  fi
  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "${_dtrain_flags[$at]}" -- "$cur")); return; fi
  if [[ -n ${_dtrain_subs[$at]} ]]; then COMPREPLY=($(compgen -W "${_dtrain_subs[$at]}" -- "$cur")); return; fi
  if [[ -n ${_dtrain_names[$at]} && ( $named == 0 || $at == "dtrain delete" || $at == "dtrain wait" ) ]]; then
    COMPREPLY=($(compgen -W "$(_dtrain_list_names "${_dtrain_names[$at]}")" -- "$cur")); return
  fi
  COMPREPLY=()
}

complete -o default -F _dtrain dtrain"""
