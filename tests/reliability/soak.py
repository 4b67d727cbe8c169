"""Short runs in ``make test``, long ones in ``make soak`` (``TIERLOG_SOAK=1``): more kills,
longer load, the figures docs/RELIABILITY.md reports."""

from __future__ import annotations

import os

SOAK = os.environ.get("TIERLOG_SOAK") == "1"
