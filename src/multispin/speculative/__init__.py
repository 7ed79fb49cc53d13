"""Token math: warping, batched ragged verification, residual correction, codecs, statistics.

Pure functions over arrays. Randomness always comes in as an argument (pre-drawn uniforms),
so a test can pin every outcome.
"""
