"""The core's label-selector matcher against the API server's meaning of metav1.LabelSelector.

Aspects: a table of selectors and label sets (matchLabels, In, NotIn matching an absent key,
Exists, DoesNotExist, conjunction, the empty selector matching everything); the requirements a
label set fails; the `kubectl -l` form of a selector; requirements that break metav1's value
rules refused; a hypothesis property: a selector matches exactly when no requirement fails.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.label_selector import LabelSelector, Requirement, SelectorOperator

IN, NOT_IN = SelectorOperator.IN, SelectorOperator.NOT_IN
EXISTS, ABSENT = SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST


def req(key: str, operator: SelectorOperator, *values: str) -> Requirement:
    return Requirement(key, operator, frozenset(values))


# (selector, labels, matches)
TABLE = [
    pytest.param(LabelSelector(), {}, True, id="empty-matches-no-labels"),
    pytest.param(LabelSelector(), {"team": "a"}, True, id="empty-matches-any-labels"),
    pytest.param(LabelSelector.build({"team": "a"}), {"team": "a", "x": "y"}, True, id="labels"),
    pytest.param(LabelSelector.build({"team": "a"}), {"team": "b"}, False, id="labels-other"),
    pytest.param(LabelSelector.build({"team": "a"}), {}, False, id="labels-absent"),
    pytest.param(LabelSelector.build({"tier": ""}), {"tier": ""}, True, id="empty-value"),
    pytest.param(LabelSelector((req("t", IN, "a", "b"),)), {"t": "b"}, True, id="in"),
    pytest.param(LabelSelector((req("t", IN, "a", "b"),)), {"t": "c"}, False, id="in-other"),
    pytest.param(LabelSelector((req("t", IN, "a"),)), {}, False, id="in-absent"),
    pytest.param(LabelSelector((req("t", NOT_IN, "a"),)), {"t": "b"}, True, id="notin"),
    pytest.param(LabelSelector((req("t", NOT_IN, "a"),)), {"t": "a"}, False, id="notin-listed"),
    pytest.param(LabelSelector((req("t", NOT_IN, "a"),)), {}, True, id="notin-absent-matches"),
    pytest.param(LabelSelector((req("t", EXISTS),)), {"t": ""}, True, id="exists"),
    pytest.param(LabelSelector((req("t", EXISTS),)), {"u": "x"}, False, id="exists-absent"),
    pytest.param(LabelSelector((req("t", ABSENT),)), {"u": "x"}, True, id="does-not-exist"),
    pytest.param(LabelSelector((req("t", ABSENT),)), {"t": "x"}, False, id="does-not-exist-set"),
    pytest.param(
        LabelSelector.build({"team": "a"}, [req("env", IN, "prod"), req("legacy", ABSENT)]),
        {"team": "a", "env": "prod"},
        True,
        id="all-hold",
    ),
    pytest.param(
        LabelSelector.build({"team": "a"}, [req("env", IN, "prod"), req("legacy", ABSENT)]),
        {"team": "a", "env": "prod", "legacy": "1"},
        False,
        id="one-fails",
    ),
]


@pytest.mark.parametrize(("selector", "labels", "matches"), TABLE)
def test_selector_table(selector: LabelSelector, labels: dict[str, str], matches: bool) -> None:
    assert selector.matches(labels) is matches
    assert (selector.failed(labels) == ()) is matches


def test_failed_names_the_requirements_not_met_in_order() -> None:
    selector = LabelSelector.build({"team": "a"}, [req("env", IN, "prod"), req("gpu", EXISTS)])
    failed = selector.failed({"team": "a", "env": "dev"})
    assert [r.describe() for r in failed] == ["env=prod", "gpu"]


def test_describe_is_the_kubectl_form() -> None:
    selector = LabelSelector.build(
        {"team": "a"},
        [req("env", IN, "prod", "dev"), req("o", NOT_IN, "x"), req("g", EXISTS), req("l", ABSENT)],
    )
    assert selector.describe() == "team=a,env in (dev,prod),o notin (x),g,!l"
    assert LabelSelector().describe() == "<everything>"


@pytest.mark.parametrize(
    ("key", "operator", "values", "message"),
    [
        ("t", IN, (), "operator In needs at least one value"),
        ("t", NOT_IN, (), "operator NotIn needs at least one value"),
        ("t", EXISTS, ("a",), "operator Exists takes no values"),
        ("t", ABSENT, ("a",), "operator DoesNotExist takes no values"),
        ("", EXISTS, (), "needs a key"),
    ],
)
def test_requirements_breaking_metav1_rules_are_refused(
    key: str, operator: SelectorOperator, values: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Requirement(key, operator, frozenset(values))


KEYS = st.sampled_from(["a", "b", "c"])
VALUES = st.sampled_from(["x", "y", ""])


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    operator = draw(st.sampled_from(list(SelectorOperator)))
    values: frozenset[str] = frozenset()
    if operator in (IN, NOT_IN):
        values = frozenset(draw(st.sets(VALUES, min_size=1)))
    return Requirement(draw(KEYS), operator, values)


@given(
    st.lists(requirements(), max_size=4),
    st.dictionaries(KEYS, VALUES, max_size=3),
)
def test_matches_exactly_when_every_requirement_holds(
    reqs: list[Requirement], labels: dict[str, str]
) -> None:
    selector = LabelSelector(tuple(reqs))
    assert selector.matches(labels) == (selector.failed(labels) == ())
    # A requirement and its negation never both hold (In/NotIn, Exists/DoesNotExist).
    for r in reqs:
        opposite = {IN: NOT_IN, NOT_IN: IN, EXISTS: ABSENT, ABSENT: EXISTS}[r.operator]
        assert r.matches(labels) != Requirement(r.key, opposite, r.values).matches(labels)
