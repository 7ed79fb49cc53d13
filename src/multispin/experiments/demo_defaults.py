"""The demo's and the study's default sizes, apart from `experiments.demo` so the CLI can show them
in `--help` without importing the models' stack."""

# the paper's K = 20: device pools make it affordable on a small host
DEMO_DEVICES = 20
# rounds per policy of the default demo: whole batches of 4 rounds (experiments.paired), as many as
# fit 6 minutes of 2 idle cores (README, "The main job": 20 rounds took 5 min 17 s, 471 CPU-s; 24
# took 6 min 28 s: rounds after the first prompts end cost more, each starting prompts' prefill)
DEMO_ROUNDS = 20
# the study: the paper's subtle comparison (adaptive vs all-DL, a few percent apart) needs about
# 2,000 rounds per policy for its interval to exclude 0; seeds run in parallel (--executor ray)
STUDY_POLICIES = ("adaptive", "all_dl")
STUDY_SEEDS, STUDY_ROUNDS = 10, 200
