"""The composition root and command line of tierlog.

Layer 5: builds a broker from its config (log, RemoteLogManager, RLMM, plugins) and holds
the ``tierlog`` command.
"""
