"""Kubernetes label selectors (metav1.LabelSelector) as the core matches them.

A selector is a conjunction of requirements: `matchLabels` entries (key equals value) and
`matchExpressions` (In, NotIn, Exists, DoesNotExist). The meaning is the API server's
(k8s.io/apimachinery labels.Selector): NotIn and DoesNotExist also match a label set without
the key, and a selector with no requirement matches every label set. The queues use one to say
which namespaces may submit to them (`QueueSpec.namespace_selector`).

`describe()` prints a selector the way `kubectl get -l` takes it (`team in (a,b),!legacy`), so a
pending reason can show the rule a namespace failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.model.label_selector import SelectorOperator

__all__ = ["LabelSelector", "Requirement", "SelectorOperator"]

_TAKES_VALUES = frozenset({SelectorOperator.IN, SelectorOperator.NOT_IN})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement on one label key."""

    key: str
    operator: SelectorOperator
    values: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a selector requirement needs a key")
        # The API server's own rule (metav1 validation): a set for In/NotIn, none otherwise.
        if self.operator in _TAKES_VALUES and not self.values:
            raise ValueError(f"{self.key}: operator {self.operator} needs at least one value")
        if self.operator not in _TAKES_VALUES and self.values:
            raise ValueError(f"{self.key}: operator {self.operator} takes no values")

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        match self.operator:
            case SelectorOperator.IN:
                return value is not None and value in self.values
            case SelectorOperator.NOT_IN:
                return value is None or value not in self.values
            case SelectorOperator.EXISTS:
                return value is not None
            case SelectorOperator.DOES_NOT_EXIST:
                return value is None

    def describe(self) -> str:
        listed = ",".join(sorted(self.values))
        match self.operator:
            case SelectorOperator.IN:
                if len(self.values) == 1:
                    return f"{self.key}={listed}"
                return f"{self.key} in ({listed})"
            case SelectorOperator.NOT_IN:
                return f"{self.key} notin ({listed})"
            case SelectorOperator.EXISTS:
                return self.key
            case SelectorOperator.DOES_NOT_EXIST:
                return f"!{self.key}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Requirements that must all hold; none: every label set matches."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def build(
        cls,
        match_labels: Mapping[str, str] | None = None,
        match_expressions: Iterable[Requirement] = (),
    ) -> LabelSelector:
        """A selector from metav1's two parts (a `matchLabels` entry is `key In (value)`)."""
        exact = [
            Requirement(key, SelectorOperator.IN, frozenset({value}))
            for key, value in sorted((match_labels or {}).items())
        ]
        return cls((*exact, *match_expressions))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def failed(self, labels: Mapping[str, str]) -> tuple[Requirement, ...]:
        """The requirements `labels` do not meet (empty when the selector matches)."""
        return tuple(r for r in self.requirements if not r.matches(labels))

    def describe(self) -> str:
        """`kubectl -l` form; `<everything>` for a selector with no requirement."""
        return ",".join(r.describe() for r in self.requirements) or "<everything>"
