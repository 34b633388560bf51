"""Autoscaling policies (issue 11, not built yet): periodic decisions over a read-only
fleet view -- replicas to add or remove, with a cause. One registry, as
``policies.allocators``."""
