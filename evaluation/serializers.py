"""Request/response shapes of the evaluation API (for the OpenAPI schema and input checks)."""

from __future__ import annotations

from rest_framework import serializers

from benchmark.clickability.click_model import BASELINE_NAMES


class RunCreateSerializer(serializers.Serializer):
    dataset = serializers.CharField(
        required=False,
        help_text="Name of a dataset on this server (GET /api/eval/datasets/); with a benchmark: its.",
    )
    benchmark = serializers.CharField(
        required=False,
        help_text="A published benchmark's slug: its protocol applies (clickers, max_clicks, max_time_s, seed, "
        "click_model, group_bounds, stop_at_target false); a value sent that differs is refused, named.",
    )
    method = serializers.CharField(required=False, allow_blank=True, max_length=100)
    clicker = serializers.ChoiceField(choices=["baseline", "group", "replay"], required=False)
    click_model = serializers.ChoiceField(
        choices=list(BASELINE_NAMES), required=False, allow_null=True,
        help_text="clicker='group' only: the clickability map (default dt).",
    )  # fmt: skip
    group_bounds = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(min_value=0.0, max_value=1.0), min_length=2,
                                    max_length=2),
        required=False, allow_null=True, min_length=1, max_length=20,
        help_text="clicker='group' only: [[low, high], ...] with 0 <= low < high <= 1 (default: ten groups of "
        "equal mass, G1 = [0, 0.1] ... G10 = [0.9, 1]).",
    )  # fmt: skip
    max_clicks = serializers.IntegerField(required=False, min_value=1, max_value=100)
    max_time_s = serializers.FloatField(required=False, allow_null=True, min_value=1e-6)
    threshold = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    target_ious = serializers.ListField(
        child=serializers.FloatField(min_value=1e-6, max_value=1.0), required=False
    )
    stop_at_target = serializers.BooleanField(required=False)
    seed = serializers.IntegerField(required=False, min_value=0)
    shuffle = serializers.BooleanField(required=False)


class ResultSerializer(serializers.Serializer):
    interaction = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["accepted", "timed_out"])
    iou = serializers.FloatField(allow_null=True)
    round = serializers.IntegerField()
    clicks = serializers.IntegerField()


class RunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    dataset = serializers.CharField(source="dataset.name")
    benchmark = serializers.CharField(source="benchmark.slug", allow_null=True, default=None)
    method = serializers.CharField()
    session_id = serializers.CharField()
    clicker = serializers.CharField()
    click_model = serializers.CharField(help_text="clicker='group': the clickability map; else empty.")
    group_bounds = serializers.ListField(child=serializers.ListField(child=serializers.FloatField()))
    max_clicks = serializers.IntegerField()
    max_time_s = serializers.FloatField(allow_null=True)
    threshold = serializers.FloatField()
    target_ious = serializers.ListField(child=serializers.FloatField())
    stop_at_target = serializers.BooleanField()
    seed = serializers.IntegerField()
    shuffle = serializers.BooleanField()
    samples = serializers.SerializerMethodField()
    state = serializers.CharField()
    sample_index = serializers.IntegerField(source="unit_index")
    interaction = serializers.IntegerField()
    last_result = ResultSerializer(allow_null=True)
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_samples(self, run) -> int:
        return len(run.units)


class ClickSerializer(serializers.ListField):
    child = serializers.JSONField()


class SampleSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    dataset = serializers.CharField()
    sample_id = serializers.CharField()
    image_stem = serializers.CharField()
    object_stem = serializers.CharField()
    group = serializers.CharField()
    width = serializers.IntegerField()
    height = serializers.IntegerField()
    image_url = serializers.CharField()


class NextRequestSerializer(serializers.Serializer):
    resume = serializers.BooleanField(
        required=False, help_text="Reconnecting: get the open interaction again."
    )


