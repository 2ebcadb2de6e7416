"""``Authorization: EvalKey <key>``: the per-user evaluation key (its hash is looked up); and the rate limit."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.throttling import SimpleRateThrottle

from .conf import limit
from .models import EvaluationKey


class EvaluationKeyAuthentication(BaseAuthentication):
    keyword = "EvalKey"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed(
                "Authorization header must be 'EvalKey <key>' with the key and no spaces."
            )
        from .services import key_lookup

        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(
                "The evaluation key holds non-ASCII characters; copy it again."
            ) from None
        key = key_lookup(raw)
        if key is None:
            raise AuthenticationFailed(
                "Evaluation key not recognised or revoked; create a new one in the researcher area (Evaluation keys)."
            )
        return key.user, key

    def authenticate_header(self, request) -> str:
        return self.keyword


class EvaluationKeyScheme(OpenApiAuthenticationExtension):
    target_class = "evaluation.auth.EvaluationKeyAuthentication"
    name = "evalKey"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`EvalKey <key>`: a per-user evaluation key."}  # fmt: skip


class EvaluationRateThrottle(SimpleRateThrottle):
    """Per evaluation key (or per user for token/session requests)."""

    scope = "evaluation"

    def get_rate(self) -> str:
        return limit("EVAL_RATE_LIMIT")

    def get_cache_key(self, request, view):
        if isinstance(request.auth, EvaluationKey):
            ident = f"key{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user{request.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
