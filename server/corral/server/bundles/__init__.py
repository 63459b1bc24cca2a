"""Bundles: the model every format reads into, corral's own folder format, the format registry,
checks, and the verifiers a bundle declares."""
