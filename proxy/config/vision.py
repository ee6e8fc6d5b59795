"""vision: documents' drawn pages as images for models that see."""

from __future__ import annotations

from pydantic import Field, model_validator

from proxy.config.base import Section
from proxy.config.options import ImageDetail


class VisionSettings(Section):
    """Drawn pages of documents sent as images to models that see (docs/vision.md)."""

    images: ImageDetail = Field(
        "auto",
        description=(
            "auto (high while the room allows, else low) | high | low | none; the default of "
            "enrich.images (X-Enrich-Images)."
        ),
    )
    max_pages: int = Field(
        8,
        ge=0,
        le=100,
        description="Page images per request.",
    )
    budget_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Retrieval: share of the passage budget kept for the kept passages' drawn pages (given "
            "back to passages when no image fits)."
        ),
    )
    low_px: int = Field(
        512,
        ge=64,
        le=4096,
        description="Longest side of a `low` image (models with a native size get theirs).",
    )
    high_px: int = Field(
        1280,
        ge=64,
        le=4096,
        description="Longest side of a `high` image.",
    )
    max_image_kb: int = Field(
        1536,
        ge=16,
        description="One image, encoded (PNG, or JPEG when smaller); scaled down to fit.",
    )
    render_timeout_s: float = Field(
        30,
        gt=0,
        description="Rendering one document's pages in a parse worker.",
    )

    @model_validator(mode="after")
    def _low_below_high(self) -> VisionSettings:
        if self.low_px > self.high_px:
            raise ValueError("low_px must not be larger than high_px")
        return self
