"""grader: the autograder for the Day 96 biasGeluFused exercise."""

__version__ = "0.1.0"
