"""What a split asks for: parts and ratios (or k folds), groups, class balance, caps, filters and a seed.

A ``SplitSpec`` checks everything that can be checked without data; the engine checks the rest against the
dataset's columns and labels. Both raise ``SplitError`` with a message that names the problem.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ringfeed.errors import RingfeedError

DEFAULT_NAMES = {1: ("all",), 2: ("train", "val"), 3: ("train", "val", "test")}
BALANCE_KINDS = ("natural", "equal")
OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_FILTER = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(==|=|!=|<=|>=|<|>|not\s+in\b|in\b)\s*(.*?)\s*$", re.IGNORECASE)
_LIST_ITEM = re.compile(r"""\s*('([^']*)'|"([^"]*)"|([^,'"]+?))\s*(,|$)""")

Scalar = str | int | float | bool


class SplitError(RingfeedError):
    """The split cannot be computed as asked; nothing was stored."""


@dataclasses.dataclass(frozen=True)
class Filter:
    """``column op value(s)``; values keep the type they were written with and are converted per column."""

    column: str
    op: str
    values: tuple[Scalar, ...]

    def __post_init__(self):
        if self.op not in OPERATORS:
            raise SplitError(f"unknown filter operator {self.op!r} (one of {', '.join(OPERATORS)})")
        if not self.values:
            raise SplitError(f"filter on {self.column!r} has no value")
        if self.op not in ("in", "not in") and len(self.values) != 1:
            raise SplitError(f"filter {self.column} {self.op} takes one value, not {len(self.values)}")

    @classmethod
    def parse(cls, text: str) -> Filter:
        """``slide_num < 5``, ``scanner == 'aperio'``, ``scanner = aperio``, ``label in (0, 1)``,
        ``patient_id not in (P001, P002)``."""
        match = _FILTER.match(text)
        if not match:
            raise SplitError(f"cannot read filter {text!r}: write COLUMN OP VALUE with OP one of "
                             f"{', '.join(OPERATORS)}, e.g. 'slide_num < 5' or 'label in (0, 1)'")
        column, op, rest = match.group(1).lower(), " ".join(match.group(2).lower().split()), match.group(3)
        op = "==" if op == "=" else op
        if op in ("in", "not in"):
            if not (rest.startswith("(") and rest.endswith(")")):
                raise SplitError(f"filter {text!r}: {op} needs a parenthesised list, e.g. {column} {op} (1, 2)")
            values = _parse_list(rest[1:-1], text)
        else:
            values = (parse_scalar(rest, text),)
        return cls(column, op, values)

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "op": self.op, "values": list(self.values)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | str) -> Filter:
        """The form ``to_dict`` gives; a string is a filter stored by Ringfeed 0.1.0, which kept them as text."""
        if isinstance(raw, str):
            return cls.parse(raw)
        values, column = raw.get("values"), str(raw.get("column", "")).lower()
        if not isinstance(values, list) or not re.fullmatch(r"[a-z][a-z0-9_]*", column):
            raise SplitError(f"cannot read filter {raw!r}: write {{\"column\": NAME, \"op\": OP, \"values\": [...]}}")
        return cls(column, raw.get("op", ""), tuple(values))

    def __str__(self) -> str:
        shown = [repr(v) if isinstance(v, str) else str(v) for v in self.values]
        return f"{self.column} {self.op} " + (f"({', '.join(shown)})" if self.op in ("in", "not in") else shown[0])


def _parse_list(body: str, text: str) -> tuple[Scalar, ...]:
    values, position = [], 0
    while position < len(body):
        match = _LIST_ITEM.match(body, position)
        if not match or match.end() == position:
            raise SplitError(f"cannot read the list in filter {text!r}")
        quoted = match.group(2) if match.group(2) is not None else match.group(3)
        values.append(quoted if quoted is not None else parse_scalar(match.group(4), text))
        position = match.end()
    return tuple(values)


