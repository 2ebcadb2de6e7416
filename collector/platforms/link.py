"""Standalone signed links: no crowd platform; the worker sees a thank-you page with a code."""

from __future__ import annotations

from .base import PlatformAdapter, register_adapter


@register_adapter
class LinkAdapter(PlatformAdapter):
    name = "link"
