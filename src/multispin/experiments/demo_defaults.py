"""The demo's and the study's default sizes, apart from `experiments.demo` so the CLI can show them
in `--help` without importing the models' stack."""

# the paper's K = 20: device pools make it affordable on a small host
DEMO_DEVICES = 20
# rounds per policy of the default demo: whole batches of 4 rounds (experiments.paired) that fit
# 6 minutes of 2 idle cores after set-up with a margin (README, "The main job": 339 CPU-s, about
# 4 min 40 s; 20 rounds would be about 5 min 36 s, too close to call without re-timing on an
# idle host); 4 batches give Student's t 3 degrees of freedom where 12 rounds gave 2
DEMO_ROUNDS = 16
# the study: the paper's subtle comparison (adaptive vs all-DL, a few percent apart) needs about
# 2,000 rounds per policy for its interval to exclude 0; seeds run in parallel (--executor ray)
STUDY_POLICIES = ("adaptive", "all_dl")
STUDY_SEEDS, STUDY_ROUNDS = 10, 200
