"""The demo's and the study's default sizes, apart from `experiments.demo` so the CLI can show them
in `--help` without importing the models' stack."""

# the paper's K = 20: device pools make it affordable on a small host
DEMO_DEVICES = 20
# rounds per policy of the default demo: its CPU fits about 6 minutes of 2 idle cores after set-up
# (README, "The main job"); at that length adaptive vs all-DL was decided on seed 0, adaptive vs
# all-UL was not (README)
DEMO_ROUNDS = 12
# the study: the paper's subtle comparison (adaptive vs all-DL, a few percent apart) needs about
# 2,000 rounds per policy for its interval to exclude 0; seeds run in parallel (--executor ray)
STUDY_POLICIES = ("adaptive", "all_dl")
STUDY_SEEDS, STUDY_ROUNDS = 10, 200
