"""Which model made a mask: registry name, model id, variant and checkpoint sha256 of a predictor.

Every mask a segmenter makes for the web app (the previous masks of next-round builds, corrective
rounds) is stored with this record, so a mask can be traced to the exact weights that produced it::

    from segmenters.provenance import predictor_provenance

    record = predictor_provenance(predictor)
    record.model_id, record.variant, record.checkpoint_sha256

``checkpoint_sha256`` is the sha256 of the checkpoint file the predictor loaded; for a network passed in
memory (``model=``) it is the sha256 over its state dict (names, shapes, values); for weight-free
predictors (``embedded``) it is empty.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from segmenters.base import Predictor


@dataclass(frozen=True)
class MaskProvenance:
    """Who made a mask. ``variant`` is "" for predictors without variants (``embedded``)."""

    predictor: str  # registry name ("sam", "simpleclick", ...)
    model_type: str  # RClicks token ("sam", "simple", ...)
    model_id: str  # architecture and options (Predictor.model_id)
    variant: str
    checkpoint_sha256: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def predictor_provenance(predictor: Predictor) -> MaskProvenance:
    """The provenance record of masks made by ``predictor``."""
    return MaskProvenance(
        predictor=predictor.name,
        model_type=predictor.model_type,
        model_id=predictor.model_id,
        variant=str(getattr(predictor, "variant", "") or ""),
        checkpoint_sha256=predictor.checkpoint_hash,
    )
