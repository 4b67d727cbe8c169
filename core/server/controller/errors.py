"""Errors the controller answers requests with; each carries Kafka's error code."""

from __future__ import annotations

from core.errors import CoreError


class ControllerError(CoreError):
    """Base of the controller's errors."""


class NotControllerError(ControllerError):
    """This broker is not the active controller (NOT_CONTROLLER)."""

    error_code = 41
    retriable = True


class StaleBrokerEpochError(ControllerError):
    """A broker asked with an epoch older than its registration's (STALE_BROKER_EPOCH)."""

    error_code = 77


class BrokerNotAvailableError(ControllerError):
    """The broker is not registered, so not live (BROKER_NOT_AVAILABLE)."""

    error_code = 8
