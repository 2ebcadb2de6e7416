"""Exporters: the RClicks clicks CSV with previous-round masks, previews CSV, and the full-fidelity export.

Reads the collector's tables (never writes them). See exports/rclicks.py and exports/full.py.
"""
