"""Decisions: DL power, UL/DL modes, draft lengths, baselines and exact oracles (numpy/scipy only)."""
