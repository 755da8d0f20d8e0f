"""The plugin, driven as LangBot drives it: LangBot builds the SDK's event
(`PersonNormalMessageReceived`, `GroupNormalMessageReceived`), wraps it in an
`EventContext` and serializes it; the plugin runtime validates it back and calls the
handlers the listener registered for the event's class (as the SDK's `emit_event`
does); the context goes back serialized, and LangBot reads `user_message_alter` from it.

The SDK ships no test harness, so this file plays both ends with the SDK's own types,
against a real `hostpipe serve` (`HOSTPIPE_URL`, `HOSTPIPE_TOKEN`, `HOSTPIPE_PIPELINE`;
tests/e2e/langbot.rs starts it, with the demo MCP server attached) and against servers
that hang, refuse or are not there.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "components" / "event_listener"))

import context as plugin  # noqa: E402  (the listener module, as the runtime loads it)
from langbot_plugin.api.definition.plugin import BasePlugin  # noqa: E402
from langbot_plugin.api.entities import context, events  # noqa: E402
from langbot_plugin.api.entities.builtin.platform import entities, message  # noqa: E402
from langbot_plugin.api.entities.builtin.platform import events as platform_events  # noqa: E402

URL = os.environ.get("HOSTPIPE_URL", "")
TOKEN = os.environ.get("HOSTPIPE_TOKEN", "")
PIPELINE = os.environ.get("HOSTPIPE_PIPELINE", "default")
QUESTION = "What does the config say about the timeout?"
#: A line of the demo server's demo://config/app.json, which the pipeline attaches.
ATTACHED = '"request_timeout_ms": 10000'

needs_hostpipe = pytest.mark.skipif(not URL, reason="HOSTPIPE_URL is not set")
pytestmark = pytest.mark.anyio


class Plugin(BasePlugin):
    pass


def chain(text: str) -> message.MessageChain:
    return message.MessageChain([message.Plain(text=text)])


def person_event(text: str, user: str = "12345") -> events.PersonNormalMessageReceived:
    friend = entities.Friend(id=user, nickname="Ann", remark=None)
    return events.PersonNormalMessageReceived(
        launcher_type="person",
        launcher_id=user,
        sender_id=user,
        text_message=text,
        message_event=platform_events.FriendMessage(sender=friend, message_chain=chain(text)),
        message_chain=chain(text),
    )


def group_event(text: str, group: str = "67890", user: str = "12345"):
    g = entities.Group(id=group, name="ops", permission=entities.Permission.Member)
    member = entities.GroupMember(
        id=user, member_name="Ann", permission=entities.Permission.Member, group=g
    )
    return events.GroupNormalMessageReceived(
        launcher_type="group",
        launcher_id=group,
        sender_id=user,
        text_message=text,
        message_event=platform_events.GroupMessage(sender=member, message_chain=chain(text)),
        message_chain=chain(text),
    )


class Recording(context.EventContext):
    """The runtime's side of `EventContext`: what the plugin sent back with `reply`."""

    replies: list = []

    async def reply(self, message_chain, quote_origin: bool = False):
        self.replies.append(message_chain)


async def deliver(config: dict, event, seen: dict | None = None) -> events.BaseEventModel:
    """LangBot → runtime → plugin → LangBot: the event as LangBot reads it back.
    `seen`, when given, gets the replies the plugin sent and whether it prevented the
    default (the runner)."""
    sent = context.EventContext.from_event(event).model_dump(mode="json")
    received = Recording.model_validate(sent)
    received.replies = []
    listener = plugin.ContextListener()
    listener.plugin = Plugin()
    listener.plugin.config = config
    await listener.initialize()
    handlers = listener.registered_handlers.get(received.event.__class__, [])
    assert handlers, f"no handler for {received.event.__class__.__name__}"
    for handler in handlers:
        await handler(received)
    back = received.model_dump(mode="json")
    if seen is not None:
        seen["replies"] = [str(c) for c in received.replies]
        seen["prevented"] = back["is_prevent_default"]
    return type(event).model_validate(back["event"])


def config(**overrides) -> dict:
    base = {"hostpipe_url": URL, "token": TOKEN, "pipeline": PIPELINE, "timeout_ms": 20000}
    base.update(overrides)
    return base


def fenced(text: str, needle: str) -> bool:
    """Whether `needle` is inside a `<resource-NONCE …>…</resource-NONCE>` fence."""
    for m in re.finditer(r"<(resource-[0-9a-f]+) [^>]*>(.*?)</\1>", text, re.S):
        if needle in m.group(2):
            return True
    return False


@needs_hostpipe
async def test_a_private_message_gets_the_pipelines_context_before_it():
    event = await deliver(config(), person_event(QUESTION))
    altered = event.user_message_alter
    assert isinstance(altered, str), altered
    assert altered.endswith("\n\n" + QUESTION), altered[-200:]
    assert fenced(altered, ATTACHED), altered[:2000]
    assert 'uri="demo://config/app.json"' in altered


