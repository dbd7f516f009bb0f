"""`kraftsman cluster cordon|uncordon|unregister-broker`: the broker-removal steps by hand.

A remove-brokers plan applied with `kraftsman apply` cordons and verifies by itself
(commands/removal.py); these commands are for the rest: cordoning ahead of a drain planned
elsewhere, undoing it, and — once the broker processes are gone — unregistering them so that
describe cluster is clean (KRaft keeps a stopped broker registered, fenced, for good). They
work on the embedded cluster and on a real one (--bootstrap-server) alike; the rules are
controller_core/orchestration/brokers_out.py's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from controller_core.orchestration import brokers_out
from kraftsman.cli_errors import UsageError
from kraftsman.commands.target import opened


def add_parsers(c_sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    for name, helptext in (
            ("cordon", "cordon brokers: no new replica is placed on them (KIP-1066, "
                       "metadata.version 4.3-IV0+)"),
            ("uncordon", "undo `cluster cordon`")):
        p = c_sub.add_parser(name, help=helptext)
        common(p)
        p.add_argument("brokers", type=int, nargs="+", metavar="BROKER_ID")
        p.set_defaults(handler=cmd_cordon if name == "cordon" else cmd_uncordon)
    p = c_sub.add_parser(
        "unregister-broker",
        help="UnregisterBroker: take a stopped, drained broker out of describe cluster")
    common(p)
    p.add_argument("broker", type=int, metavar="BROKER_ID")
    p.set_defaults(handler=cmd_unregister)


def _emit(args: argparse.Namespace, data: Any, lines: list[str]) -> None:
    from kraftsman.commands.views import emit
    emit(args, data, lambda: lines)


def cmd_cordon(args: argparse.Namespace) -> int:
    with opened(args) as c:
        out = brokers_out.cordon(c, args.brokers)
    if out.problems:
        raise UsageError(list(out.problems))
    lines = [out.note] if out.note else [f"broker {b}: {brokers_out.CORDONED}"
                                         for b in out.cordoned]
    _emit(args, {"cordoned": list(out.cordoned), "note": out.note}, lines)
    return 0


def cmd_uncordon(args: argparse.Namespace) -> int:
    with opened(args) as c:
        problems = brokers_out.uncordon(c, args.brokers)
    if problems:
        raise UsageError(problems)
    _emit(args, {"uncordoned": args.brokers},
          [f"broker {b}: uncordoned" for b in args.brokers])
    return 0


def cmd_unregister(args: argparse.Namespace) -> int:
    with opened(args) as c:
        r = brokers_out.unregister(c, args.broker)
    if not r.ok:
        raise UsageError(f"broker {args.broker}: {r.message or r.error.name} "
                         f"({r.error.name})")
    _emit(args, {"broker": args.broker, "unregistered": True},
          [f"broker {args.broker}: unregistered; describe cluster no longer lists it"])
    return 0
