"""Where audit events go: the outbox setting as an object. Made once by the worker and the
orchestrator from ``Settings.outbox``, handed to every step that writes events."""

from __future__ import annotations

from deepagents.contract.events import AuditEvent


class EventSink:
    """Where audit events go: to the outbox, with the script of the step that caused them
    (a delivery's, a submit's, a cancel's, a reply's). ``event_sink(False)``, the outbox
    off, takes none. A step asks ``wanted`` before building events that cost something to
    build; cheap ones it hands over as they are."""

    wanted = True

    def keep(self, events: list[AuditEvent]) -> list[AuditEvent]:
        """The events to send on with a step's script (a park, a commit, a cancel, ...)."""
        return events


class _NoEvents(EventSink):
    """The outbox is off: nothing writes an audit event."""

    wanted = False

    def keep(self, events: list[AuditEvent]) -> list[AuditEvent]:
        return []


def event_sink(outbox: bool) -> EventSink:
    """The sink for the ``outbox`` setting."""
    return EventSink() if outbox else _NoEvents()
