"""What the compiled code says without running it: the source screen against the built
library (screening.py), the SASS facts per kernel (sass.py), the launch configurations each
kernel got (launches.py), the rubric's findings from both (findings.py), and `grader explain`
(explain.py); and which sources of a class share their code (similarity.py, on the source's
scan). It imports core, exercises and toolchain, nothing above.
"""
