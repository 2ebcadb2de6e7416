"""The evaluation server: the benchmark session as a service (issue 18). Ground truth never leaves it."""
