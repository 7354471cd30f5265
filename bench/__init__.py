"""Benchmarks of sparsetensor against SciPy and PyTorch (not tests). See bench/README.md."""
