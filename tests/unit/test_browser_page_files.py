"""The browser page's files and the business it names: the gateway fills in GATEWAY_AGENT_NAME and
GATEWAY_AGENT_PURPOSE as text, and make run (devstack) takes them from the brain's profile.
The page in a browser: tests/browser/test_browser_page.py."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.conftest import STACK_PROFILE
from voicebot.devstack import page_env
from voicebot.gateway.app import create_app, render_page
from voicebot.gateway.config import GatewaySettings


def test_the_page_names_the_business_as_text():
    page = render_page(GatewaySettings(agent_name="<b>Bo & Co</b>", agent_purpose="booking {{agent_name}}"))
    assert '<h1 id="agent">&lt;b&gt;Bo &amp; Co&lt;/b&gt;</h1>' in page
    assert "booking {{agent_name}}" in page  # a value is filled in once, never read as a placeholder
    assert "{{" not in page.replace("booking {{agent_name}}", "")


def test_without_a_business_the_page_says_voicebot():
    page = render_page(GatewaySettings())
    assert '<h1 id="agent">voicebot</h1>' in page and "{{" not in page


def test_the_gateway_serves_the_page_and_its_script_and_style():
    # No lifespan (no upstreams): the page needs none.
    client = TestClient(create_app(GatewaySettings(agent_name="Joe")))
    assert '<h1 id="agent">Joe</h1>' in client.get("/").text
    for path, kind in (("/static/page.js", "javascript"), ("/static/page.css", "text/css")):
        response = client.get(path)
        assert response.status_code == 200 and kind in response.headers["content-type"], path


def test_make_run_names_the_profiles_business(monkeypatch):
    monkeypatch.delenv("GATEWAY_AGENT_NAME", raising=False)
    monkeypatch.setenv("GATEWAY_AGENT_PURPOSE", "set by hand")
    monkeypatch.delenv("GATEWAY_LANGUAGES", raising=False)
    env = page_env(str(STACK_PROFILE))
    assert env == {"GATEWAY_AGENT_NAME": "Joe", "GATEWAY_AGENT_PURPOSE": "set by hand",
                   "GATEWAY_LANGUAGES": "en"}
    assert page_env("salon")["GATEWAY_AGENT_NAME"] == "Lumi"  # a shipped profile, by its name
    assert page_env("restaurant")["GATEWAY_LANGUAGES"] == "en,ko"  # the languages it speaks
    assert page_env(None) == {} and page_env("/nowhere/profile.yaml") == {}
