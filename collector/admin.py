"""Django admin for researchers: browse datasets, set up studies, inspect sessions and clicks."""

from __future__ import annotations

from django.contrib import admin, messages

from collector.models import Click, Dataset, Image, Instance, Round, Session, Study, Target, Trial, Worker
from collector.services import next_round as next_round_services
from collector.services import studies as study_services


class ImageInline(admin.TabularInline):
    model = Image
    fields = ("stem", "width", "height", "file_size", "sha256")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    """Datasets come from an import (every file checked first, all or nothing): the researcher area's import
    page (linked from the list, templates/admin/collector/dataset/change_list.html) or ``manage.py
    import_dataset``; an "Add" form could only make an empty dataset, so there is none."""

    list_display = ("name", "layout", "source_path", "created_at")
    readonly_fields = ("name", "layout", "source_path", "created_at")
    inlines = [ImageInline]

    def has_add_permission(self, request) -> bool:
        return False


class InstanceInline(admin.TabularInline):
    model = Instance
    fields = ("object_stem", "object_id", "area", "ignore_area", "text_description")
    readonly_fields = ("object_stem", "object_id", "area", "ignore_area")
    extra = 0
    can_delete = False


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("stem", "dataset", "width", "height", "file_size")
    list_filter = ("dataset",)
    search_fields = ("stem",)
    readonly_fields = (
        "dataset",
        "stem",
        "file",
        "file_size",
        "sha256",
        "width",
        "height",
        "original_width",
        "original_height",
    )
    inlines = [InstanceInline]


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    list_display = ("__str__", "area", "ignore_area", "category")
    list_filter = ("image__dataset",)
    search_fields = ("image__stem", "object_stem", "text_description")
    readonly_fields = ("image", "object_stem", "object_id", "mask_file", "mask_sha256", "source_mask_file",
                       "source_mask_size", "source_mask_sha256", "ignore_file", "ignore_area", "area",
                       "bbox_x0", "bbox_y0", "bbox_x1", "bbox_y1")  # fmt: skip


class RoundInline(admin.TabularInline):
    model = Round
    fields = ("number", "state", "created_at", "closed_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Study)
class StudyAdmin(admin.ModelAdmin):
    list_display = ("name", "dataset", "state", "display_mode", "platform", "created_at")
    list_filter = ("state", "platform", "display_mode")
    search_fields = ("name",)
    readonly_fields = ("state", "created_at", "published_at", "closed_at")
    filter_horizontal = ("researchers",)
    inlines = [RoundInline]
    actions = ["publish", "pause", "close"]

    def save_model(self, request, obj, form, change):
        if not change and obj.owner_id is None:
            obj.owner = request.user
        super().save_model(request, obj, form, change)

    def _run(self, request, queryset, service, verb):
        for study in queryset:
            try:
                service(study_id=study.pk)
                self.message_user(request, f"{study}: {verb}.", messages.SUCCESS)
            except study_services.StudyStateError as exc:
                self.message_user(request, f"{study}: {exc}", messages.ERROR)

    @admin.action(description="Publish selected studies")
    def publish(self, request, queryset):
        self._run(request, queryset, study_services.study_publish, "published")

    @admin.action(description="Pause selected studies")
    def pause(self, request, queryset):
        self._run(request, queryset, study_services.study_pause, "paused")

    @admin.action(description="Close selected studies")
    def close(self, request, queryset):
        self._run(request, queryset, study_services.study_close, "closed")


@admin.register(Round)
class RoundAdmin(admin.ModelAdmin):
    list_display = ("study", "number", "state", "created_at", "closed_at", "build_failed_at")
    list_filter = ("state",)
    readonly_fields = ("build_error", "build_failed_at")
    actions = ["retry_build"]

    @admin.action(description="Retry the failed next-round build of the selected rounds")
    def retry_build(self, request, queryset):
        for round_ in queryset:
            if next_round_services.round_build_retry(round_id=round_.pk):
                self.message_user(request, f"{round_}: build sent again.", messages.SUCCESS)
            else:
                self.message_user(request, f"{round_}: no failed build to retry.", messages.WARNING)


@admin.register(Target)
class TargetAdmin(admin.ModelAdmin):
    list_display = (
        "full_stem",
        "round",
        "click_type",
        "model_type",
        "model_variant",
        "valid_pc",
        "valid_mobile",
        "inflight_pc",
        "inflight_mobile",
    )
    list_filter = ("round__study", "click_type", "model_type", "model_variant")
    search_fields = ("full_stem", "checkpoint_sha256")
    raw_id_fields = ("instance", "source_click")
    # Provenance of the previous mask: written by the build, never edited by hand.
    readonly_fields = ("model_id", "model_variant", "checkpoint_sha256")


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("pseudonym", "platform", "created_at", "excluded")
    list_filter = ("platform", "excluded")
    search_fields = ("pseudonym",)
    exclude = ("external_id",)  # the platform id stays out of researcher pages; pseudonyms only
    readonly_fields = ("platform", "pseudonym", "created_at")


class TrialInline(admin.TabularInline):
    model = Trial
    fields = ("position", "target", "blocked_clicks", "flags", "phase_onsets_ms")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("id", "study", "worker", "device", "status", "validity", "valid_clicks", "started_at")
    list_filter = ("study", "device", "status", "validity")
    readonly_fields = [f.name for f in Session._meta.fields]
    inlines = [TrialInline]


@admin.register(Click)
class ClickAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "trial",
        "x",
        "y",
        "pointer_type",
        "reaction_ms",
        "is_valid",
        "distance_px",
        "invalid_reason",
    )
    list_filter = ("is_valid", "pointer_type", "invalid_reason")
    readonly_fields = [f.name for f in Click._meta.fields]


