import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# Import the URL configuration (and with it every view module) now, while the worker boots, rather than in
# the first request each gunicorn worker answers: under a burst of arrivals that request would hold its thread
# for the imports (about a second) while the others wait for the GIL.
from django.urls import get_resolver  # noqa: E402  (after Django is set up)

get_resolver().url_patterns  # noqa: B018  (the attribute's lookup is the import)

# Likewise what the first finish of each worker would import: the platform adapters (the finish step's
# payload; toloka-kit's client among them) and the broker's transport with Celery's message machinery (the
# outbox's after-commit send), about 0.2 s. Profiled under the load suite, these imports were 4 % of the web
# workers' time, right in the middle of the clicks. Nothing connects here.
from collector.platforms.base import get_adapter  # noqa: E402
from config.celery import app as celery_app  # noqa: E402

get_adapter("link")  # imports every built-in adapter
with celery_app.connection_for_write() as broker:
    broker.transport  # noqa: B018  (creating the transport imports its module; it connects on first use)
celery_app.amqp.producer_pool  # noqa: B018
import celery.events.dispatcher  # noqa: E402,F401  (a task's send imports it)
