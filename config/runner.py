"""``make prod``: the production stack in one foreground command, no compose file (Procfile-style).

    python -m config.runner [--host 127.0.0.1] [--port 8000] [--web-workers 3] [--default-concurrency 2]

Needs ``DATABASE_URL`` (PostgreSQL), ``CELERY_BROKER_URL`` (Redis) and ``SECRET_KEY``. Runs ``migrate`` and
``collectstatic`` (WhiteNoise's compressed, hashed copies), then starts and watches:

- ``web``: gunicorn serving ``config.wsgi`` (gthread workers; ``WEB_CONCURRENCY`` / ``--web-workers``);
- ``worker-default``: Celery on the ``default`` queue (validation, stimuli, platform sync, session expiry);
- ``worker-models``: Celery on the ``models`` queue, one process (segmenters);
- ``beat``: Celery beat (session expiry, platform sync, requeues, outbox relay task);
- ``relay``: ``manage.py outbox_relay``, sending task intents the broker refused (the workers run the same
  relay in a thread, so either alone keeps the outbox moving).

Every line a child prints is prefixed with its name. Ctrl-C or SIGTERM stops all of them (SIGTERM to each
child's process group, SIGKILL after ``--grace`` seconds) and the runner exits; when one child dies on its
own the others are stopped too and the runner exits non-zero, so a supervisor (systemd) restarts the
stack. Children also get SIGTERM if the runner itself is killed (Linux parent-death signal).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from config.environment import read

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REQUIRED = {
    "DATABASE_URL": "PostgreSQL URL, e.g. postgres://user:pass@127.0.0.1:5432/clicklab",
    "CELERY_BROKER_URL": "Redis URL, e.g. redis://127.0.0.1:6379/0",
    "SECRET_KEY": "at least 50 random characters",
}


# One Django start-up for both setup steps (each start costs seconds on a busy machine).
SETUP = (
    "import django; django.setup(); from django.core.management import call_command; "
    "call_command('migrate', interactive=False); call_command('collectstatic', interactive=False, verbosity=0)"
)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def commands(args) -> dict[str, list[str]]:
    py = sys.executable
    celery = [py, "-m", "celery", "-A", "config"]
    common = ["--without-mingle", "--without-gossip", "-l", args.log_level]
    var_dir = Path(read("CLICKLAB_VAR_DIR", PROJECT_ROOT / "var"))
    var_dir.mkdir(parents=True, exist_ok=True)  # beat keeps its schedule file there
    return {
        "web": [
            py, "-m", "gunicorn", "-c", str(PROJECT_ROOT / "config" / "gunicorn.py"),  # log format + redaction
            "config.wsgi:application", "--bind", f"{args.host}:{args.port}",
            "--workers", str(args.web_workers), "--worker-class", "gthread", "--threads", str(args.web_threads),
            "--timeout", "30", "--graceful-timeout", str(max(1, int(args.grace) - 1)), "--keep-alive", "5",
            "--log-level", args.log_level.lower(),
        ],
        "worker-default": [*celery, "worker", "-Q", "default", "-c", str(args.default_concurrency),
                           "-n", f"default-{os.getpid()}@%h", *common],
        "worker-models": [*celery, "worker", "-Q", "models", "-c", "1", "--prefetch-multiplier", "1",
                          "-n", f"models-{os.getpid()}@%h", *common],
        "beat": [*celery, "beat", "-l", args.log_level, "-s", str(var_dir / "celerybeat-schedule"),
                 "--pidfile="],
        "relay": [py, "manage.py", "outbox_relay"],
    }  # fmt: skip


class Stack:
    def __init__(self, grace: float):
        self.grace = grace
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping = threading.Event()
        self.requested = threading.Event()  # set by SIGINT/SIGTERM; the main loop stops the stack
        self.print_lock = threading.RLock()

    def say(self, name: str, line: str) -> None:
        with self.print_lock:
            sys.stdout.write(f"{name:>14} | {line}\n")
            sys.stdout.flush()

    def start(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        child = subprocess.Popen(
            cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        self.children[name] = child
        threading.Thread(target=self._pump, args=(name, child), daemon=True).start()
        self.say("runner", f"started {name} (pid {child.pid})")

    def _pump(self, name: str, child: subprocess.Popen) -> None:
        assert child.stdout is not None  # start() opens every child with stdout=PIPE
        for raw in child.stdout:
            self.say(name, raw.decode("utf-8", "replace").rstrip("\n"))

    def stop(self) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        for name, child in self.children.items():
            if child.poll() is None:
                self.say("runner", f"stopping {name}")
                _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for child in self.children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name, child in self.children.items():
            # SIGKILL whatever is left of each group (a gunicorn or celery pool child that ignored SIGTERM).
            _signal_group(child, signal.SIGKILL)
            child.wait()
            self.say("runner", f"{name} exited ({child.returncode})")

    def watch(self) -> int:
        while not self.requested.is_set():
            for name, child in self.children.items():
                if child.poll() is not None:
                    self.say("runner", f"{name} exited on its own ({child.returncode}); stopping the stack")
                    self.stop()
                    return 1
            self.requested.wait(0.5)
        self.stop()
        return 0


def _signal_group(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make prod", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=read("HOST_BIND"))
    parser.add_argument("--port", type=int, default=read("PORT"))
    parser.add_argument("--web-workers", type=int, default=read("WEB_CONCURRENCY"))
    parser.add_argument("--web-threads", type=int, default=read("WEB_THREADS"))
    parser.add_argument("--default-concurrency", type=int, default=read("WORKER_CONCURRENCY"))
    parser.add_argument(
        "--grace", type=float, default=10.0, help="seconds children get to stop before SIGKILL"
    )
    parser.add_argument("--log-level", default=read("LOG_LEVEL"))
    parser.add_argument("--skip-setup", action="store_true", help="skip migrate and collectstatic")
    args = parser.parse_args(argv)

    missing = [f"  {name}: {what}" for name, what in REQUIRED.items() if not read(name)]
    if missing:
        print("make prod needs these environment variables:\n" + "\n".join(missing), file=sys.stderr)
        return 2
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "config.settings"}
    stack = Stack(grace=args.grace)
    setup: list[subprocess.Popen] = []

    def on_signal(signum, _frame):
        stack.say("runner", f"{signal.Signals(signum).name}: stopping")
        for child in setup:
            if child.poll() is None:
                child.terminate()
        stack.requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if not args.skip_setup:
        stack.say("runner", "migrate, collectstatic")
        setup.append(subprocess.Popen([sys.executable, "-c", SETUP], cwd=PROJECT_ROOT, env=env))
        if setup[-1].wait() or stack.requested.is_set():
            stack.say(
                "runner", f"migrate/collectstatic did not finish ({setup[-1].returncode}); nothing started"
            )
            return setup[-1].returncode or 1
    for name, cmd in commands(args).items():
        stack.start(name, cmd, env)
    stack.say("runner", f"web on http://{args.host}:{args.port}/ ; Ctrl-C stops everything")
    return stack.watch()


if __name__ == "__main__":
    sys.exit(main())
