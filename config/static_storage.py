"""Production static files: WhiteNoise's compressed, content-hashed copies, with ES module imports rewritten.

The player is native ES modules (static/player/*.js) that load each other by relative path. Django's
manifest storage rewrites those paths to the hashed names only when ``support_js_module_import_aggregation``
is on, so a module and every module it loads can be cached for good and change together."""

from whitenoise.storage import CompressedManifestStaticFilesStorage


class ModuleAwareStaticFilesStorage(CompressedManifestStaticFilesStorage):
    support_js_module_import_aggregation = True
