"""The `kraftsman` command line: operator, local reconciliation, Kafka-tool-like views, plans."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from controller_core.errors import KafkaApiError
from kraftsman.cli_errors import UsageError, missing_extra
from kraftsman.local_store import StateLock

# Each module in kraftsman.commands registers its own subcommands.
COMMAND_MODULES = [
    "kraftsman.commands.apply",
    "kraftsman.commands.views",
    "kraftsman.commands.quorum",
    "kraftsman.commands.crds",
    "kraftsman.commands.operator",
    "kraftsman.commands.plan",
    "kraftsman.commands.rebalance",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kraftsman",
        description="Declarative day-2 operations for Kafka clusters (embedded or real).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _state_lock(args: argparse.Namespace) -> contextlib.AbstractContextManager[object]:
    """One command at a time on a state directory (the operator's own directory aside)."""
    state_dir = getattr(args, "state_dir", None)
    # The operator and its planner Job share a volume the operator owns (the Job's mount is
    # read-only): neither takes the CLI's lock on it.
    if state_dir is None or args.command in ("operator", "rebalance"):
        return contextlib.nullcontext()
    words = [args.command] + [w for w in (getattr(args, "action", None),
                                          getattr(args, "what", None)) if isinstance(w, str)]
    lock = StateLock(state_dir, "kraftsman " + " ".join(words),
                     create=bool(getattr(args, "creates_state", False)))
    args.state_lock = lock
    return lock


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        with _state_lock(args):
            return handler(args)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as the Kafka tools and coreutils do.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KafkaApiError as e:
        print(f"error: {e.error.name}: {e.message}", file=sys.stderr)
        return 1
    except UsageError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        return e.exit_code
    except ModuleNotFoundError as e:
        message = missing_extra(args.command, e.name or "")
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; state on disk is consistent — run the command again to go on",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
