"""Grading one submission: the pipeline (pipeline.grade, given a GradeRequest) and its steps before
anything runs (steps.py: read the source, build, screen), the run of its children beside the
build and its cases' draws (children.py), the child's job (jobs.py), and
`grader calibrate` (calibration.py). It calls every layer below (toolchain, run, analysis,
verdict) and is called by report, batch and the CLI; it imports nothing above itself.
"""
