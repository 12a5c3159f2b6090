"""The report's notes: each line says what it is about (its kind), so a later step keeps or
replaces notes by kind and never by reading their text."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class NoteKind(str, Enum):
    PICK = "pick"  # about the short budget's own choice (the accuracy trade, within-noise pairs, nothing learned)
    MEMORY = "memory"  # a config passed over for the memory margin
    DATA = "data"  # about the trials' measurements, whatever chooses
    DECISION = "decision"  # from confirmation at length: what it chose over the short budget, and why


@dataclass(frozen=True)
class Note:
    kind: NoteKind
    text: str

    def __str__(self) -> str:
        return self.text


def texts(notes: tuple[Note, ...] | list[Note]) -> list[str]:
    """The notes' lines, in order (what the terminal, report.html and pareto.json show)."""
    return [n.text for n in notes]
