"""What the workers of `corral serve --workers N` share: seats, forwarding, metrics."""
