"""A brain for one business: the session runtime (``turn_runtime.py``) over the business's
dialogue (``dialogue.py``), neither knowing the inside of the other, as LiveKit's
``AgentSession`` runs an ``Agent``."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable

from voicebot.brain.act.answers import KnowledgeSearch
from voicebot.brain.act.tools import Dispatcher, ToolRegistry
from voicebot.brain.business.profile import Profile
from voicebot.brain.config import BrainSettings
from voicebot.brain.decide.form import Forms
from voicebot.brain.llm import ChatFunction
from voicebot.brain.read.guard import TopicGuard
from voicebot.brain.read.reading import Reader
from voicebot.brain.read.sentence_encoder import SentenceEncoder
from voicebot.brain.runtime.dialogue import Dialogue, urgent_screen
from voicebot.brain.runtime.session_store import SessionStore
from voicebot.brain.runtime.turn_runtime import SessionRuntime


class Agent(SessionRuntime):
    def __init__(
        self,
        settings: BrainSettings,
        chat: ChatFunction,
        store: SessionStore,
        tools: ToolRegistry | None = None,
        guard: TopicGuard | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        profile: Profile | None = None,
        side_chat: ChatFunction | None = None,
        knowledge: KnowledgeSearch | None = None,
        encoder: SentenceEncoder | None = None,
        today: Callable[[], datetime.date] = datetime.date.today,
        knowledge_in: dict[str, KnowledgeSearch] | None = None,
        encoders_in: dict[str, SentenceEncoder] | None = None,
    ) -> None:
        """``knowledge_in``, ``encoders_in``: a language's own knowledge search and the encoder
        that reads its turns (the task picker; a multilingual one for a language the default
        encoder was not trained on), where the first language's do not serve it."""
        profile = profile or Profile()
        own_knowledge, own_encoder = knowledge_in or {}, encoders_in or {}
        dialogues = {language: Dialogue(settings, chat, store, profile.in_language(language), tools, clock,
                                        sleep, side_chat, own_knowledge.get(language, knowledge),
                                        own_encoder.get(language, encoder), today,
                                        business_language=profile.languages[0])
                     for language in profile.languages}
        self.dialogue: Dialogue = dialogues[profile.languages[0]]
        urgent = urgent_screen(profile, encoder, self.dialogue.side_chat, settings.urgent_timeout_s)
        super().__init__(dialogues, settings, store, profile, guard, urgent, clock)

    async def warm_up(self) -> None:
        """The prompts' fixed starts prefilled once at start (the reading's, then the guard's),
        so the first caller does not pay a cold prefill."""
        await self.dialogue.warm_up()  # one prompt for every language: the reading's is the same
        if self.guard is not None:
            await Dialogue.warm("the guard's prompt", self.guard.warm)

    # The dialogue's parts that the server, tests and tools reach through the agent.
    @property
    def chat(self) -> ChatFunction:
        return self.dialogue.chat

    @property
    def forms(self) -> Forms:
        return self.dialogue.forms

    @property
    def reader(self) -> Reader:
        return self.dialogue.reader

    @property
    def dispatcher(self) -> Dispatcher:
        return self.dialogue.dispatcher
