"""The base of every admin API model and the pieces lists share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class PublicModel(BaseModel):
    """camelCase on the wire, unknown fields refused in requests."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ListMeta(PublicModel):
    """Where a paginated list stands."""

    continue_: str | None = Field(
        default=None,
        alias="continue",
        description="Pass as `continue` to get the next page; absent on the last page.",
    )
    remaining_item_count: int = Field(
        ge=0, description="Items after this page (0 on the last page)."
    )


class JobRef(PublicModel):
    """A TrainingJob or ServingJob."""

    namespace: str = Field(description="Namespace of the job.")
    kind: str = Field(description="TrainingJob or ServingJob.")
    name: str = Field(description="Name of the job.")
