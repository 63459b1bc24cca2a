"""The Kubernetes provider: an episode in a pod, over the API server's attach and exec streams
(`--sandbox kubernetes`)."""
