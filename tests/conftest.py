import os

import torch

# The suite's models are tiny: intra-op threads only add spin-wait contention on a 2-core CI box
# (measured here: a 64-wide linear layer took 16 ms with 2 threads under load, 0.1 ms with 1).
torch.set_num_threads(int(os.environ.get("MULTISPIN_TEST_THREADS", "1")))


# `multispin(*args)`: run the command line in this process (tests/cli_fixture.py)
pytest_plugins = ["cli_fixture"]
