"""See DESIGN.md for what this subpackage owns."""
