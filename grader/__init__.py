"""grader: the autograder for a GPU programming course's CUDA kernel exercises (biasGeluFused,
ropeHalfSplit, geluSum, and any exercise given as data: a rubric, a reference folder, samples)."""

__version__ = "0.1.0"
