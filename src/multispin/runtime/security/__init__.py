"""Who may speak: CurveZMQ key files and allow-lists (keys.py), shared-secret MACs (auth.py),
connection and message-size limits (limits.py). A leaf ring: imports no other."""