# --- crowd platforms (PLATFORMS): launch / sync / close from the study list, campaign status ----------
from collector.models import PlatformCampaign, PlatformPool  # noqa: E402
from collector.platforms import PlatformError  # noqa: E402
from collector.services import launch as launch_services  # noqa: E402


def _platform_run(modeladmin, request, queryset, service, verb):
    for study in queryset:
        try:
            result = service(study_id=study.pk)
            status = launch_services.study_platform_status(study=study)
            detail = f" {result}" if isinstance(result, dict) else ""
            modeladmin.message_user(
                request,
                f"{study}: {verb}.{detail} Platform {status['state']}, spent {status['spent']} "
                f"{status.get('currency', '')} (with fee {status.get('spent_with_fee', '0.00')}).",
                messages.SUCCESS,
            )
        except (PlatformError, launch_services.LaunchRefused, study_services.StudyStateError) as exc:
            modeladmin.message_user(request, f"{study}: {exc}", messages.ERROR)
        except PlatformCampaign.DoesNotExist:
            modeladmin.message_user(request, f"{study}: not launched on a platform yet.", messages.ERROR)


@admin.action(description="Platform: launch selected studies (estimate, pools, open)")
def platform_launch(modeladmin, request, queryset):
    _platform_run(modeladmin, request, queryset, launch_services.study_launch, "launched")


@admin.action(description="Platform: sync selected studies now (review and pay)")
def platform_sync(modeladmin, request, queryset):
    _platform_run(modeladmin, request, queryset, launch_services.study_sync, "synced")


@admin.action(description="Platform: close selected studies (pools and study)")
def platform_close(modeladmin, request, queryset):
    _platform_run(modeladmin, request, queryset, launch_services.study_close_platform, "closed")


StudyAdmin.actions = [*StudyAdmin.actions, platform_launch, platform_sync, platform_close]


def study_admin_actions_add(*actions) -> None:
    """Add another app's actions to the study list, after the study's own and before the platform's.

    For the ``admin.py`` of an app that builds on the domain (``exports/admin.py``: the downloads), so the
    domain never imports it; the admin loads that module after this one.
    """
    position = StudyAdmin.actions.index(platform_launch)
    StudyAdmin.actions = [*StudyAdmin.actions[:position], *actions, *StudyAdmin.actions[position:]]


class PlatformPoolInline(admin.TabularInline):
    model = PlatformPool
    fields = (
        "device",
        "external_id",
        "external_status",
        "reward_per_assignment",
        "assignments_planned",
        "entry_url",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(PlatformCampaign)
class PlatformCampaignAdmin(admin.ModelAdmin):
    list_display = ("study", "platform", "state", "spent", "launched_at", "last_synced_at", "last_sync_error")
    list_filter = ("platform", "state")
    readonly_fields = [f.name for f in PlatformCampaign._meta.fields] + ["spent", "submissions"]
    inlines = [PlatformPoolInline]

    @admin.display(description="spent (before fee)")
    def spent(self, obj):
        status = launch_services.study_platform_status(study=obj.study)
        return f"{status['spent']} {status.get('currency', '')}"

    @admin.display(description="submissions by decision")
    def submissions(self, obj):
        return launch_services.study_platform_status(study=obj.study).get("submissions", {})
