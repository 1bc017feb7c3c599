"""What a session is made from: the server's shared parts (:class:`SessionEnv`, the same
for every call) and who asked for this call (:class:`SessionOrigin`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server.rtvi.handler import ClientMessageHandler
from server.rtvi.ui_worker import UIEventHandler
from server.session.model_services import Services
from server.settings import Settings
from server.storage.store import ClientInfo, TranscriptStore


@dataclass(frozen=True)
class SessionEnv:
    """The server's side of every call: settings, services, the app's ``client-message``
    and ``ui-event`` handlers, and the transcript store (None: nothing recorded)."""

    settings: Settings
    services: Services
    handlers: dict[str, ClientMessageHandler]
    store: TranscriptStore | None = None
    ui_event_handlers: Mapping[str, UIEventHandler] | None = None


@dataclass(frozen=True)
class SessionOrigin:
    """Who asked for the call: the client, its ``requestData``, the ``POST /start`` that
    announced it (``start_id``) and the credential that created it (``owner``)."""

    client: ClientInfo = field(default_factory=ClientInfo)
    request_data: Any = None
    start_id: str | None = None
    owner: str | None = None
