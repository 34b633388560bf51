"""Pluggable policies: KV-cache allocators, routing, restart, autoscaling, admission."""
