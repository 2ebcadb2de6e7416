"""The simulated annotators' client: the player protocol of ``static/player/main.js`` spoken over HTTP.

One bot is one browser tab: it POSTs the run's entry link with its device (as the entry page's script does),
reads the player page's payload (``<script id="player-payload">``), GETs ``state``, POSTs ``client`` (its
measurements, ``bot`` among them), then per trial GETs its pictures, POSTs ``presented``, waits phases A, B
and C and a reaction time, POSTs the ``click`` (canonical px, phase onsets on its own clock) and at the end
``finish``. A bot that leaves stops after a random number of clicks, before the last, and sends nothing more.
Retries a 503 (the server's "try again") a few times, as the player's outbox does. Where to click comes from
``aim(session_id, position)`` (``collector.services.bots.bot_aim``); everything else is HTTP.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import httpx

logger = logging.getLogger(__name__)

USER_AGENTS = {
    "pc": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36 "
    "ClicklabBot/1",
    "mobile": "Mozilla/5.0 (Linux; Android 14; Pixel 7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 "
    "Mobile Safari/537.36 ClicklabBot/1",
}
#: CSS px the bot says the image was shown at, per device (a desktop window, a phone held upright).
SHOWN_WIDTH_PX = {"pc": 1200.0, "mobile": 390.0}
_PAYLOAD = re.compile(r'<script id="player-payload" type="application/json">(.*?)</script>', re.S)


class BotProtocolError(RuntimeError):
    """The server answered a bot in a way the player would not accept; the message names the request."""


@dataclass
class BotOutcome:
    """What one bot did: its device, whether it meant to leave, the session it got, clicks sent."""

    index: int
    device: str
    leaves_after: int | None
    session_id: int | None = None
    trials: int = 0
    clicks: int = 0
    finished: bool = False
    refused: str = ""
    error: str = ""
    aims: list[str] = field(default_factory=list)


def _request(client: httpx.Client, method: str, url: str, **kwargs) -> httpx.Response:
    for attempt in range(5):
        response = client.request(method, url, **kwargs)
        if response.status_code not in (502, 503, 504):
            return response
        time.sleep(0.2 * (attempt + 1))
    return response


def _post_json(client: httpx.Client, url: str, body: dict, what: str) -> dict:
    response = _request(client, "POST", url, json=body)
    if response.status_code >= 400:
        raise BotProtocolError(f"{what} {url} answered {response.status_code}: {response.text[:300]}")
    return response.json()


def bot_play(
    *,
    index: int,
    entry_url: str,
    device: str,
    leaves_after: int | None,
    aim: Callable[[int, int], tuple[float, float, str]],
    rng: random.Random,
    timeout_s: float = 30.0,
) -> BotOutcome:
    """Play one batch from ``entry_url`` as a ``device`` bot; ``leaves_after``: stop after that many clicks
    (None: finish the batch). ``aim(session_id, position) -> (x, y, kind)``. Never raises: an answer the
    player would not accept is the outcome's ``error``."""
    outcome = BotOutcome(index=index, device=device, leaves_after=leaves_after)
    origin = httpx.URL(entry_url)
    headers = {"User-Agent": USER_AGENTS[device], "Accept-Language": "en"}
    with httpx.Client(headers=headers, timeout=timeout_s, follow_redirects=False) as client:
        try:
            _request(client, "GET", entry_url)  # the entry page, as a browser opens the link
            page = _request(client, "POST", entry_url, data={"device": device})
            if page.status_code == 409:
                outcome.refused = re.sub(r"<[^>]+>", " ", page.text)
                outcome.refused = " ".join(outcome.refused.split())[-300:]
                return outcome
            if page.status_code != 200:
                raise BotProtocolError(f"entry {entry_url} answered {page.status_code}")
            found = _PAYLOAD.search(page.text)
            if not found:
                raise BotProtocolError(f"entry {entry_url}: the player page has no player-payload")
            payload = json.loads(found.group(1))
            outcome.session_id = payload["session"]["id"]
            api = {name: str(origin.join(path)) for name, path in payload["api"].items()}
            state = _request(client, "GET", api["state"])
            if state.status_code != 200:
                raise BotProtocolError(f"state answered {state.status_code}: {state.text[:300]}")
            payload = state.json()
            timing = payload["study"]
            _post_json(
                client,
                api["client"],
                {
                    "client_info": {
                        "bot": True,
                        "viewport_w": SHOWN_WIDTH_PX[device],
                        "dpr": 3.0 if device == "mobile" else 1.0,
                        "pointer_coarse": device == "mobile",
                        "max_touch_points": 5 if device == "mobile" else 0,
                    },
                    "detected_device": device,
                },
                "client",
            )
            trials = [trial for trial in payload["trials"] if not trial["done"]]
            outcome.trials = len(payload["trials"])
            clock0 = time.monotonic()

            def now_ms() -> float:
                return (time.monotonic() - clock0) * 1000.0

            for trial in trials:
                if leaves_after is not None and outcome.clicks >= leaves_after:
                    return outcome  # the tab closes: nothing more is sent
                for key in ("display_url", "target_url"):
                    if trial.get(key):
                        picture = _request(client, "GET", str(origin.join(trial[key])))
                        if picture.status_code != 200:
                            raise BotProtocolError(f"picture {trial[key]} answered {picture.status_code}")
                position = trial["position"]
                _post_json(
                    client,
                    api["presented"],
                    {"position": position, "presentation_id": uuid.uuid4().hex},
                    "presented",
                )
                onset_a = now_ms()
                onsets = {"A": onset_a}
                onsets["B"] = onset_a + timing["image_ms"]
                onsets["C"] = onsets["B"] + timing["target_ms"]
                onsets["D"] = onsets["C"] + timing["blocked_ms"]
                reaction_ms = rng.uniform(350.0, 900.0)
                time.sleep(max(0.0, (onsets["D"] + reaction_ms - now_ms()) / 1000.0))
                x, y, kind = aim(outcome.session_id, position)
                outcome.aims.append(kind)
                click_at = now_ms()
                width = SHOWN_WIDTH_PX[device]
                body = {
                    "position": position,
                    "idempotency_key": uuid.uuid4().hex,
                    "x": x,
                    "y": y,
                    "shown_width": width,
                    "shown_height": width * trial["height"] / trial["width"],
                    "pointer_type": "touch" if device == "mobile" else "mouse",
                    "reaction_ms": click_at - onsets["D"],
                    "event_timestamp_ms": click_at,
                    "phase_onsets_ms": {**onsets, "click": click_at},
                    "scheduled_onsets_ms": dict(onsets),
                    "load_wait_ms": 0.0,
                    "blocked_clicks": 0,
                    "flags": [],
                    "refresh_hz": 60.0,
                }
                _post_json(client, api["click"], body, "click")
                outcome.clicks += 1
            _post_json(client, api["finish"], {}, "finish")
            outcome.finished = True
        except (BotProtocolError, httpx.HTTPError, KeyError, ValueError) as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"[:500]
            logger.warning(
                "bot failed", extra={"bot": index, "session_id": outcome.session_id, "error": outcome.error}
            )
    return outcome


