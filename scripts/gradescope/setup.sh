#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image. The zip a course
# uploads holds this file, run_autograder, and the grader's checkout as grader/ (docs/instructors.md:
# "Gradescope"). Gradescope's machines have no GPU: the grader checks correctness on its
# CPU emulator there, and tiers need a GPU (or a course that forwards to a GPU host).
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip g++
python3 -m venv /opt/grader-venv
/opt/grader-venv/bin/python -m pip install --quiet --upgrade pip
# PyTorch: a CPU build is all the emulator needs; point pip at PyTorch's CPU index here
# to avoid downloading a CUDA build of several GB.
/opt/grader-venv/bin/python -m pip install --quiet torch
/opt/grader-venv/bin/python -m pip install --quiet /autograder/source/grader
