"""The local provider: an episode as child processes of the server, in namespaces of their own
where bubblewrap runs (`--sandbox local`)."""
