"""What the sandbox providers share: copies and walks of what an agent left, links, the
pristine verifier start, the exec-driven verify procedure, the warm pool, the live-sandbox registry."""
