"""On every normal message (private and group), asks hostpipe for the context its
pipeline would inject and puts it before the user's message, in the message the runner
gets (`user_message_alter`). Because it rewrites the message, not the system prompt, it
works with every LangBot runner: the local agent, Dify, n8n, Coze and the others.

hostpipe is called with `POST /v1/turns` and the `preview` runner: the pipeline's
stages run (binding, prompts, mentions, resource context injection, with its consent
policy, cache and history), no model is called, and the answer's
`request.fenced_context` is the context exactly as hostpipe's own runners would send it
(each resource inside its fence).

The message the runner gets is the one the pipeline's stages left: a `/server:prompt`
command expanded into its prompt, `@server:uri` mentions read into the context. When a
stage ends the turn with a reply for the user (a prompt command missing an argument),
that reply is sent and LangBot's runner is not called; any other ended turn (a required
server down) lets the message go on without context.

The conversation id is LangBot's session name, `{launcher_type}_{launcher_id}`
(`person_12345`, `group_67890`), so hostpipe's conversation pins apply per chat.

A hostpipe that is down, slow, refuses the token or fails never stops a message: the
call is bounded by `timeout_ms` as a whole (connect, send and read together), and on
any failure the message goes on unchanged and one warning is logged (never the token).
"""
from __future__ import annotations

import asyncio
import logging
import typing

import httpx
from langbot_plugin.api.definition.components.common.event_listener import EventListener
from langbot_plugin.api.entities import context, events
from langbot_plugin.api.entities.builtin.platform import message as platform_message
from langbot_plugin.api.entities.builtin.provider import message as provider_message

log = logging.getLogger("hostpipe-context")

#: Default of the `timeout_ms` setting.
DEFAULT_TIMEOUT_MS = 5000
#: Bounds of the `timeout_ms` setting, in milliseconds.
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 100, 60_000


class Settings(typing.NamedTuple):
    """The plugin's settings, checked (manifest.yaml `spec.config`)."""

    url: str
    token: str
    pipeline: str
    timeout_s: float

    @classmethod
    def of(cls, config: dict[str, typing.Any]) -> "Settings | str":
        """The settings in `config`, or a sentence saying which one is wrong."""
        url = str(config.get("hostpipe_url") or "").strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            return "`hostpipe_url` must be an http:// or https:// URL"
        token = str(config.get("token") or "").strip()
        if not token:
            return "`token` is empty: set a turn token of hostpipe serve (HOSTPIPE_TURN_TOKEN)"
        pipeline = str(config.get("pipeline") or "default").strip()
        try:
            ms = int(config.get("timeout_ms") or DEFAULT_TIMEOUT_MS)
        except (TypeError, ValueError):
            return "`timeout_ms` must be a whole number of milliseconds"
        ms = min(max(ms, MIN_TIMEOUT_MS), MAX_TIMEOUT_MS)
        return cls(url, token, pipeline, ms / 1000)


class Fitted(typing.NamedTuple):
    """What hostpipe's pipeline made of a message."""

    #: The fenced context ("" when the pipeline injects nothing).
    context: str
    #: The message as the stages left it (a prompt command expanded).
    message: str
    #: A stage's reply for the user when a stage ended the turn, else None.
    reply: str | None
    #: The stage that ended the turn, else None.
    ended_by: str | None


#: The stages whose reply answers the user (their turn ends on purpose, not by failure).
REPLYING_STAGES = {"prompt_expansion"}


async def fetch_context(
    settings: Settings,
    message: str,
    conversation_id: str,
    sender: str,
    client: httpx.AsyncClient | None = None,
) -> Fitted:
    """What hostpipe's pipeline makes of `message`: its fenced context, the message as
    its stages left it, and the reply of a stage that ended the turn.

    Raises `HostpipeError` (a sentence for the log, without the token) when hostpipe
    cannot be reached, takes longer than `settings.timeout_s` in all, or answers with
    an error.
    """
    body = {
        "pipeline": settings.pipeline,
        "message": message,
        "runner": "preview",
        "conversation_id": conversation_id,
        "sender": sender,
    }
    headers = {"Authorization": f"Bearer {settings.token}"}
    own = client is None
    http = client or httpx.AsyncClient(timeout=settings.timeout_s)
    try:
        response = await asyncio.wait_for(
            http.post(f"{settings.url}/v1/turns", json=body, headers=headers),
            timeout=settings.timeout_s,
        )
    except (asyncio.TimeoutError, httpx.TimeoutException):
        raise HostpipeError(
            f"hostpipe did not answer within {int(settings.timeout_s * 1000)} ms"
        ) from None
    except httpx.HTTPError as e:
        raise HostpipeError(f"hostpipe could not be reached: {type(e).__name__}") from None
    finally:
        if own:
            await http.aclose()
    if response.status_code != 200:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = "no error code"
        raise HostpipeError(f"hostpipe answered {response.status_code} ({code})")
    try:
        doc = response.json()
    except ValueError:
        raise HostpipeError("hostpipe's answer is not JSON") from None
    if doc.get("failed"):
        raise HostpipeError(
            f"hostpipe's turn {doc.get('turn_id', '?')} failed; its trace says why"
        )
    ended_by = doc.get("ended_by")
    if ended_by:
        return Fitted("", message, str(doc.get("reply") or ""), str(ended_by))
    request = doc.get("request") or {}
    return Fitted(
        str(request.get("fenced_context") or ""),
        str(request.get("message") or message),
        None,
        None,
    )


class HostpipeError(Exception):
    """hostpipe gave no context (the reason, without secrets)."""


def with_context(
    event: events.PersonNormalMessageReceived | events.GroupNormalMessageReceived,
    fitted: Fitted,
) -> None:
    """Puts the context before the message the runner gets: before what another plugin
    already put there, else before the message as the pipeline's stages left it."""
    fenced = fitted.context
    current = event.user_message_alter
    if current is None:
        text = fitted.message or event.text_message
        event.user_message_alter = f"{fenced}\n\n{text}" if fenced else text
    elif not fenced:
        return
    elif isinstance(current, str):
        event.user_message_alter = f"{fenced}\n\n{current}"
    else:
        parts = current if isinstance(current, list) else [current]
        event.user_message_alter = [
            provider_message.ContentElement.from_text(f"{fenced}\n\n"),
            *parts,
        ]


class ContextListener(EventListener):
    async def initialize(self):
        await super().initialize()

        async def on_message(ctx: context.EventContext) -> None:
            event = ctx.event
            if not event.text_message.strip():
                return
            settings = Settings.of(self.get_plugin_config())
            if isinstance(settings, str):
                log.warning("hostpipe context is off: %s", settings)
                return
            conversation = f"{event.launcher_type}_{event.launcher_id}"
            try:
                fitted = await fetch_context(
                    settings, event.text_message, conversation, str(event.sender_id)
                )
            except HostpipeError as e:
                log.warning("no hostpipe context for %s: %s", conversation, e)
                return
            if fitted.ended_by in REPLYING_STAGES and fitted.reply:
                # The user asked hostpipe (a prompt command) and hostpipe answered.
                await ctx.reply(
                    platform_message.MessageChain([platform_message.Plain(text=fitted.reply)])
                )
                ctx.prevent_default()
                return
            if fitted.ended_by:
                log.warning(
                    "no hostpipe context for %s: stage %s ended the turn",
                    conversation,
                    fitted.ended_by,
                )
                return
            if fitted.context or fitted.message != event.text_message:
                with_context(event, fitted)

        self.handler(events.PersonNormalMessageReceived)(on_message)
        self.handler(events.GroupNormalMessageReceived)(on_message)
