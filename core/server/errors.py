"""Errors of the protocol layer: frames that cannot be served close their connection."""

from __future__ import annotations


class InvalidRequestError(Exception):
    """A frame that cannot be parsed; the connection that sent it is closed."""


class UnsupportedVersionRequestError(InvalidRequestError):
    """A known api key at a version this broker does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported version {api_version} of api key {api_key}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
