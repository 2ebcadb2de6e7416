"""Serializers of the researcher API: rows in, dicts of the selectors out."""

from __future__ import annotations

from rest_framework import serializers

from collector.models import Dataset, Study, Target
from collector.researcher.forms import STUDY_FORM_FIELDS
from collector.services.study_rules import study_settings_check


class DatasetSerializer(serializers.ModelSerializer):
    images = serializers.IntegerField(source="n_images", read_only=True, help_text="Number of images.")
    instances = serializers.IntegerField(
        source="n_instances", read_only=True, help_text="Number of objects (round-1 targets)."
    )

    class Meta:
        model = Dataset
        fields = ("id", "name", "layout", "images", "instances", "created_at")


class StudySerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.get_username", read_only=True, allow_null=True, default=None)
    dataset = serializers.PrimaryKeyRelatedField(queryset=Dataset.objects.all())

    class Meta:
        model = Study
        fields = ("id", *STUDY_FORM_FIELDS, "state", "owner", "created_at", "published_at", "closed_at")
        read_only_fields = ("state", "owner", "created_at", "published_at", "closed_at")

    def validate(self, attrs):
        """The study form's rules (``collector.services.study_rules``), with model defaults for fields
        the request leaves out."""
        values = {
            name: attrs.get(name, Study._meta.get_field(name).get_default()) for name in STUDY_FORM_FIELDS
        }
        problems = study_settings_check(values=values, dataset=attrs.get("dataset"))
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class DeviceQuotaSerializer(serializers.Serializer):
    quota_per_target = serializers.IntegerField()
    quota_total = serializers.IntegerField()
    valid = serializers.IntegerField(help_text="Valid clicks, each target capped at its quota.")
    valid_raw = serializers.IntegerField()
    inflight = serializers.IntegerField()
    targets_full = serializers.IntegerField()
    fraction = serializers.FloatField(help_text="valid / quota_total, 0..1.")


class RoundDevicesSerializer(serializers.Serializer):
    pc = DeviceQuotaSerializer()
    mobile = DeviceQuotaSerializer()


class RoundProgressSerializer(serializers.Serializer):
    round_id = serializers.IntegerField()
    number = serializers.IntegerField()
    state = serializers.CharField()
    targets = serializers.IntegerField()
    devices = RoundDevicesSerializer()
    build_error = serializers.CharField(
        allow_blank=True, help_text="Why building the next round from this round failed; empty unless it did."
    )
    build_failed_at = serializers.DateTimeField(allow_null=True)


class SessionCountsSerializer(serializers.Serializer):
    started = serializers.IntegerField()
    in_progress = serializers.IntegerField()
    finished = serializers.IntegerField()
    expired = serializers.IntegerField()
    counted = serializers.IntegerField()
    rejected = serializers.IntegerField()
    pending = serializers.IntegerField(help_text="Finished, not validated yet.")


class SessionCountsByScopeSerializer(serializers.Serializer):
    all = SessionCountsSerializer()
    pc = SessionCountsSerializer()
    mobile = SessionCountsSerializer()


class ReasonCountSerializer(serializers.Serializer):
    reason = serializers.CharField()
    sessions = serializers.IntegerField()


class FlagCountSerializer(serializers.Serializer):
    code = serializers.CharField()
    sessions = serializers.IntegerField()


class SessionSummarySerializer(serializers.Serializer):
    counts = SessionCountsByScopeSerializer()
    rejection_reasons = ReasonCountSerializer(many=True)
    rejected_flags = FlagCountSerializer(many=True)


class DurationStatsSerializer(serializers.Serializer):
    batches = serializers.IntegerField()
    mean_s = serializers.FloatField(allow_null=True)
    median_s = serializers.FloatField(allow_null=True)
    p10_s = serializers.FloatField(allow_null=True)
    p90_s = serializers.FloatField(allow_null=True)


class BatchTimesSerializer(serializers.Serializer):
    all = DurationStatsSerializer()
    pc = DurationStatsSerializer()
    mobile = DurationStatsSerializer()


class MoneySerializer(serializers.Serializer):
    currency = serializers.CharField()
    reward_per_batch = serializers.DecimalField(max_digits=20, decimal_places=4)
    paid_sessions = serializers.IntegerField()
    paid_counted = serializers.IntegerField()
    paid_rejected = serializers.IntegerField()
    bonuses = serializers.DecimalField(max_digits=20, decimal_places=4)
    spent = serializers.DecimalField(max_digits=20, decimal_places=4)
    fee_fraction = serializers.DecimalField(max_digits=10, decimal_places=4)
    spent_with_fee = serializers.DecimalField(max_digits=20, decimal_places=4)
    owed_sessions = serializers.IntegerField()
    owed = serializers.DecimalField(max_digits=20, decimal_places=4)


