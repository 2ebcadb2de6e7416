"""Researcher API views: authorize (researcher + per-study visibility), call selectors or one service,
serialize. Studies another researcher owns answer 404, as if they did not exist. Errors are the envelope of
``config.api_errors`` (``{"code", "message", "field"}``; a study form with several faults lists them under
``errors``)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count
from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as DrfValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from collector.models import Dataset, Study, Target
from collector.platforms import PlatformError
from collector.selectors import budget as budget_selectors
from collector.selectors import corrective as corrective_selectors
from collector.selectors import pictures, progress
from collector.selectors import targets as target_selectors
from collector.selectors.permissions import studies_visible_to, study_visible_or_404, user_can_change_study
from collector.selectors.workers import study_worker_table
from collector.services import launch as launch_services
from collector.services import studies as study_services
from config.api_errors import ApiError, error_responses

from . import serializers
from .permissions import IsResearcher

PNG_RESPONSE = {(200, "image/png"): OpenApiResponse(OpenApiTypes.BINARY, description="PNG picture")}
#: every endpoint: no credentials (401), not a researcher (403)
AUTH_ERRORS = error_responses(401, 403)
NOT_FOUND = {**error_responses(404, s404="No such study (or target) visible to you."), **AUTH_ERRORS}


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000


class ResearcherView(APIView):
    permission_classes = [IsResearcher]

    def visible_target(self, study: Study, target_id: int) -> Target:
        try:
            return target_selectors.study_target_get(study=study, target_id=target_id)
        except Target.DoesNotExist:
            raise Http404(f"target {target_id} is not part of study {study.pk}.") from None


@extend_schema_view(
    get=extend_schema(responses={200: serializers.DatasetSerializer(many=True), **AUTH_ERRORS})
)
class DatasetList(generics.ListAPIView):
    """Datasets a study can be created from, with their image and object counts."""

    permission_classes = [IsResearcher]
    serializer_class = serializers.DatasetSerializer
    pagination_class = Pagination

    def get_queryset(self):
        return Dataset.objects.annotate(
            n_images=Count("images", distinct=True), n_instances=Count("images__instances")
        ).order_by("name")


@extend_schema_view(
    get=extend_schema(responses={200: serializers.StudySerializer(many=True), **AUTH_ERRORS}),
    post=extend_schema(
        responses={201: serializers.StudySerializer, **AUTH_ERRORS, **error_responses(400, 415)}
    ),
)
class StudyListCreate(generics.ListCreateAPIView):
    """Studies visible to you (owned or shared); POST creates a draft study you own."""

    permission_classes = [IsResearcher]
    serializer_class = serializers.StudySerializer
    pagination_class = Pagination

    def get_queryset(self):
        return (
            studies_visible_to(self.request.user).select_related("dataset", "owner").order_by("-created_at")
        )

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        try:
            serializer.instance = study_services.study_create(
                name=data.pop("name"), dataset=data.pop("dataset"), owner=self.request.user, **data
            )
        except DjangoValidationError as error:
            raise DrfValidationError(
                error.message_dict if hasattr(error, "error_dict") else error.messages
            ) from None


class StudyDetail(ResearcherView):
    @extend_schema(responses={200: serializers.StudySerializer, **NOT_FOUND})
    def get(self, request, study_id: int):
        """One study's settings and state."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        return Response(serializers.StudySerializer(study).data)


class StudyAction(ResearcherView):
    """publish (draft/paused → published; on a crowd platform: launch there), pause or close (on a
    platform: its pools closed too); owner only. The same services as the study page's buttons."""

    action_name = ""

    @extend_schema(
        request=None,
        responses={
            200: serializers.StudySerializer,
            **NOT_FOUND,
            **error_responses(
                403,
                409,
                502,
                s403="Shared with you to look at; only the owner may change it (or not a researcher).",
            ),
        },
    )
    def post(self, request, study_id: int):
        study = study_visible_or_404(user=request.user, study_id=study_id)
        if not user_can_change_study(request.user, study):
            raise PermissionDenied(
                f"study {study.pk} is shared with you to look at; only its owner can change it."
            )
        try:
            if self.action_name == "publish":
                launch_services.study_go_live(study_id=study.pk)
            else:
                launch_services.study_halt(study_id=study.pk, close=self.action_name == "close")
        except (study_services.StudyStateError, launch_services.LaunchRefused) as error:
            raise ApiError(status.HTTP_409_CONFLICT, "state_conflict", str(error)) from None
        except PlatformError as error:
            raise ApiError(status.HTTP_502_BAD_GATEWAY, "platform_error", str(error)) from None
        study = Study.objects.select_related("dataset", "owner").get(pk=study.pk)
        return Response(serializers.StudySerializer(study).data)


