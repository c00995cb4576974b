"""Kafka connectors, on confluent-kafka (``pip install 'squall[kafka]'``), as storm-kafka-client behaves.

How the work is divided: :mod:`~squall.api.kafka.spout` is the spout (the consumer's adapter: assignment,
polling, seeking, committing); :mod:`~squall.api.kafka.options` its options in Storm's names and the pure
decisions they drive (where reading starts, which partitions a task reads); :mod:`~squall.api.kafka.offsets` the
pure offset bookkeeping (what may be committed, the retry schedule). Only the spout imports confluent-kafka, and
only when it runs, so declaring a topology needs no client.
"""
