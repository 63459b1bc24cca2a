"""The Modal provider: an episode in a Modal Sandbox, in Modal's cloud (`--sandbox modal`)."""