@needs_hostpipe
async def test_a_group_message_is_its_own_conversation_in_hostpipe():
    group = f"g{int(time.time() * 1000)}"
    event = await deliver(config(), group_event(QUESTION, group=group))
    assert fenced(event.user_message_alter, ATTACHED)
    async with httpx.AsyncClient() as client:
        r = await client.get(
            f"{URL}/v1/history",
            params={"conversation": f"group_{group}"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    r.raise_for_status()
    reads = [rec["uri"] for rec in r.json()["records"]]
    assert "demo://config/app.json" in reads, r.text


@needs_hostpipe
async def test_a_prompt_command_reaches_the_runner_expanded():
    seen: dict = {}
    event = await deliver(config(), person_event("/demo:summarize_doc topic=handbook"), seen)
    altered = event.user_message_alter
    assert altered.endswith(
        "Summarize the document demo://docs/handbook.md in five bullet points."
    ), altered[-300:]
    assert "/demo:summarize_doc" not in altered
    assert fenced(altered, ATTACHED)
    assert seen == {"replies": [], "prevented": False}


@needs_hostpipe
async def test_a_prompt_command_missing_its_argument_gets_hostpipes_reply_not_the_runner():
    seen: dict = {}
    event = await deliver(config(), person_event("/demo:summarize_doc"), seen)
    assert event.user_message_alter is None
    assert seen["prevented"] is True
    assert len(seen["replies"]) == 1 and "topic" in seen["replies"][0], seen


@needs_hostpipe
async def test_what_another_plugin_put_there_stays_after_the_context():
    event = person_event(QUESTION)
    event.user_message_alter = "rewritten by another plugin"
    event = await deliver(config(), event)
    assert event.user_message_alter.endswith("\n\nrewritten by another plugin")
    assert fenced(event.user_message_alter, ATTACHED)


@needs_hostpipe
async def test_a_wrong_token_leaves_the_message_alone_and_the_log_never_shows_it(caplog):
    secret = "wrong-token-0123456789abcdef-SECRET"
    with caplog.at_level(logging.WARNING, logger="hostpipe-context"):
        event = await deliver(config(token=secret), person_event(QUESTION))
    assert event.user_message_alter is None
    assert "401 (invalid_token)" in caplog.text, caplog.text
    assert secret not in caplog.text


@needs_hostpipe
async def test_an_unknown_pipeline_leaves_the_message_alone(caplog):
    with caplog.at_level(logging.WARNING, logger="hostpipe-context"):
        event = await deliver(config(pipeline="no-such-pipeline"), person_event(QUESTION))
    assert event.user_message_alter is None
    assert "404 (unknown_pipeline)" in caplog.text, caplog.text


async def test_a_hung_hostpipe_never_freezes_the_chat(caplog):
    """A server that accepts and never answers: the message goes on after timeout_ms."""
    accepted: list[asyncio.StreamWriter] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await asyncio.sleep(3600)

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="hostpipe-context"):
            event = await deliver(
                config(hostpipe_url=f"http://127.0.0.1:{port}", token="t" * 32, timeout_ms=300),
                person_event(QUESTION),
            )
        elapsed = time.monotonic() - started
    finally:
        for w in accepted:
            w.close()
        server.close()
    assert accepted, "the plugin never connected"
    assert event.user_message_alter is None
    assert elapsed < 2.0, elapsed
    assert "did not answer within 300 ms" in caplog.text, caplog.text


async def test_a_hostpipe_that_is_not_there_leaves_the_message_alone(caplog):
    # A port nothing listens on: bind one, then close it.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with caplog.at_level(logging.WARNING, logger="hostpipe-context"):
        event = await deliver(
            config(hostpipe_url=f"http://127.0.0.1:{port}", token="t" * 32, timeout_ms=2000),
            person_event(QUESTION),
        )
    assert event.user_message_alter is None
    assert "could not be reached: ConnectError" in caplog.text, caplog.text


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"hostpipe_url": "hostpipe:8787"}, "`hostpipe_url` must be an http:// or https:// URL"),
        ({"token": ""}, "`token` is empty"),
        ({"timeout_ms": "soon"}, "`timeout_ms` must be a whole number"),
    ],
)
async def test_a_bad_setting_is_named_and_the_message_goes_on(caplog, overrides, says):
    base = {"hostpipe_url": "http://127.0.0.1:9", "token": "t" * 32, "pipeline": "default"}
    base.update(overrides)
    with caplog.at_level(logging.WARNING, logger="hostpipe-context"):
        event = await deliver(base, person_event(QUESTION))
    assert event.user_message_alter is None
    assert says in caplog.text, caplog.text


def test_the_manifest_declares_the_listener_and_every_setting_the_code_reads():
    import yaml

    root = Path(__file__).resolve().parents[1]
    manifest = yaml.safe_load((root / "manifest.yaml").read_text(encoding="utf-8"))
    names = {c["name"] for c in manifest["spec"]["config"]}
    assert names == {"hostpipe_url", "token", "pipeline", "timeout_ms"}
    dirs = manifest["spec"]["components"]["EventListener"]["fromDirs"]
    component = root / dirs[0]["path"] / "context.yaml"
    spec = yaml.safe_load(component.read_text(encoding="utf-8"))
    assert spec["kind"] == "EventListener"
    assert spec["execution"]["python"]["attr"] == "ContextListener"
    assert (root / manifest["execution"]["python"]["path"]).exists()


def test_the_sdks_cli_builds_the_plugin_package(tmp_path):
    """`lbp build`, as a plugin author runs it before uploading to LangBot."""
    import shutil
    import subprocess
    import zipfile

    root = Path(__file__).resolve().parents[1]
    work = tmp_path / "plugin"
    shutil.copytree(root, work, ignore=shutil.ignore_patterns("__pycache__", "dist", ".pytest_cache"))
    lbp = Path(sys.executable).parent / "lbp"
    done = subprocess.run([str(lbp), "build"], cwd=work, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (package,) = (work / "dist").glob("*.lbpkg")
    assert package.name == "hostpipe-hostpipe-context-0.1.0.lbpkg"
    names = set(zipfile.ZipFile(package).namelist())
    for needed in [
        "manifest.yaml",
        "main.py",
        "requirements.txt",
        "assets/icon.svg",
        "components/event_listener/context.py",
        "components/event_listener/context.yaml",
    ]:
        assert needed in names, sorted(names)
