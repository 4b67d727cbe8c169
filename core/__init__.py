"""The Kafka-compatible broker core: record batches, the segment log, the protocol server.

Layer 1 of tierlog. It knows nothing above it: the remote tier is reached only through the
seam (a Protocol) that core defines and tiered implements.
"""