class ProgressSerializer(serializers.Serializer):
    study_id = serializers.IntegerField()
    state = serializers.CharField()
    rounds = RoundProgressSerializer(many=True)
    sessions = SessionSummarySerializer()
    batch_times = BatchTimesSerializer()
    money = MoneySerializer()


class DeviceBudgetSerializer(serializers.Serializer):
    targets = serializers.IntegerField()
    quota = serializers.IntegerField(help_text="Valid clicks wanted per target on this device.")
    sessions_needed = serializers.IntegerField()
    assignments = serializers.IntegerField(help_text="Paid batches bought.")
    reward = serializers.CharField(help_text="Reward per batch (decimal string).")
    cost = serializers.CharField(help_text="Decimal string, 2 decimals.")


class BudgetSerializer(serializers.Serializer):
    """``collector.selectors.budget.budget_estimate``: the one estimate of every page (formula included)."""

    platform = serializers.CharField()
    currency = serializers.CharField()
    targets = serializers.IntegerField(help_text="Targets of the current round (round 1: one per object).")
    valid_click_fraction = serializers.FloatField()
    counted_fraction = serializers.FloatField()
    fee_fraction = serializers.CharField()
    bonus_per_counted_session = serializers.CharField()
    devices = serializers.DictField(child=DeviceBudgetSerializer())
    batches = serializers.IntegerField(help_text="Paid batches, all devices.")
    total = serializers.CharField(help_text="Decimal string, 2 decimals, in currency.")
    formula = serializers.CharField()
    note = serializers.CharField()


class TargetSerializer(serializers.ModelSerializer):
    round = serializers.IntegerField(source="round.number", read_only=True)
    image = serializers.CharField(source="instance.image.stem", read_only=True)
    object_stem = serializers.CharField(source="instance.object_stem", read_only=True)
    clicks_total = serializers.IntegerField(read_only=True)
    clicks_valid = serializers.IntegerField(read_only=True)
    clicks_invalid = serializers.IntegerField(read_only=True)

    class Meta:
        model = Target
        fields = (
            "id",
            "round",
            "full_stem",
            "click_type",
            "model_type",
            "image",
            "object_stem",
            "error_area",
            "previous_iou",
            "model_id",
            "model_variant",
            "checkpoint_sha256",
            "valid_pc",
            "valid_mobile",
            "inflight_pc",
            "inflight_mobile",
            "clicks_total",
            "clicks_valid",
            "clicks_invalid",
        )


class ClickSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    x = serializers.FloatField(help_text="Column, canonical image px.")
    y = serializers.FloatField(help_text="Row, canonical image px.")
    device = serializers.CharField()
    pointer_type = serializers.CharField()
    is_valid = serializers.BooleanField(allow_null=True)
    invalid_reason = serializers.CharField(allow_blank=True)
    distance_px = serializers.FloatField(allow_null=True)
    reaction_ms = serializers.FloatField(allow_null=True)
    worker = serializers.CharField(help_text="Pseudonym.")
    session_id = serializers.IntegerField()
    session_validity = serializers.CharField()


class TargetDetailSerializer(serializers.Serializer):
    target = TargetSerializer()
    clicks = ClickSerializer(many=True)


class WorkerRowSerializer(serializers.Serializer):
    pseudonym = serializers.CharField()
    excluded = serializers.BooleanField()
    devices = serializers.ListField(child=serializers.CharField())
    sessions = serializers.IntegerField()
    finished = serializers.IntegerField()
    counted = serializers.IntegerField()
    rejected = serializers.IntegerField()
    clicks = serializers.IntegerField()
    judged_clicks = serializers.IntegerField(help_text="Clicks the validation has judged.")
    pending_clicks = serializers.IntegerField(
        help_text="Clicks not validated yet (neither valid nor invalid)."
    )
    valid_clicks = serializers.IntegerField()
    valid_rate = serializers.FloatField(
        allow_null=True, help_text="valid / judged; None while nothing is judged."
    )
    median_reaction_ms = serializers.FloatField(allow_null=True)
    fast_clicks = serializers.IntegerField()
    blocked_clicks = serializers.IntegerField()
    flagged_trials = serializers.IntegerField()
    quality_flags = serializers.DictField(child=serializers.IntegerField())


class TargetPageSerializer(serializers.Serializer):
    """One page of a study's targets (limit/offset pagination)."""

    count = serializers.IntegerField(help_text="Targets in all pages.")
    next = serializers.URLField(allow_null=True, help_text="The next page's address, or null.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page's address, or null.")
    results = TargetSerializer(many=True)
