"""The Kafka protocol server: network, request handlers, purgatory, replica manager."""
