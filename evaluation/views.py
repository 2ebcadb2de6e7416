"""Evaluation API (/api/eval/): thin views over :mod:`evaluation.services`. Errors are the envelope of
``config.api_errors`` (``{"code", "message", "field"}``, ``code`` the service's ``EvalError.code``) with a 4xx
status; no response carries ground truth."""

from __future__ import annotations

import math

from django.db.models import Count
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from collector.api.permissions import IsResearcher
from collector.models import Dataset
from config.api_errors import ApiError, error_responses

from . import publishing, serializers, services
from .auth import EvaluationKeyAuthentication, EvaluationRateThrottle
from .conf import limit
from .models import EvaluationKey, EvaluationRun, LocalRun
from .parsers import EvalJSONParser

#: the error statuses of every endpoint that takes a key (403: a token or session of someone not allowed)
AUTH_ERRORS = error_responses(401, 403, 429)
ERRORS = {**error_responses(400, 404, 409, 410, 415), **AUTH_ERRORS}
IDEMPOTENCY = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
    description="Repeat a request with the same key to get the same answer (retries, reconnects).",
)  # fmt: skip


class EvalView(APIView):
    authentication_classes = [EvaluationKeyAuthentication, TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [EvaluationRateThrottle]
    # JSON only, bounded (nesting, numbers, control characters): evaluation keys are held outside the lab
    parser_classes = [EvalJSONParser]

    def handle_exception(self, exc):
        if isinstance(exc, services.EvalError):
            exc = ApiError(exc.status, exc.code, exc.message)
        return super().handle_exception(exc)  # config.api_errors' handler answers

    def body(self) -> dict:
        data = self.request.data  # a malformed body: the parser's 400 invalid_json
        if not isinstance(data, dict):
            raise services.EvalError(400, "invalid_json", "the request body must be a JSON object.")
        return data

    def key(self) -> EvaluationKey | None:
        return self.request.auth if isinstance(self.request.auth, EvaluationKey) else None

    def idempotency_key(self) -> str:
        return self.request.headers.get("Idempotency-Key", "")[:100]

    def run(self, run_id) -> EvaluationRun:
        run = (
            EvaluationRun.objects.select_related("dataset").filter(pk=run_id, owner=self.request.user).first()
        )
        if run is None:
            raise services.EvalError(404, "unknown_run", f"run {run_id} does not exist or is not yours.")
        return run


class Health(APIView):
    """Is this an evaluation server that takes runs now: its service name, API and code version, and whether its
    database answers (503 when not). No key needed; the remote session asks it first, as DAVIS's client does."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: serializers.HealthSerializer, 503: serializers.HealthSerializer})
    def get(self, request):
        status, body = services.health()
        return Response(body, status=status)


class KeyListCreate(EvalView):
    """Your evaluation keys (researchers only; a key is shown once, when it is created)."""

    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsResearcher]

    @extend_schema(responses={200: serializers.KeySerializer(many=True), **AUTH_ERRORS})
    def get(self, request):
        keys = EvaluationKey.objects.filter(user=request.user, revoked_at__isnull=True).order_by(
            "-created_at"
        )
        return Response(serializers.KeySerializer(keys, many=True).data)

    @extend_schema(
        request=serializers.KeyCreateSerializer, responses={201: serializers.KeySerializer, **ERRORS}
    )
    def post(self, request):
        name = self.body().get("name", "")
        if not isinstance(name, str) or len(name) > 100:
            raise services.EvalError(400, "invalid_name", "name must be a text of at most 100 characters.")
        key, raw = services.create_key(user=request.user, name=name)
        data = serializers.KeySerializer(key).data
        data["key"] = raw
        return Response(data, status=201)


class DatasetList(EvalView):
    """Datasets runs can be created on."""

    @extend_schema(responses={200: serializers.EvalDatasetSerializer(many=True), **AUTH_ERRORS})
    def get(self, request):
        rows = Dataset.objects.annotate(samples=Count("images__instances")).order_by("name")
        return Response([{"name": d.name, "samples": d.samples} for d in rows])


class RunListCreate(EvalView):
    """Your runs; POST starts a run (its first interaction is prepared right away)."""

    @extend_schema(responses={200: serializers.RunSerializer(many=True), **AUTH_ERRORS})
    def get(self, request):
        runs = EvaluationRun.objects.filter(owner=request.user).select_related("dataset")[:200]
        return Response(serializers.RunSerializer(runs, many=True).data)

    @extend_schema(request=serializers.RunCreateSerializer, parameters=[IDEMPOTENCY],
                   responses={201: serializers.RunSerializer, **ERRORS})  # fmt: skip
    def post(self, request):
        run = services.create_run(
            user=request.user, key=self.key(), data=self.body(), create_key=self.idempotency_key()
        )
        return Response(serializers.RunSerializer(run).data, status=201)


class RunDetail(EvalView):
    """A run's state, configuration and the result of its last submission (poll this while it is 'preparing')."""

    @extend_schema(responses={200: serializers.RunSerializer, **ERRORS})
    def get(self, request, run_id):
        return Response(serializers.RunSerializer(self.run(run_id)).data)


class RunNext(EvalView):
    """The next interaction: the sample and its clicks (never the mask); ``done`` at the end; 202 while preparing."""

    @extend_schema(request=serializers.NextRequestSerializer, parameters=[IDEMPOTENCY],
                   responses={200: serializers.NextSerializer, 202: serializers.NextSerializer, **ERRORS})  # fmt: skip
    def post(self, request, run_id):
        resume = request.data.get("resume") is True if isinstance(request.data, dict) else False
        status, payload = services.serve_next(
            run_id=run_id, user=request.user, idempotency_key=self.idempotency_key(), resume=resume
        )
        return Response(payload, status=status)


class RunSubmit(EvalView):
    """The mask for the served interaction: base64 PNG or COCO RLE at the sample's size; 202 while scoring."""

    @extend_schema(request=serializers.SubmitSerializer, parameters=[IDEMPOTENCY],
                   responses={200: serializers.SubmitResponseSerializer, 202: serializers.SubmitResponseSerializer,
                              **error_responses(413), **ERRORS})  # fmt: skip
    def post(self, request, run_id):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit("EVAL_MAX_UPLOAD_BYTES"):
            raise services.EvalError(413, "upload_too_large",
                                     f"the submission is {length} bytes; the limit is {limit('EVAL_MAX_UPLOAD_BYTES')}. "
                                     "Send the mask as a compressed PNG or COCO RLE.")  # fmt: skip
        status, payload = services.submit(run_id=run_id, user=request.user, data=self.body(),
                                          idempotency_key=self.idempotency_key())  # fmt: skip
        return Response(payload, status=status)


class SampleImage(EvalView):
    """The image of a sample the run has reached, as a lossless PNG at the canonical size."""

    @extend_schema(responses={(200, "image/png"): OpenApiResponse(OpenApiTypes.BINARY), **ERRORS})
    def get(self, request, run_id, index):
        run = self.run(run_id)
        if not 0 <= index <= min(run.unit_index, len(run.units) - 1):
            raise services.EvalError(404, "unknown_sample",
                                     f"sample {index} of run {run_id} has not been reached (current: {run.unit_index}).")  # fmt: skip
        response = HttpResponse(services.sample_image_png(run.units[index][0]), content_type="image/png")
        response["Cache-Control"] = "private, max-age=3600"
        return response


class RunReport(EvalView):
    """One row per sample x click (the local session's report columns); ``iou`` is null for timed-out rounds."""

    @extend_schema(responses={200: serializers.ReportRowSerializer(many=True), **ERRORS})
    def get(self, request, run_id):
        rows = services.report_rows(self.run(run_id))
        for row in rows:
            if isinstance(row["iou"], float) and math.isnan(row["iou"]):
                row["iou"] = None
        return Response(rows)


class RunPrevious(EvalView):
    """The current sample's last accepted prediction: your mask and the logits you sent with it (a client resumed
    in a new process passes them back to the method as ``previous_logits``)."""

    @extend_schema(responses={200: serializers.PreviousSerializer, **ERRORS})
    def get(self, request, run_id):
        return Response(services.previous_prediction(self.run(run_id)))


class LocalRunListCreate(EvalView):
    """Your published local runs; POST publishes one: a ``benchmark run`` folder's summary.json (and timing.json),
    to a published benchmark (its protocol checked) or to your own board. Shown as "local, unverified"."""

    @extend_schema(responses={200: serializers.LocalRunSerializer(many=True), **AUTH_ERRORS})
    def get(self, request):
        runs = LocalRun.objects.filter(owner=request.user).select_related("benchmark")[:200]
        return Response(serializers.LocalRunSerializer(runs, many=True).data)

    @extend_schema(request=serializers.LocalRunCreateSerializer,
                   responses={200: serializers.LocalRunSerializer, 201: serializers.LocalRunSerializer, **ERRORS})  # fmt: skip
    def post(self, request):
        body = self.body()
        local, created = publishing.local_run_publish(user=request.user, key=self.key(), summary=body.get("summary"),
                                                      timing=body.get("timing"), benchmark_slug=body.get("benchmark"))  # fmt: skip
        return Response(serializers.LocalRunSerializer(local).data, status=201 if created else 200)


class RunSummary(EvalView):
    """The global summary (NoC, NoF, mIoU curve, IoU-AuC...), once the run is finished (else 409)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT, **ERRORS})
    def get(self, request, run_id):
        run = self.run(run_id)
        if run.state != EvaluationRun.State.FINISHED:
            raise services.EvalError(
                409, "not_finished", f"run {run_id} is {run.state}; the summary exists once it finished."
            )
        return Response(run.summary)
