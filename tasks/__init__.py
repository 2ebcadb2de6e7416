"""Celery tasks: thin adapters that take ids, re-fetch, call one service and own their retry policy.

The Celery app (config/celery.py) imports every module of this package when it loads, so a new task module
needs no registration. This file imports nothing: senders and settings import :mod:`tasks.names` (the task
names) before Django's apps are ready, which must not load the task modules and their models.
"""
