"""What topology authors write against: components, tuples, the topology DSL, metrics, testing helpers,
Spark bolts and submitting. Import these names from :mod:`squall`.

Above :mod:`squall.core`, below the daemons (see docs/internals/index.md).
"""
