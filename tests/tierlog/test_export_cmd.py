"""``tierlog export`` argument parsing: timestamps are ASCII epoch milliseconds or ISO."""

from __future__ import annotations

import pytest

from tierlog.cli import CommandError
from tierlog.export_cmd import timestamp_ms


def test_epoch_milliseconds_and_iso_dates() -> None:
    assert timestamp_ms("1700000000000", "--since") == 1_700_000_000_000
    assert timestamp_ms("2024-01-01", "--since") == 1_704_067_200_000


@pytest.mark.parametrize("text", ["\u00b2", "\u0661\u0662", "12\n", "soon"])
def test_anything_else_is_a_usage_error_naming_the_option(text: str) -> None:
    # "²" passes str.isdigit() and then fails int(): it must not end in a traceback.
    with pytest.raises(CommandError, match="--until") as caught:
        timestamp_ms(text, "--until")
    assert caught.value.exit_code == 2