class StudyPublish(StudyAction):
    action_name = "publish"


class StudyPause(StudyAction):
    action_name = "pause"


class StudyClose(StudyAction):
    action_name = "close"


class StudyProgress(ResearcherView):
    @extend_schema(responses={200: serializers.ProgressSerializer, **NOT_FOUND})
    def get(self, request, study_id: int):
        """Live progress: valid clicks vs quota per round and device, sessions and rejection reasons, time
        per batch, money spent (paid = the platform's accepted review, or counted with no review yet = owed)."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        return Response(serializers.ProgressSerializer(progress.study_progress(study=study)).data)


class StudyBudget(ResearcherView):
    @extend_schema(responses={200: serializers.BudgetSerializer, **NOT_FOUND})
    def get(self, request, study_id: int):
        """Budget estimate of the current round, with its formula (the figure every page shows)."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        return Response(serializers.BudgetSerializer(budget_selectors.study_budget(study=study)).data)


class StudyTargets(ResearcherView):
    @extend_schema(
        operation_id="studies_targets_list",
        parameters=[
            OpenApiParameter("round", int, description="Only this round number."),
            OpenApiParameter("limit", int),
            OpenApiParameter("offset", int),
        ],
        responses={200: serializers.TargetPageSerializer, **NOT_FOUND, **error_responses(400)},
    )
    def get(self, request, study_id: int):
        """Targets with valid-click counters and click counts (paginated: limit/offset)."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        round_param = request.query_params.get("round")
        round_number = None
        if round_param not in (None, ""):
            try:
                round_number = int(round_param)
            except ValueError:
                raise DrfValidationError({"round": f"{round_param!r} is not a round number."}) from None
        queryset = target_selectors.study_targets(study=study, round_number=round_number)
        paginator = Pagination()
        page = paginator.paginate_queryset(queryset, request, view=self)
        return paginator.get_paginated_response(serializers.TargetSerializer(page, many=True).data)


class StudyTargetDetail(ResearcherView):
    @extend_schema(
        operation_id="studies_targets_retrieve",
        responses={200: serializers.TargetDetailSerializer, **NOT_FOUND},
    )
    def get(self, request, study_id: int, target_id: int):
        """One target and all its clicks (worker pseudonyms, device, validity and reason)."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        target = self.visible_target(study, target_id)
        annotated = target_selectors.study_targets(study=study).get(pk=target.pk)
        data = {"target": annotated, "clicks": target_selectors.target_clicks(target=target)}
        return Response(serializers.TargetDetailSerializer(data).data)


class PngView(ResearcherView):
    """PNG endpoints answer whatever the Accept header asks; their errors still render as JSON."""

    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(request, force=True)


class StudyTargetHeatmap(PngView):
    @extend_schema(responses={**PNG_RESPONSE, **NOT_FOUND})
    def get(self, request, study_id: int, target_id: int):
        """The target's image, region and all clicks as a heatmap (pc blue, mobile orange, invalid ✕)."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        target = self.visible_target(study, target_id)
        return HttpResponse(pictures.target_heatmap(target=target), content_type="image/png")


class StudyChart(PngView):
    @extend_schema(
        parameters=[OpenApiParameter("kind", str, OpenApiParameter.PATH, enum=list(pictures.CHART_KINDS))],
        responses={**PNG_RESPONSE, **NOT_FOUND},
    )
    def get(self, request, study_id: int, kind: str):
        """reaction-times, phase-timing or devices (pc vs mobile) chart."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        if kind not in pictures.CHART_KINDS:
            raise Http404(f"chart {kind!r} is unknown; use one of {', '.join(pictures.CHART_KINDS)}.")
        return HttpResponse(pictures.study_chart(study=study, kind=kind), content_type="image/png")


class StudyWorkers(ResearcherView):
    @extend_schema(responses={200: serializers.WorkerRowSerializer(many=True), **NOT_FOUND})
    def get(self, request, study_id: int):
        """Pseudonymous worker table with quality signals."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        return Response(serializers.WorkerRowSerializer(study_worker_table(study=study), many=True).data)


class StudyQualifications(ResearcherView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT, **NOT_FOUND})
    def get(self, request, study_id: int):
        """A corrective campaign's qualification test: its settings and one row per tested worker (pseudonym,
        passed, placement, IoU gain per click, clicks, why not, when sent to the platform); 404 when the study
        has no test."""
        study = study_visible_or_404(user=request.user, study_id=study_id)
        results = corrective_selectors.study_qualification_results(study=study)
        if results is None:
            raise Http404(
                f"study {study.pk} has no qualification test: it is not a corrective campaign with "
                "qualification_enabled."
            )
        return Response(results)