@dataclass
class BotRunReport:
    """A run's outcome: every bot's, in order."""

    bots: list[BotOutcome]

    @property
    def summary(self) -> dict:
        return {
            "bots": len(self.bots),
            "pc": sum(1 for bot in self.bots if bot.device == "pc"),
            "mobile": sum(1 for bot in self.bots if bot.device == "mobile"),
            "finished": sum(1 for bot in self.bots if bot.finished),
            "left": sum(
                1 for bot in self.bots if bot.leaves_after is not None and not bot.error and bot.session_id
            ),
            "refused": sum(1 for bot in self.bots if bot.refused),
            "errors": [bot.error for bot in self.bots if bot.error],
            "clicks": sum(bot.clicks for bot in self.bots),
        }

    def as_dict(self) -> dict:
        return {"summary": self.summary, "bots": [asdict(bot) for bot in self.bots]}


def bots_play(
    *,
    entry_url_for: Callable[[str], str],
    bots: int,
    phone_share: float,
    leave_share: float,
    aim: Callable[[int, int], tuple[float, float, str]],
    seed: int | None = None,
    concurrency: int = 8,
    batch_size: int = 10,
    on_done: Callable[[BotOutcome], None] | None = None,
) -> BotRunReport:
    """Play ``bots`` batches, ``concurrency`` at a time; the first ``round(bots * phone_share)`` of a shuffled
    order are phones, ``round(bots * leave_share)`` leave after 1..batch_size-1 clicks (seeded by ``seed``).
    ``entry_url_for(device)``: the run's entry link for that device."""
    rng = random.Random(seed)
    devices = ["mobile"] * round(bots * phone_share) + ["pc"] * (bots - round(bots * phone_share))
    leaving = [True] * round(bots * leave_share) + [False] * (bots - round(bots * leave_share))
    rng.shuffle(devices)
    rng.shuffle(leaving)
    plans = [
        (
            index,
            devices[index],
            rng.randint(1, max(1, batch_size - 1)) if leaving[index] else None,
            rng.random(),
        )
        for index in range(bots)
    ]

    def play(plan) -> BotOutcome:
        index, device, leaves_after, bot_seed = plan
        outcome = bot_play(
            index=index,
            entry_url=entry_url_for(device),
            device=device,
            leaves_after=leaves_after,
            aim=aim,
            rng=random.Random(bot_seed),
        )
        if on_done is not None:
            on_done(outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, bots))) as pool:
        outcomes = list(pool.map(play, plans))
    return BotRunReport(bots=outcomes)
