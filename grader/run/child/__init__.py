"""The untrusted side: what runs in the grading child, next to the student's code.

worker.py is the child's main; backends.py holds what every child backend shares, cuda.py
loads the libraries and launches on the GPU, emulator.py on the CPU; walls.py puts up the
limits and the walls before the submission's code, sending.py sends its outputs back;
timing.py times on the GPU; guard.c and guard.py are the wall (the seccomp
filter installed before the submission's library is loaded). Nothing here
judges a result: the parent (verdict.py) does, from what the child sends.
"""
