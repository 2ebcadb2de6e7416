import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# Import the URL configuration (and with it every view module) now, while the worker boots, rather than in
# the first request each gunicorn worker answers: under a burst of arrivals that request would hold its thread
# for the imports (about a second) while the others wait for the GIL.
from django.urls import get_resolver  # noqa: E402  (after Django is set up)

get_resolver().url_patterns  # noqa: B018  (the attribute's lookup is the import)
