"""What the grader says to the platforms courses grade on, each in its own documented format.

scoring.py turns a Result into points from the rubric's `points` section (one item per
rubric item); github.py, classroom.py, gradescope.py, prairielearn.py and junit.py render
a Result (and its Score) for GitHub Actions, GitHub Classroom, Gradescope, PrairieLearn
and JUnit consumers. Nothing here grades: a Result comes in, a document goes out. It imports
core, exercises and report's templates; batch and the CLI call it.
"""
