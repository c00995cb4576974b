"""The supervisor daemon: registration, assignment sync, worker processes."""
