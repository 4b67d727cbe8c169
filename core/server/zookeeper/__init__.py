"""ZooKeeper for cluster mode: an asyncio client over kazoo and Kafka's znode layout.

``kafka_zk.KafkaZkClient`` is what the controller and the brokers use; see its module
docstring for the znode table.
"""
