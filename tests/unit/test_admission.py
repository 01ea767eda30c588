"""The gateway's limits as pure logic, on a fake clock (voicebot/gateway/admission.py), and the log
formatter's redaction of what people said (voicebot/common/logs.py)."""

from __future__ import annotations

import json
import logging

from pydantic import SecretStr

from voicebot.common.logs import JsonFormatter
from voicebot.gateway.admission import LogBudget, TokenBucket, Unauthenticated, UserSessions
from voicebot.gateway.config import GatewaySettings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_gives_its_burst_then_its_rate():
    clock = Clock()
    bucket = TokenBucket(rate_per_s=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5  # one token back
    assert [bucket.take() for _ in range(2)] == [True, False]
    clock.now += 60  # refilled to the burst, not beyond
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_a_bucket_at_rate_zero_never_refuses():
    bucket = TokenBucket(0, 1, clock=Clock())
    assert all(bucket.take() for _ in range(1000))


def test_fifty_turns_a_second_get_about_the_rate_through():
    clock = Clock()
    bucket = TokenBucket(rate_per_s=1.0, burst=5, clock=clock)
    taken = 0
    for _ in range(500):  # ten seconds at 50 a second
        clock.now += 0.02
        taken += bucket.take()
    assert 5 + 9 <= taken <= 5 + 10


def test_user_sessions_cap_each_user_alone():
    users = UserSessions(per_user=2, overrides={"phone": 0})
    assert users.open("alice") and users.open("alice")
    assert not users.open("alice")  # alice is full ...
    assert users.open("bob")  # ... bob is not
    users.close("alice")
    assert users.open("alice")
    assert all(users.open("phone") for _ in range(50))  # 0: the phone user has no cap of its own
    for _ in range(50):
        users.close("phone")
    assert "phone" not in users.open_by_user  # nothing left behind for a user with no session


def test_unauthenticated_sockets_wait_within_their_limit():
    waiting = Unauthenticated(limit=2)
    assert waiting.enter() and waiting.enter()
    assert not waiting.enter()
    waiting.leave()
    assert waiting.enter()


def test_the_log_budget_drops_lines_beyond_its_rate():
    clock = Clock()
    budget = LogBudget(5, clock=clock)
    assert sum(budget.allow() for _ in range(100)) == 5
    clock.now += 1
    assert sum(budget.allow() for _ in range(100)) == 5
    assert all(LogBudget(0).allow() for _ in range(100))  # 0: no limit


def test_secrets_in_the_settings_never_show():
    settings = GatewaySettings(tokens="tok-secret=alice", twilio_secret="twilio-secret-value",
                               redis_url="redis://:redis-password@host:6379/0")
    shown = repr(settings) + str(settings) + json.dumps(settings.model_dump(mode="json"))
    for secret in ("tok-secret", "twilio-secret-value", "redis-password"):
        assert secret not in shown
    assert settings.token_map() == {"tok-secret": "alice"}
    assert isinstance(settings.twilio_secret, SecretStr)


def record(**extra) -> logging.LogRecord:
    rec = logging.LogRecord("voicebot.gateway.call", logging.INFO, __file__, 1, "turn", (), None)
    rec.__dict__.update(extra)
    return rec


def test_what_people_said_is_redacted_unless_an_operator_turns_it_on():
    fields = {"text": "my card is 4111 1111", "early": "my card", "final": "my card is 4111",
              "context": {"caller": "+15550100", "language": "en"}, "turn_id": "t_1"}
    quiet = json.loads(JsonFormatter("gateway").format(record(**fields)))
    assert "4111" not in json.dumps(quiet) and "+1555" not in json.dumps(quiet)
    assert quiet["turn_id"] == "t_1"  # ids stay: they are how a call is found
    assert quiet["context"] == {"caller": "<redacted>", "language": "<redacted>"}
    assert quiet["text"] == "<redacted: 20 chars>"
    loud = json.loads(JsonFormatter("gateway", content=True).format(record(**fields)))
    assert loud["text"] == fields["text"] and loud["context"] == fields["context"]


def test_credentials_in_urls_never_reach_a_log_line():
    rec = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s" [accepted]',
                            ("127.0.0.1:5", "/v1/call?token=tok-secret&x=1"), None)
    rec.__dict__["url"] = "/v1/twilio?secret=twilio-secret"
    for content in (False, True):  # not even with the operator's content switch on
        line = JsonFormatter("gateway", content=content).format(rec)
        assert "tok-secret" not in line and "twilio-secret" not in line, line
        assert "token=<redacted>&x=1" in line


def test_the_brains_redis_url_never_shows_its_password():
    """Operators put a managed Redis's URL, password included, in BRAIN_REDIS_URL (docs/kubernetes.md)."""
    from voicebot.brain.config import BrainSettings

    settings = BrainSettings(redis_url="redis://:redis-password@host:6379/0")
    shown = repr(settings) + str(settings) + json.dumps(settings.model_dump(mode="json"))
    assert "redis-password" not in shown
    assert settings.redis_url.get_secret_value() == "redis://:redis-password@host:6379/0"
