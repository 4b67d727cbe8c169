"""RemoteStorageManager implementations: a local directory, S3 (boto3) and fsspec (HDFS).

Layer 3, independent of rlmm.
"""
