"""How each patch outcome looks in a table: a module of its own, so the console (which every command
imports) does not import the result types (``list`` needs none of them)."""

from __future__ import annotations

from patchkit.results import Outcome

OUTCOME_STYLE: "dict[Outcome, str]" = {
    Outcome.APPLIED: "green",
    Outcome.ALREADY_APPLIED: "green",
    Outcome.UPSTREAM: "cyan",
    Outcome.NOT_APPLICABLE: "yellow",
    Outcome.REFUSED: "red",
    Outcome.NOT_WRITTEN: "yellow",
}
"""The style of each :class:`~patchkit.results.Outcome` in a table."""


__all__ = ["OUTCOME_STYLE"]
