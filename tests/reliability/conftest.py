"""Fixtures of the reliability suites: an S3 endpoint on 127.0.0.1, a bucket per test, and
broker processes that are SIGKILLed at the end if still running.

The suites run short in ``make test``; ``make soak`` sets ``TIERLOG_SOAK=1`` for the long
versions (more kills, longer load) whose figures docs/RELIABILITY.md reports.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3_harness import brokers, bucket, s3_endpoint  # noqa: F401 - fixtures
