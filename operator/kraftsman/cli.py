"""The `kraftsman` command line: operator, local reconciliation, Kafka-tool-like views, plans."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from controller_core.errors import KafkaApiError
from kraftsman.cli_errors import UsageError

# Each module in kraftsman.commands registers its own subcommands.
COMMAND_MODULES = [
    "kraftsman.commands.apply",
    "kraftsman.commands.views",
    "kraftsman.commands.quorum",
    "kraftsman.commands.crds",
    "kraftsman.commands.operator",
    "kraftsman.commands.plan",
]


# Modules of the optional extras (pyproject.toml), and the extra that brings each.
OPTIONAL_MODULES = {
    "kopf": "operator", "kubernetes": "operator",
    "pyspark": "plan", "pandas": "plan", "pyarrow": "plan", "matplotlib": "plan", "numpy": "plan",
}


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UsageError as e:
        for problem in e.problems:
            print(f"error: {problem}", file=sys.stderr)
        return e.exit_code
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        extra = OPTIONAL_MODULES.get(top)
        if extra is None:
            raise
        print(f"error: `kraftsman {args.command}` needs {top}, which comes with the "
              f"'{extra}' extra: pip install 'kraftsman[{extra}]'", file=sys.stderr)
        return 2
    except KafkaApiError as e:  # a cluster refused or could not answer mid-command
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; state on disk is consistent — run the command again to go on",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
