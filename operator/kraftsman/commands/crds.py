"""`kraftsman crds generate [--check]`: write (or verify) the CRDs generated from the models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kraftsman import crdgen
from kraftsman.cli_errors import UsageError


def register(subparsers: Any) -> None:
    crds = subparsers.add_parser("crds", help="CustomResourceDefinitions of kraftsman.io")
    sub = crds.add_subparsers(dest="crds_command", metavar="ACTION")
    sub.required = True
    gen = sub.add_parser(
        "generate", help="render crds/, the chart's CRD templates and the Argo CD health scripts")
    gen.add_argument("--root", type=Path, default=Path("."),
                     help="repository root holding crds/, charts/ and manifests/ (default: .)")
    gen.add_argument("--check", action="store_true",
                     help="write nothing; exit 1 and show a diff if a committed file is stale")
    gen.set_defaults(handler=_generate)


def _generate(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not root.is_dir():
        raise UsageError(f"--root {root}: not a directory; pass the repository root")
    if args.check:
        stale = crdgen.stale_files(root)
        for diff in stale:
            print(diff, file=sys.stderr)
        if stale:
            print(f"{len(stale)} generated file(s) are stale; run `kraftsman crds generate`",
                  file=sys.stderr)
            return 1
        print(f"{len(crdgen.render_all())} generated files are up to date")
        return 0
    written = crdgen.write_all(root)
    for rel in written:
        print(f"wrote {rel}")
    if not written:
        print("nothing to do: every generated file is up to date")
    return 0
