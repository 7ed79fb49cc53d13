"""CLI verbs, one module each; each registers itself on multispin.cli.app."""
