"""The worker host: ``queuelog work``; speaks HTTP through queuelog.client only."""
