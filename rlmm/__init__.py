"""RemoteLogMetadataManager on the internal topic ``__remote_log_metadata``.

Layer 3: serde, partitioner, cache, snapshots, partition remover and formatter.
"""
