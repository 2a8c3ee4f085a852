"""The model both worlds share: job statuses, priorities, backoff, problem types."""
