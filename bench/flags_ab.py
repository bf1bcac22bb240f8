"""Two sets of training flags side by side: the same data-parallel lanes training by plain torchrun, taking turns.

    .venv/bin/python bench/flags_ab.py --data-dir DIR --a=--bf16 --b=--no-bf16 --steps 300 --rounds 2 -- --recipe demo

Each round runs the training twice, the order alternating (a, b, then b, a), the way
bench/platform_ab.py runs its `by hand` side: `torchrun --standalone --nproc-per-node N`, each rank
pinned to core LOCAL_RANK with `taskset`, OMP_NUM_THREADS=1. Both sides get the arguments after
`--`; side a adds --a's, side b adds --b's (one string each, split as a shell would; empty: the
recipe's own defaults). The figure is that of `dtrain bench scaling`: rank 0's images/s from the
end of the warm-up steps to the last step (its metrics.jsonl). Prints one JSON line per round and a
summary: each side's median and the median of the per-round ratios a / b. The runs' outputs go in
a temporary folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import ab  # the parser (bench/ is this script's folder, first on sys.path)
from platform_ab import add_training_args, by_hand, check_training_args, scratch, summary, take_turns

SIDES = ("a", "b")


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default="", help="training flags of side a, e.g. --a=--bf16")
    parser.add_argument("--b", default="", help="training flags of side b, e.g. --b=--no-bf16")
    add_training_args(parser, rounds=2)
    args = parser.parse_args(argv)
    flags = {}
    for side in SIDES:
        try:
            flags[side] = shlex.split(getattr(args, side))
        except ValueError as e:
            parser.error(f"--{side} {getattr(args, side)!r} cannot be split into arguments ({e}): quote it as a shell would")
    if flags["a"] == flags["b"]:
        parser.error("--a and --b give the same flags: give each side its own, e.g. --a=--bf16 --b=--no-bf16")
    check_training_args(parser, args)
    with scratch("flags-ab-") as work:
        def run(side: str, _round: int, out: Path) -> None:
            by_hand(argparse.Namespace(**{**vars(args), "extra": [*args.extra, *flags[side]]}), out)

        rates = take_turns(args, work, SIDES, run)
        print(json.dumps({**summary(args, rates, "a_over_b"), "a": flags["a"], "b": flags["b"]}), flush=True)


if __name__ == "__main__":
    main()
