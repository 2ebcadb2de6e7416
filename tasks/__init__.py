"""Celery tasks: thin adapters that take ids, re-fetch, call one service and own their retry policy.

Every module of this package is imported when the Celery app loads, so a new task module needs no
registration.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
