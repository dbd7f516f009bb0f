"""Subcommands of the `kraftsman` CLI; each module exposes ``register(subparsers)``.

A subcommand's handler takes the parsed ``argparse.Namespace`` and returns an exit code.
Bad input is reported with :class:`kraftsman.cli_errors.UsageError` (exit 2), never a traceback.
"""
