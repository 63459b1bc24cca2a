"""The `corral` command. It may import every part of corral; nothing imports it."""
