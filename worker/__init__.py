"""The worker process: tasks, executors, transfer, acker, topology master."""
