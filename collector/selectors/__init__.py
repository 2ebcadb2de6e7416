"""Reads (selectors) of the collector app: querysets and summaries the researcher area and API show."""
