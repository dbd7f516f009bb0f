"""Errors the CLI reports to a person: one line per problem on stderr, exit code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input. Each problem names the resource and the field, and says how to fix it."""

    exit_code = 2

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))
