"""The ZooKeeper-mode controller (Kafka's KafkaController): one broker of the cluster, elected
through ``/controller``, decides leaders and ISRs and tells the brokers.

``controller.ZkController`` is the entry point; see its module docstring.
"""
