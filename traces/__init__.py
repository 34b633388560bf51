"""Request traces: the canonical schema, loaders for public formats, synthetic
generators and transforms. Imports nothing from the rest of fragsim."""
