"""Clickability: GT maps from real clicks, baseline click models, the trained clickability model.

Entry points: :func:`load_click_model` (name or checkpoint → :class:`ClickModel`),
:func:`benchmark.clickability.maps.clickability_map`, ``python -m benchmark train-clickability``.
See ``benchmark/clickability/README.md``.
"""

from benchmark.clickability.click_model import ClickModel, load_click_model

__all__ = ["ClickModel", "load_click_model"]
