"""PySpark over the remote tier: the ``tierlog`` DataSource, the Parquet export job and the
leader-epoch lineage filter.

Layer 4; reads the archive directly and never imports core.server.
"""
