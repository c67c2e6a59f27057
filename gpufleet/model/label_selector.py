"""A Kubernetes label selector (metav1.LabelSelector) as a CRD field, checked like the API server.

The shape is the standard one, so a selector copied from a NetworkPolicy or a Kueue ClusterQueue
reads the same: `matchLabels` (key -> value) and `matchExpressions` (`key`, `operator` In, NotIn,
Exists or DoesNotExist, `values`); all requirements must hold. The checks are metav1's: label
keys are qualified names (an optional DNS-subdomain prefix and `/`, then at most 63 characters),
values are at most 63 characters of the label alphabet, In and NotIn need values, Exists and
DoesNotExist take none. The schema's rules make the API server refuse a bad selector naming
the field; the pydantic validators are their twins for code that builds objects itself.
The core matches selectors with `gpufleet.core.label_selector`.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Final, Self

from pydantic import ConfigDict, Field, model_validator

from gpufleet.model.crd_common import CRDModel, cel, validations

__all__ = [
    "LABEL_KEY_PATTERN",
    "LABEL_VALUE_PATTERN",
    "LabelSelectorRequirement",
    "LabelSelectorSpec",
    "SelectorOperator",
]


class SelectorOperator(enum.StrEnum):
    """The operators of a `matchExpressions` entry."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


# A qualified name: an optional DNS-subdomain prefix and '/', then a name of at most 63.
LABEL_KEY_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# 253 for the prefix, '/', 63 for the name.
MAX_KEY_LENGTH: Final = 317
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# Bounds that keep the CEL cost estimates finite; far above any real selector.
MAX_REQUIREMENTS: Final = 32
MAX_VALUES: Final = 64

_KEY_RE: Final = re.compile(LABEL_KEY_PATTERN)
_TAKES_VALUES: Final = ("In", "NotIn")

LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]


def _check_key(key: str) -> None:
    prefix, _, _ = key.rpartition("/")
    if len(key) > MAX_KEY_LENGTH or len(prefix) > 253 or not _KEY_RE.match(key):
        raise ValueError(
            f"invalid label key {key!r}: an optional DNS-subdomain prefix and '/', then at most "
            "63 characters [A-Za-z0-9-_.] starting and ending with a letter or digit"
        )


class LabelSelectorRequirement(CRDModel):
    """One requirement on the label `key`: In, NotIn, Exists or DoesNotExist."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!(self.operator in ['In', 'NotIn']) || "
                "(has(self.values) && size(self.values) > 0)",
                "values must be non-empty when operator is In or NotIn",
                ".values",
                "FieldValueRequired",
            ),
            cel(
                "self.operator in ['In', 'NotIn'] || !has(self.values) || size(self.values) == 0",
                "values must be empty when operator is Exists or DoesNotExist",
                ".values",
                "FieldValueForbidden",
            ),
        )
    )

    key: str = Field(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        pattern=LABEL_KEY_PATTERN,
        description="The label key, for example team or example.com/tier.",
    )
    operator: SelectorOperator = Field(
        description=(
            "In or NotIn (the value is or is not one of `values`; NotIn also matches when "
            "the label is absent), Exists or DoesNotExist (the label is or is not set)."
        )
    )
    values: list[LabelValue] | None = Field(
        default=None,
        max_length=MAX_VALUES,
        description="The values for In and NotIn (at least one); none for Exists and DoesNotExist.",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        _check_key(self.key)
        if self.operator in _TAKES_VALUES and not self.values:
            raise ValueError("values must be non-empty when operator is In or NotIn")
        if self.operator not in _TAKES_VALUES and self.values:
            raise ValueError("values must be empty when operator is Exists or DoesNotExist")
        return self


class LabelSelectorSpec(CRDModel):
    """A label selector; all its requirements must hold, and one with none matches everything."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.matchLabels) || self.matchLabels.all(k, size(k) <= "
                f"{MAX_KEY_LENGTH} && k.matches(r'{LABEL_KEY_PATTERN}'))",
                "matchLabels keys must be label keys: an optional DNS-subdomain prefix and '/', "
                "then at most 63 characters [A-Za-z0-9-_.] starting and ending with a letter or "
                "digit",
                ".matchLabels",
            ),
        )
    )

    match_labels: dict[str, LabelValue] | None = Field(
        default=None,
        max_length=MAX_REQUIREMENTS,
        description=(
            "Labels the object must carry with exactly these values (each entry is the "
            "requirement `key In (value)`)."
        ),
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None,
        max_length=MAX_REQUIREMENTS,
        description="Requirements on the object's labels, all of which must hold.",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        for key in self.match_labels or {}:
            _check_key(key)
        return self
