"""``tierlog export`` argument parsing: timestamps are ASCII epoch milliseconds or ISO; the
Iceberg options are checked before Spark starts; a missing pyiceberg says what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tierlog.cli import CommandError, main
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


def _export(tmp_path) -> list[str]:
    config = tmp_path / "server.properties"
    config.write_text(f"rsm.config.storage.root={tmp_path / 'bucket'}\n")
    return ["export", "--config", str(config), "--topic", "t", "--output", str(tmp_path / "o")]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "iceberg"], "--format iceberg needs --table"),
        (["--format", "iceberg", "--table", "orders"], "NAMESPACE.TABLE"),
        (["--format", "iceberg", "--table", "a.b", "--catalog-property", "x"], "K=V"),
        (["--table", "a.b"], "need --format iceberg"),
    ],
)
def test_iceberg_options_are_checked_before_spark_starts(tmp_path, capsys, extra, message):
    assert main([*_export(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_without_pyiceberg_the_error_says_what_to_install(tmp_path):
    # A separate interpreter in which pyiceberg cannot be imported, as in a base install.
    code = (
        "import sys; sys.modules['pyiceberg'] = None\n"
        "from tierlog.cli import main\n"
        f"sys.exit(main({[*_export(tmp_path), '--format', 'iceberg', '--table', 'a.b']!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "pip install 'tierlog[iceberg]'" in done.stderr
    assert "Traceback" not in done.stderr
