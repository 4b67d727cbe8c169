"""What tests in several directories share: real broker processes and the clients, wire
helpers, ZooKeeper, S3 and PKI fixtures they need, waits with a deadline, an in-memory
remote log metadata topic, and a tiered topic written the way a broker writes one
(``tiered_data``, for the verify and restore tests).

pytest puts the repository root on ``sys.path`` (``pythonpath`` in ``pyproject.toml``), so a
test imports ``tests.support.<module>``; ``tests/conftest.py`` registers the shared fixtures once.
Helpers used by one directory stay there and are imported relatively (``from .harness
import ...``).
"""