class NextSerializer(serializers.Serializer):
    done = serializers.BooleanField()
    run = serializers.UUIDField(required=False)
    status = serializers.CharField(required=False, help_text="'preparing' (HTTP 202): poll again.")
    interaction = serializers.IntegerField(required=False)
    round = serializers.IntegerField(required=False)
    is_new = serializers.BooleanField(required=False)
    clicks = serializers.ListField(
        child=ClickSerializer(), required=False, help_text="[[x, y, is_positive], ...]"
    )
    last_clicks = serializers.ListField(child=ClickSerializer(), required=False)
    sample = SampleSerializer(required=False)


class SubmitSerializer(serializers.Serializer):
    interaction = serializers.IntegerField(help_text="The number next returned.")
    timing_s = serializers.FloatField(min_value=0.0, help_text="Your model time for this interaction.")
    mask_png = serializers.CharField(
        required=False, help_text="Base64 of an 8-bit PNG, 0/255, the sample's size."
    )
    mask_rle = serializers.JSONField(required=False, help_text='COCO RLE {"size": [H, W], "counts": "..."}.')
    logits = serializers.CharField(
        required=False,
        help_text="Base64 of the method's Prediction.logits (benchmark.statecodec); kept with the mask and "
        "returned by runs/{id}/previous/ to a resumed client. Never decoded by the server.",
    )
    then_next = serializers.BooleanField(required=False, help_text="Answer with the next interaction too.")


class SubmitResponseSerializer(serializers.Serializer):
    result = ResultSerializer(required=False)
    next = NextSerializer(
        required=False, allow_null=True, help_text="With then_next: what next would answer."
    )
    status = serializers.CharField(required=False, help_text="'scoring' (HTTP 202): poll GET runs/{id}/.")
    interaction = serializers.IntegerField(required=False)


class PreviousSerializer(serializers.Serializer):
    sample_index = serializers.IntegerField()
    round = serializers.IntegerField(help_text="Rounds submitted on the current sample (0: nothing yet).")
    prediction_png = serializers.CharField(
        allow_null=True, help_text="Base64 PNG of your last accepted prediction."
    )
    logits = serializers.CharField(allow_null=True, help_text="Base64 of the logits you sent with it.")


class KeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=100)


class KeySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField()
    created_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    key = serializers.CharField(required=False, help_text="Shown once, at creation.")


class EvalDatasetSerializer(serializers.Serializer):
    name = serializers.CharField()
    samples = serializers.IntegerField()


class ReportRowSerializer(serializers.Serializer):
    dataset = serializers.CharField()
    sample_id = serializers.CharField()
    image_stem = serializers.CharField()
    object_stem = serializers.CharField()
    clicker = serializers.CharField()
    group = serializers.CharField()
    click_index = serializers.IntegerField()
    x = serializers.FloatField()
    y = serializers.FloatField()
    is_positive = serializers.BooleanField()
    iou = serializers.FloatField(allow_null=True)
    timing_s = serializers.FloatField()
    status = serializers.CharField()
    round = serializers.IntegerField()
    session_id = serializers.CharField()


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "unavailable"])
    service = serializers.CharField(help_text="clicklab-evaluation")
    api_version = serializers.IntegerField()
    code_version = serializers.CharField()
    database = serializers.CharField()
    benchmarks = serializers.ListField(child=serializers.CharField(), required=False)


class LocalRunCreateSerializer(serializers.Serializer):
    summary = serializers.DictField(help_text="The run folder's summary.json (python -m benchmark run).")
    timing = serializers.JSONField(required=False, help_text="Its timing.json (wall times, the time curves).")
    benchmark = serializers.CharField(
        required=False, allow_null=True, help_text="A published benchmark's slug."
    )


class LocalRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    method = serializers.CharField()
    dataset = serializers.CharField(source="dataset_name")
    dataset_hash = serializers.CharField()
    benchmark = serializers.CharField(source="benchmark.slug", allow_null=True, default=None)
    source = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    provenance = serializers.JSONField()
    created_at = serializers.DateTimeField()

    def get_source(self, local) -> str:
        return "local, unverified"

    def get_url(self, local) -> str:
        return f"/eval/local/{local.pk}/"
