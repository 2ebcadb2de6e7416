"""A local fake of the Toloka API (``/api/v1/...``) for the real toloka-kit client to talk to over HTTP.

It implements the calls of ``../shared/spec/crowd-platforms.md`` §2.3 with in-memory state, the paging
contract the SDK relies on (fixed-width ids so that string order is creation order, ``id_gt``/``id_gte``/
``id_lte``, ``sort``, ``limit``, ``{items, has_more}``), async operations that finish at once, idempotent
``operation_id`` (a repeat gets 409 ``OPERATION_ALREADY_EXISTS``, as the SDK expects), the legal
assignment transitions (anything else is 409 ``CONFLICT_STATE``) and token checking (401
``AUTHENTICATION_ERROR``).

Test control lives outside ``/api`` under ``/_fake/``:

- ``POST /_fake/pools/<pool>/take`` ``{"user_id"}`` → an ACTIVE assignment of a suite with overlap left
  (what a worker taking the task does), 409 when the pool is not open or nothing is left;
- ``POST /_fake/assignments/<id>/submit`` ``{"completion_code"}`` → SUBMITTED with that output;
- ``POST /_fake/faults`` ``{"method", "path" (regex), "times", "status" | "delay_s", "after"}`` → the next
  ``times`` matching requests get ``status`` (a JSON error body, or an empty one with ``"empty": true``)
  or sleep ``delay_s`` before (``after`` false) or after (``after`` true) doing the work, so a client
  timeout can hit a request whose effect already happened;
- ``GET /_fake/state`` → every object, ``GET /_fake/requests`` → the request log, ``POST /_fake/reset``.

Serve it with :func:`serve` (a threading WSGI server on 127.0.0.1, port 0).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

ASSIGNMENT_TRANSITIONS = {("SUBMITTED", "ACCEPTED"), ("SUBMITTED", "REJECTED"), ("REJECTED", "ACCEPTED")}


def _now() -> str:
    return datetime.now(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds")


class FakeError(Exception):
    def __init__(self, status: int, code: str, message: str = ""):
        super().__init__(message or code)
        self.status, self.code, self.message = status, code, message or code


@dataclass
class Fault:
    method: str
    path: re.Pattern
    times: int
    status: int | None = None
    empty: bool = False
    delay_s: float = 0.0
    after: bool = False


@dataclass
class FakeTolokaState:
    """Everything the fake holds; ``token`` is the one API token it accepts."""

    token: str
    balance: Decimal = Decimal("100.00")
    projects: dict = field(default_factory=dict)
    pools: dict = field(default_factory=dict)
    suites: dict = field(default_factory=dict)
    assignments: dict = field(default_factory=dict)
    bonuses: dict = field(default_factory=dict)
    operations: dict = field(default_factory=dict)
    operation_logs: dict = field(default_factory=dict)
    skills: dict = field(default_factory=dict)
    user_skills: dict = field(default_factory=dict)
    faults: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def new_id(self) -> str:
        return f"{next(self.ids):012d}"


class FakeTolokaApp:
    """The WSGI application. One lock serialises state changes (requests still overlap in sleeps)."""

    def __init__(self, *, token: str):
        self.state = FakeTolokaState(token=token)
        self.lock = threading.RLock()

    # -------------------------------------------------------------------------------- WSGI plumbing

    def __call__(self, environ, start_response):
        method = environ["REQUEST_METHOD"].upper()
        path = environ.get("PATH_INFO", "")
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        body = json.loads(raw, parse_float=Decimal) if raw else None
        with self.lock:
            self.state.requests.append(
                {"method": method, "path": path, "query": query, "body": copy.deepcopy(body)}
            )
            fault = self._take_fault(method, path) if not path.startswith("/_fake/") else None
        if fault and fault.status is not None:
            if fault.empty:
                return self._respond(start_response, fault.status, None)
            code = "INTERNAL_ERROR" if fault.status >= 500 else "FAKE_FAULT"
            return self._respond(start_response, fault.status, {"code": code, "message": "injected fault"})
        if fault and not fault.after:
            time.sleep(fault.delay_s)
        try:
            if path.startswith("/_fake/"):
                status, payload = self._control(method, path, body or {})
            else:
                self._authenticate(environ)
                status, payload = self._api(method, path, query, body)
        except FakeError as error:
            status = error.status
            payload = {"code": error.code, "message": error.message, "request_id": uuid.uuid4().hex}
        if fault and fault.after:
            time.sleep(fault.delay_s)
        return self._respond(start_response, status, payload)

    def _respond(self, start_response, status: int, payload):
        reason = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content"}.get(status, "Error")
        if payload is None:
            start_response(f"{status} {reason}", [("Content-Length", "0")])
            return [b""]
        data = json.dumps(payload, default=_json_default).encode()
        start_response(
            f"{status} {reason}",
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
            ],
        )
        return [data]

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.state.faults:
            if fault.times > 0 and fault.method in (method, "*") and fault.path.search(path):
                fault.times -= 1
                return fault
        return None

    def _authenticate(self, environ) -> None:
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, token = header.partition(" ")
        if scheme not in ("OAuth", "ApiKey") or token != self.state.token:
            raise FakeError(401, "AUTHENTICATION_ERROR", "invalid token")

    # -------------------------------------------------------------------------------- control

    def _control(self, method: str, path: str, body: dict):
        with self.lock:
            state = self.state
            if method == "POST" and path == "/_fake/reset":
                self.state = FakeTolokaState(token=state.token)
                return 200, {}
            if method == "GET" and path == "/_fake/state":
                return 200, self.snapshot()
            if method == "GET" and path == "/_fake/requests":
                return 200, list(state.requests)
            if method == "POST" and path == "/_fake/faults":
                state.faults.append(
                    Fault(
                        method=body.get("method", "*").upper(),
                        path=re.compile(body["path"]),
                        times=int(body.get("times", 1)),
                        status=body.get("status"),
                        empty=bool(body.get("empty", False)),
                        delay_s=float(body.get("delay_s", 0)),
                        after=bool(body.get("after", False)),
                    )
                )
                return 200, {}
            match = re.fullmatch(r"/_fake/pools/([^/]+)/take", path)
            if method == "POST" and match:
                return 201, self._take(match.group(1), str(body["user_id"]))
            match = re.fullmatch(r"/_fake/assignments/([^/]+)/submit", path)
            if method == "POST" and match:
                assignment = self._get(state.assignments, match.group(1))
                if assignment["status"] != "ACTIVE":
                    raise FakeError(409, "CONFLICT_STATE", f"assignment is {assignment['status']}")
                assignment["status"] = "SUBMITTED"
                assignment["submitted"] = _now()
                assignment["solutions"] = [
                    {"output_values": {"completion_code": body.get("completion_code", "")}}
                ]
                return 200, assignment
        raise FakeError(404, "DOES_NOT_EXIST", f"no control endpoint {method} {path}")

    def _take(self, pool_id: str, user_id: str) -> dict:
        state = self.state
        pool = self._get(state.pools, pool_id)
        if pool["status"] != "OPEN":
            raise FakeError(409, "CONFLICT_STATE", f"pool {pool_id} is {pool['status']}")
        done_by_user = {a["task_suite_id"] for a in state.assignments.values() if a["user_id"] == user_id}
        for suite in state.suites.values():
            if (
                suite["pool_id"] == pool_id
                and suite["remaining_overlap"] > 0
                and suite["id"] not in done_by_user
            ):
                suite["remaining_overlap"] -= 1
                assignment = {
                    "id": state.new_id(),
                    "task_suite_id": suite["id"],
                    "pool_id": pool_id,
                    "user_id": user_id,
                    "status": "ACTIVE",
                    "reward": pool.get("reward_per_assignment", 0),
                    "tasks": [{"input_values": t.get("input_values", {})} for t in suite.get("tasks", [])],
                    "solutions": [],
                    "bonus_ids": [],
                    "mixed": False,
                    "automerged": False,
                    "created": _now(),
                }
                state.assignments[assignment["id"]] = assignment
                return assignment
        raise FakeError(409, "CONFLICT_STATE", f"no task suite left for user {user_id} in pool {pool_id}")

    def snapshot(self) -> dict:
        with self.lock:
            state = self.state
            return copy.deepcopy(
                {
                    "projects": state.projects,
                    "pools": state.pools,
                    "suites": state.suites,
                    "assignments": state.assignments,
                    "bonuses": state.bonuses,
                    "skills": state.skills,
                    "user_skills": state.user_skills,
                    "operations": state.operations,
                }
            )

    # -------------------------------------------------------------------------------- API

    @staticmethod
    def _get(table: dict, object_id: str) -> dict:
        try:
            return table[object_id]
        except KeyError:
            raise FakeError(404, "DOES_NOT_EXIST", f"object {object_id} does not exist") from None

    def _api(self, method: str, path: str, query: dict, body):
        if not path.startswith("/api/v1/"):
            raise FakeError(404, "DOES_NOT_EXIST", f"no endpoint {path}")
        route = path[len("/api/v1") :]
        with self.lock:
            for pattern, verb, handler in self._routes():
                match = re.fullmatch(pattern, route)
                if match and verb == method:
                    return handler(*match.groups(), query=query, body=body)
        raise FakeError(404, "DOES_NOT_EXIST", f"no endpoint {method} {path}")

    def _routes(self):
        return (
            (r"/requester", "GET", self._requester),
            (r"/projects", "POST", self._create_project),
            (r"/projects/([^/]+)", "GET", lambda pid, **_: (200, self._get(self.state.projects, pid))),
            (r"/pools", "POST", self._create_pool),
            (r"/pools/([^/]+)", "GET", lambda pid, **_: (200, self._get(self.state.pools, pid))),
            (r"/pools/([^/]+)/(open|close|archive|close-for-update)", "POST", self._pool_action),
            (r"/task-suites", "POST", self._create_suites),
            (r"/task-suites", "GET", self._find_suites),
            (r"/task-suites/([^/]+)", "GET", lambda sid, **_: (200, self._get(self.state.suites, sid))),
            (r"/operations/([^/]+)", "GET", lambda oid, **_: (200, self._get(self.state.operations, oid))),
            (r"/operations/([^/]+)/log", "GET", self._operation_log),
            (r"/assignments", "GET", self._find_assignments),
            (r"/assignments/([^/]+)", "GET", lambda aid, **_: (200, self._get(self.state.assignments, aid))),
            (r"/assignments/([^/]+)", "PATCH", self._patch_assignment),
            (r"/user-bonuses", "POST", self._create_bonuses),
            (r"/user-bonuses/([^/]+)", "GET", lambda bid, **_: (200, self._get(self.state.bonuses, bid))),
            (r"/skills", "POST", self._create_skill),
            (r"/skills/([^/]+)", "GET", lambda sid, **_: (200, self._get(self.state.skills, sid))),
            (r"/user-skills", "PUT", self._set_user_skill),
        )

    def _requester(self, **_):
        return 200, {"id": "requester-1", "balance": self.state.balance, "public_name": {"EN": "Fake lab"}}

    def _create_project(self, *, body, **_):
        project = dict(body, id=self.state.new_id(), status="ACTIVE", created=_now())
        self.state.projects[project["id"]] = project
        return 201, project

    def _create_pool(self, *, body, **_):
        if body.get("project_id") not in self.state.projects:
            raise FakeError(400, "VALIDATION_ERROR", f"project {body.get('project_id')} does not exist")
        pool = dict(body, id=self.state.new_id(), status="CLOSED", created=_now())
        self.state.pools[pool["id"]] = pool
        return 201, pool

    def _pool_action(self, pool_id, action, **_):
        pool = self._get(self.state.pools, pool_id)
        target = {"open": "OPEN", "close": "CLOSED", "archive": "ARCHIVED", "close-for-update": "CLOSED"}[
            action
        ]
        if pool["status"] == target:
            return 204, None
        pool["status"] = target
        operation = self._operation(f"POOL.{action.upper().replace('-', '_')}", {"pool_id": pool_id})
        return 202, operation

    def _operation(self, op_type: str, parameters: dict, op_id: str | None = None) -> dict:
        now = _now()
        operation = {
            "id": op_id or str(uuid.uuid4()),
            "type": op_type,
            "status": "SUCCESS",
            "submitted": now,
            "started": now,
            "finished": now,
            "progress": 100,
            "parameters": parameters,
            "details": {},
        }
        self.state.operations[operation["id"]] = operation
        return operation

    def _create_suites(self, *, query, body, **_):
        items = body if isinstance(body, list) else [body]
        op_id = query.get("operation_id")
        if op_id and op_id in self.state.operations:
            raise FakeError(409, "OPERATION_ALREADY_EXISTS", f"operation {op_id} already exists")
        allow_defaults = query.get("allow_defaults") == "true"
        log, created = [], {}
        for index, item in enumerate(items):
            pool = self.state.pools.get(item.get("pool_id"))
            if pool is None:
                log.append(
                    {"type": "TASK_SUITE_CREATE", "success": False, "input": item,
                     "output": {"pool_id": {"code": "VALUE_REQUIRED", "message": "no such pool"}}}
                )  # fmt: skip
                continue
            overlap = item.get("overlap")
            if overlap is None and allow_defaults:
                overlap = (pool.get("defaults") or {}).get("default_overlap_for_new_task_suites", 1)
            if overlap is None:
                raise FakeError(400, "VALIDATION_ERROR", "overlap is required without allow_defaults")
            suite = {k: v for k, v in item.items() if k != "__item_idx"}
            suite.update(id=self.state.new_id(), overlap=overlap, remaining_overlap=overlap, created=_now())
            self.state.suites[suite["id"]] = suite
            created[str(item.get("__item_idx", index))] = suite
            log.append(
                {"type": "TASK_SUITE_CREATE", "success": True, "input": item,
                 "output": {"task_suite_id": suite["id"]}}
            )  # fmt: skip
        if query.get("async_mode", "true") == "false":
            return 201, (
                {"items": created, "validation_errors": {}} if isinstance(body, list) else created.get("0")
            )
        operation = self._operation("TASK_SUITE.BATCH_CREATE", {"skip_invalid_items": False}, op_id)
        self.state.operation_logs[operation["id"]] = log
        return 202, operation

    def _operation_log(self, op_id, **_):
        self._get(self.state.operations, op_id)
        return 200, self.state.operation_logs.get(op_id, [])

    @staticmethod
    def _search(objects, query: dict, filters: tuple[str, ...]):
        items = list(objects)
        for name in filters:
            if name in query:
                wanted = set(query[name].split(","))
                items = [o for o in items if str(o.get(name)) in wanted]
        for suffix, keep in (
            ("_gt", str.__gt__),
            ("_gte", str.__ge__),
            ("_lt", str.__lt__),
            ("_lte", str.__le__),
        ):
            if "id" + suffix in query:
                items = [o for o in items if keep(o["id"], query["id" + suffix])]
        items.sort(key=lambda o: o["id"], reverse=query.get("sort", "id").startswith("-"))
        limit = int(query.get("limit", 50))
        return 200, {"items": items[:limit], "has_more": len(items) > limit}

    def _find_suites(self, *, query, **_):
        return self._search(self.state.suites.values(), query, ("pool_id",))

    def _find_assignments(self, *, query, **_):
        return self._search(
            self.state.assignments.values(), query, ("pool_id", "status", "task_suite_id", "user_id")
        )

    def _patch_assignment(self, assignment_id, *, body, **_):
        assignment = self._get(self.state.assignments, assignment_id)
        wanted = body.get("status")
        if (assignment["status"], wanted) not in ASSIGNMENT_TRANSITIONS:
            raise FakeError(
                409,
                "CONFLICT_STATE",
                f"assignment {assignment_id} is {assignment['status']}; cannot be {wanted}",
            )
        assignment["status"] = wanted
        assignment["public_comment"] = body.get("public_comment", "")
        assignment[wanted.lower()] = _now()
        return 200, assignment

    def _create_bonuses(self, *, query, body, **_):
        items = body if isinstance(body, list) else [body]
        op_id = query.get("operation_id")
        if op_id and op_id in self.state.operations:
            raise FakeError(409, "OPERATION_ALREADY_EXISTS", f"operation {op_id} already exists")
        log = []
        for item in items:
            bonus = {k: v for k, v in item.items() if k != "__item_idx"}
            bonus.update(id=self.state.new_id(), created=_now())
            self.state.bonuses[bonus["id"]] = bonus
            self.state.balance -= Decimal(str(bonus.get("amount", 0)))
            if bonus.get("assignment_id") in self.state.assignments:
                self.state.assignments[bonus["assignment_id"]]["bonus_ids"].append(bonus["id"])
            log.append({"type": "USER_BONUS_CREATE", "success": True, "input": item,
                        "output": {"user_bonus_id": bonus["id"]}})  # fmt: skip
        if query.get("async_mode", "true") == "false":
            return 201, bonus if not isinstance(body, list) else {"items": {}, "validation_errors": {}}
        operation = self._operation("USER_BONUS.BATCH_CREATE", {"skip_invalid_items": False}, op_id)
        self.state.operation_logs[operation["id"]] = log
        return 202, operation

    def _create_skill(self, *, body, **_):
        skill = dict(body, id=self.state.new_id(), created=_now())
        self.state.skills[skill["id"]] = skill
        return 201, skill

    def _set_user_skill(self, *, body, **_):
        self._get(self.state.skills, body["skill_id"])
        key = f"{body['skill_id']}:{body['user_id']}"
        previous = self.state.user_skills.get(key)
        user_skill = {
            "id": previous["id"] if previous else self.state.new_id(),
            "skill_id": body["skill_id"],
            "user_id": body["user_id"],
            "value": int(Decimal(str(body.get("value", 0)))),
            "exact_value": body.get("value"),
            "created": previous["created"] if previous else _now(),
            "modified": _now(),
        }
        self.state.user_skills[key] = user_skill
        return 200, user_skill


def _json_default(value):
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Http11ServerHandler(ServerHandler):
    # toloka-kit maps the response's HTTP version through a table without HTTP/1.0; answer as 1.1
    # (still one request per connection: the server closes it after each response).
    http_version = "1.1"

    def cleanup_headers(self):
        # Say so, or the client sends its next request into the closing socket and meets "server
        # disconnected" (a retried 500 once ran out of retries that way). A WSGI app may not set this
        # hop-by-hop header itself; the server may.
        super().cleanup_headers()
        self.headers["Connection"] = "close"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):  # the request log lives in the app state
        pass

    def handle(self):
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536 or not self.parse_request():
            return
        handler = _Http11ServerHandler(
            self.rfile, self.wfile, self.get_stderr(), self.get_environ(), multithread=True
        )
        handler.request_handler = self
        handler.run(self.server.get_app())


class FakeTolokaServer:
    """The fake served on 127.0.0.1 (port 0: the OS picks). ``url`` is what TolokaClient(url=...) takes."""

    def __init__(self, *, token: str):
        self.app = FakeTolokaApp(token=token)
        self.httpd = make_server(
            "127.0.0.1", 0, self.app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="fake-toloka", daemon=True)

    def __enter__(self) -> FakeTolokaServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # Test-side helpers (plain HTTP, like any other client of the fake).
    def control(self, method: str, path: str, payload: dict | None = None):
        import httpx

        response = httpx.request(method, self.url + path, json=payload, timeout=10)
        if response.status_code >= 400:
            raise AssertionError(f"fake control {method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    def take(self, *, pool_id: str, user_id: str) -> dict:
        return self.control("POST", f"/_fake/pools/{pool_id}/take", {"user_id": user_id})

    def submit(self, *, assignment_id: str, completion_code: str) -> dict:
        return self.control(
            "POST", f"/_fake/assignments/{assignment_id}/submit", {"completion_code": completion_code}
        )

    def fault(self, *, method: str, path: str, times: int = 1, **options) -> None:
        self.control("POST", "/_fake/faults", {"method": method, "path": path, "times": times, **options})

    def state(self) -> dict:
        return self.control("GET", "/_fake/state")

    def requests(self) -> list[dict]:
        return self.control("GET", "/_fake/requests")


def serve(*, token: str) -> FakeTolokaServer:
    return FakeTolokaServer(token=token)
