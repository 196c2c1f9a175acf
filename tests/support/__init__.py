"""Test support code (fake Kubernetes API server, helpers). Not shipped in the collection's plugins."""