def parse_scalar(token: str, text: str | None = None) -> Scalar:
    """A filter value as written: quoted → that string; true/false → bool; a number → int or float; else a string."""
    token = token.strip()
    if not token:
        raise SplitError(f"filter {text or token!r} has no value")
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return token[1:-1]
    if token.lower() in ("true", "false"):
        return token.lower() == "true"
    for convert in (int, float):
        try:
            return convert(token)
        except ValueError:
            pass
    return token


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """Parameters of a split. Give ``ratios`` (e.g. (7, 2, 1)) or ``folds`` (k-fold cross-validation), not both.

    ``balance``: "natural" (keep the dataset's class ratio), "equal", or ((label, weight), ...) where a label is its
    number or class name. ``max_samples`` caps the total, ``max_per_part`` single parts (0: no cap).
    """

    ratios: tuple[int, ...] = ()
    folds: int = 0
    names: tuple[str, ...] = ()
    group_by: tuple[str, ...] = ()
    balance: str | tuple[tuple[str, int], ...] = "natural"
    max_samples: int = 0
    max_per_part: tuple[tuple[str, int], ...] = ()
    filters: tuple[Filter, ...] = ()
    seed: int = 0

    def __post_init__(self):
        if bool(self.ratios) == bool(self.folds):
            raise SplitError("give either ratios (e.g. 7,2,1) or folds (e.g. 5), not " +
                             ("both" if self.ratios else "neither"))
        if self.ratios:
            if any(not isinstance(r, int) or isinstance(r, bool) or r <= 0 for r in self.ratios):
                raise SplitError(f"ratios must be positive integers, got {list(self.ratios)}")
        elif self.folds < 2:
            raise SplitError(f"folds must be at least 2, got {self.folds}")
        count = len(self.ratios) or self.folds
        if not self.names:
            object.__setattr__(self, "names", DEFAULT_NAMES.get(count) if self.ratios and count in DEFAULT_NAMES
                               else tuple(f"{'fold' if self.folds else 'part'}{i}" for i in range(count)))
        if len(self.names) != count:
            raise SplitError(f"{count} parts need {count} names, got {len(self.names)}: {', '.join(self.names)}")
        for name in self.names:
            if not _NAME.match(name):
                raise SplitError(f"invalid part name {name!r}: lower-case letters, digits, '-' and '_', "
                                 "starting with a letter, at most 32 characters")
        if len(set(self.names)) != len(self.names):
            raise SplitError(f"part names repeat: {', '.join(self.names)}")
        if len(set(self.group_by)) != len(self.group_by):
            raise SplitError(f"groupBy repeats a column: {', '.join(self.group_by)}")
        if isinstance(self.balance, str):
            if self.balance not in BALANCE_KINDS:
                raise SplitError(f"balance is 'natural', 'equal' or label weights like 0=1,1=1, "
                                 f"not {self.balance!r}")
        else:
            if not self.balance:
                raise SplitError("balance weights are empty")
            for label, weight in self.balance:
                if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
                    raise SplitError(f"balance weight of label {label} must be a non-negative integer, got {weight!r}")
            if not any(weight for _, weight in self.balance):
                raise SplitError("balance weights are all zero")
        if self.max_samples < 0:
            raise SplitError(f"max samples must be positive (0: no cap), got {self.max_samples}")
        for part, cap in self.max_per_part:
            if part not in self.names:
                raise SplitError(f"max per part names unknown part {part!r} (parts: {', '.join(self.names)})")
            if cap <= 0:
                raise SplitError(f"max samples of part {part!r} must be positive, got {cap}")

    @property
    def parts(self) -> list[tuple[str, int]]:
        """(name, ratio) of each part in order."""
        return list(zip(self.names, self.ratios or (1,) * self.folds, strict=True))

    @property
    def columns(self) -> list[str]:
        """Metadata columns the split reads besides uuid, label and sample_bytes."""
        seen = dict.fromkeys([*self.group_by, *(f.column for f in self.filters)])
        seen.pop("label", None)
        return list(seen)

    def describe(self) -> str:
        ratios = f"{self.folds} folds" if self.folds else ":".join(map(str, self.ratios))
        text = [f"{ratios} ({', '.join(self.names)})", f"seed {self.seed}"]
        if self.group_by:
            text.append("grouped by " + ", ".join(self.group_by))
        if self.balance != "natural":
            text.append("balance " + (self.balance if isinstance(self.balance, str)
                                      else ":".join(f"{w}" for _, w in self.balance)
                                      + f" ({', '.join(str(label) for label, _ in self.balance)})"))
        if self.max_samples:
            text.append(f"at most {self.max_samples:,} samples")
        text += [f"{part} at most {cap:,}" for part, cap in self.max_per_part]
        text += [f"where {f}" for f in self.filters]
        return " · ".join(text)

    # -- persistence ---------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "ratios": list(self.ratios), "folds": self.folds, "names": list(self.names),
            "group_by": list(self.group_by),
            "balance": self.balance if isinstance(self.balance, str) else [list(b) for b in self.balance],
            "max_samples": self.max_samples, "max_per_part": [list(m) for m in self.max_per_part],
            "filters": [f.to_dict() for f in self.filters], "seed": self.seed,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SplitSpec:
        balance = raw.get("balance", "natural")
        return cls(
            ratios=tuple(raw.get("ratios") or ()), folds=raw.get("folds") or 0, names=tuple(raw.get("names") or ()),
            group_by=tuple(raw.get("group_by") or ()),
            balance=balance if isinstance(balance, str) else tuple((str(k), int(v)) for k, v in balance),
            max_samples=raw.get("max_samples") or 0,
            max_per_part=tuple((str(k), int(v)) for k, v in raw.get("max_per_part") or ()),
            filters=tuple(Filter.from_dict(f) for f in raw.get("filters") or ()), seed=raw.get("seed") or 0,
        )

    @classmethod
    def from_json(cls, text: str) -> SplitSpec:
        return cls.from_dict(json.loads(text))


def parse_weights(text: str, what: str) -> tuple[tuple[str, int], ...]:
    """``0=1,1=1`` or ``normal=1,tumor=2`` → ((key, weight), ...)."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SplitError(f"cannot read {what} {item!r}: write KEY=NUMBER, e.g. 0=1,1=1")
        try:
            pairs.append((key.strip(), int(value)))
        except ValueError:
            raise SplitError(f"{what} of {key.strip()!r} must be an integer, got {value.strip()!r}") from None
    if not pairs:
        raise SplitError(f"{what} is empty")
    return tuple(pairs)
