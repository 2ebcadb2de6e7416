"""The one settings module: embedded default, production from the environment, secrets kept out of logs."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys

import pytest

from config.logging_filters import RedactSecretsFilter
from tests.support.celery_worker import PROJECT_ROOT

PRODUCTION_ENV = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/clicklab_deploy_check",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/9",
    "SECRET_KEY": "k" * 20 + "-x9Q2#mZr7!vLp3@wT8^sB5&nY1*cF6(hJ4)dG0",
    "ALLOWED_HOSTS": "clicks.example.org",
    "DEBUG": "false",
}


def _run(
    args: list[str], env_overrides: dict[str, str], drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    # DJANGO_ALLOW_ASYNC_UNSAFE is set by the Chromium fixture for this process only; a deployment never has it
    ignored = {"DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE", *drop}
    env = {k: v for k, v in os.environ.items() if k not in ignored}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_passes_with_production_variables(tmp_path):
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                  {**PRODUCTION_ENV, "CLICKLAB_VAR_DIR": str(tmp_path)})  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_without_secret_key_fails_with_instructions(tmp_path):
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SECRET_KEY"}
    result = _run(["manage.py", "check"], {**env, "CLICKLAB_VAR_DIR": str(tmp_path)}, drop=("SECRET_KEY",))
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_embedded_default_uses_sqlite_and_filesystem_broker(tmp_path):
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.DATABASES['default']['ENGINE'], str(s.DATABASES['default']['NAME']), "
        "__import__('config.celery').celery.app.conf.broker_url, s.DEBUG]))"
    )
    result = _run(["-c", code], {"DJANGO_SETTINGS_MODULE": "config.settings", "CLICKLAB_VAR_DIR": str(tmp_path)},
                  drop=("DATABASE_URL", "CELERY_BROKER_URL", "DEBUG", "SECRET_KEY"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    engine, name, broker, debug = __import__("json").loads(result.stdout.strip().splitlines()[-1])
    assert engine == "django.db.backends.sqlite3" and name.startswith(str(tmp_path))
    assert broker == "filesystem://" and debug is True
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0  # generated key readable by the owner only


@pytest.mark.parametrize("setting", ["TOLOKA_TOKEN", "SECRET_KEY"])
def test_secret_values_are_redacted_from_log_records(settings, setting):
    secret = "s3cr3t-" + setting.lower() + "-value"
    setattr(settings, setting, secret)
    record = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "calling with token %s failed", (secret,), None
    )
    assert RedactSecretsFilter().filter(record)
    assert secret not in record.getMessage() and "[redacted]" in record.getMessage()


def test_segmenter_checkpoints_come_from_the_environment_and_a_bad_entry_stops_the_start(tmp_path):
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({k: [c.predictor, c.variant, c.checkpoint] for k, c in s.SEGMENTER_CHECKPOINTS.items()}))"
    )
    env = {"DJANGO_SETTINGS_MODULE": "config.settings", "CLICKLAB_VAR_DIR": str(tmp_path)}
    drop = ("DATABASE_URL", "CELERY_BROKER_URL")
    table = "sam:vit_h=/models/sam_vit_h_4b8939.pth, simpleclick:vit_base:ours=cocolvis_vit_base.pth"
    result = _run(["-c", code], {**env, "CLICKLAB_SEGMENTER_CHECKPOINTS": table}, drop=drop)
    assert result.returncode == 0, result.stderr
    assert __import__("json").loads(result.stdout.strip().splitlines()[-1]) == {
        "sam:vit_h": ["sam", "vit_h", "/models/sam_vit_h_4b8939.pth"],
        "simpleclick:vit_base:ours": ["simpleclick", "vit_base", "cocolvis_vit_base.pth"],
    }
    bad = _run(["-c", code], {**env, "CLICKLAB_SEGMENTER_CHECKPOINTS": "sam:vit_q=x.pth"}, drop=drop)
    assert bad.returncode != 0 and "ImproperlyConfigured" in bad.stderr
    assert "CLICKLAB_SEGMENTER_CHECKPOINTS key 'sam:vit_q': sam has no variant 'vit_q'" in bad.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TOLOKA_RETRIES", "three", "TOLOKA_RETRIES='three' is not a whole number: set it to e.g. 3"),
        ("CLICKLAB_OUTBOX_RELAY_EVERY_S", "1m", "CLICKLAB_OUTBOX_RELAY_EVERY_S='1m' is not a number"),
        (
            "CLICKLAB_OUTBOX_RELAY_EVERY_S",
            "nan",
            "CLICKLAB_OUTBOX_RELAY_EVERY_S='nan' must be a finite number",
        ),
        ("PLATFORM_SYNC_INTERVAL_S", "-5", "PLATFORM_SYNC_INTERVAL_S='-5' must be at least 0.0"),
        ("ANNOTATOR_TOKEN_MAX_AGE_S", "7d", "ANNOTATOR_TOKEN_MAX_AGE_S='7d' is not a whole number"),
    ],
)
def test_a_malformed_number_in_the_environment_stops_the_start_naming_the_variable(
    tmp_path, variable, value, message
):
    env = {"DJANGO_SETTINGS_MODULE": "config.settings", "CLICKLAB_VAR_DIR": str(tmp_path)}
    drop = ("DATABASE_URL", "CELERY_BROKER_URL")
    result = _run(["-c", "import django; django.setup()"], {**env, variable: value}, drop=drop)
    assert result.returncode != 0 and "ImproperlyConfigured" in result.stderr
    assert message in result.stderr, result.stderr[-800:]
    good = _run(["-c", "import django; django.setup()"], {**env, variable: "7"}, drop=drop)
    assert good.returncode == 0, good.stderr[-800:]


def test_a_malformed_evaluation_limit_names_the_variable(tmp_path):
    code = "import django; django.setup(); from evaluation.conf import limit; print(limit('EVAL_MAX_CLICKS'))"
    env = {"DJANGO_SETTINGS_MODULE": "config.settings", "CLICKLAB_VAR_DIR": str(tmp_path)}
    drop = ("DATABASE_URL", "CELERY_BROKER_URL")
    result = _run(["-c", code], {**env, "CLICKLAB_EVAL_MAX_CLICKS": "lots"}, drop=drop)
    assert result.returncode != 0
    assert "CLICKLAB_EVAL_MAX_CLICKS='lots' is not a whole number: set it to e.g. 100" in result.stderr, (
        result.stderr[-800:]
    )
    assert (
        _run(["-c", code], {**env, "CLICKLAB_EVAL_MAX_CLICKS": "40"}, drop=drop).stdout.strip().endswith("40")
    )


def _changes_after_definition(node) -> list[str]:
    """`NAME += ...` and `NAME[...] = ...` inside ``node``, for upper-case (setting) names."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name) and sub.target.id.isupper():
            found.append(f"line {sub.lineno}: {sub.target.id} extended after its definition")
        targets = (
            sub.targets
            if isinstance(sub, ast.Assign)
            else [sub.target]
            if isinstance(sub, ast.AugAssign)
            else []
        )
        for target in targets:
            base = target
            while isinstance(base, ast.Subscript):
                base = base.value
            if base is not target and isinstance(base, ast.Name) and base.id.isupper():
                found.append(f"line {sub.lineno}: an item of {base.id} set after its definition")
    return found


def test_each_setting_is_written_once_in_reading_order():
    """config/settings.py reads top to bottom: every setting is assigned once, in full (no `INSTALLED_APPS +=`
    or `CELERY["beat_schedule"][...] =` added by a later section)."""
    tree = ast.parse((PROJECT_ROOT / "config" / "settings.py").read_text())
    assigned: dict[str, int] = {}
    problems = []
    for node in tree.body:
        problems += _changes_after_definition(node)
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name) and t.id.isupper()]
        for name in names:
            if name in assigned:
                problems.append(f"line {node.lineno}: {name} assigned again (first at line {assigned[name]})")
            assigned[name] = node.lineno
    assert not problems, "config/settings.py is no longer in reading order:\n" + "\n".join(problems)
