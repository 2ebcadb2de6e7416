"""The player's ES modules through the production static pipeline: hashed names, imports rewritten."""

from __future__ import annotations

import json
import re

from django.core.management import call_command
from django.test import override_settings


def test_player_modules_get_hashed_names_and_load_each_other_by_them(tmp_path, settings):
    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "config.static_storage.ModuleAwareStaticFilesStorage"},
    }
    with override_settings(STATIC_ROOT=tmp_path, STORAGES=storages):
        call_command("collectstatic", interactive=False, verbosity=0)
    manifest = json.loads((tmp_path / "staticfiles.json").read_text())["paths"]
    modules = ["geometry", "refresh", "phases", "loader", "outbox", "ui", "main"]
    for name in modules:
        hashed = manifest[f"player/{name}.js"]
        assert re.fullmatch(rf"player/{name}\.[0-9a-f]{{12}}\.js", hashed), hashed
        assert (tmp_path / f"{hashed}.gz").exists(), f"{hashed} has no compressed copy"
    main = (tmp_path / manifest["player/main.js"]).read_text()
    imported = re.findall(r'from "\./([^"]+)";', main)
    assert sorted(imported) == sorted(
        manifest[f"player/{n}.js"].split("/")[1] for n in modules if n != "main"
    )
    exit_page = (tmp_path / manifest["player/exit.js"]).read_text()  # the platforms' exit page
    assert re.findall(r'from "\./([^"]+)";', exit_page) == [manifest["player/ui.js"].split("/")[1]]
    corrective = (tmp_path / manifest["corrective/corrective.js"]).read_text()  # from its own folder
    assert re.findall(r'from "([^"]+)";', corrective) == [f"../{manifest['player/ui.js']}"]
