"""hostpipe context: a LangBot plugin that puts the context of a hostpipe pipeline into
every normal message before the runner gets it (components/event_listener/context.py)."""
from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class HostpipeContext(BasePlugin):
    async def initialize(self) -> None:
        pass
