"""What a student reads: the report files of one grade (files.py: result.json, report.md,
report.html, the maps) and the attempts remembered for a file (history.py). It imports the
layers below (core, verdict's maps, toolchain's templates); batch and the CLI call it.
"""
