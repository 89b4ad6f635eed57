"""See docs/architecture.md for what this subpackage owns."""
