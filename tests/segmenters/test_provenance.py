"""segmenters.provenance: the record stored with every mask a segmenter makes."""

from __future__ import annotations

import hashlib

from segmenters.provenance import MaskProvenance, predictor_provenance
from segmenters.registry import get_predictor

from .conftest import TINY_SAM


def test_a_checkpointed_predictor_records_name_model_variant_and_file_sha256(tiny_sam_checkpoint):
    predictor = get_predictor("sam", checkpoint=tiny_sam_checkpoint, architecture=TINY_SAM, device="cpu")
    record = predictor_provenance(predictor)
    assert record == MaskProvenance(
        predictor="sam",
        model_type="sam",
        model_id=predictor.model_id,
        variant=predictor.variant,
        checkpoint_sha256=hashlib.sha256(tiny_sam_checkpoint.read_bytes()).hexdigest(),
    )
    assert record.as_dict()["checkpoint_sha256"] == record.checkpoint_sha256


def test_the_weight_free_default_has_no_variant_and_no_checkpoint():
    record = predictor_provenance(get_predictor("embedded"))
    assert (record.predictor, record.model_type, record.variant, record.checkpoint_sha256) == (
        "embedded",
        "embedded",
        "",
        "",
    )
    assert record.model_id
