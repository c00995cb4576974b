"""The nimbus daemon: Thrift service, submission, scheduling, monitoring, lifecycle."""
