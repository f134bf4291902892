"""The bottom layer: what every other package may use, and which uses nothing above it.

Errors (errors.py) and exit codes; the backends, CUDA and the emulator, as objects (backend.py); the
Result and its parts (results.py) and the other small typed objects that cross a file or a process
boundary (contract.py, typed.py); where the grader's data lives (locations.py); the rubric's little
languages (signature.py, exprs.py); reading a .cu file's text (source.py) and what the emulator
needs from it (emulation.py); comparing an output with its answer (checking.py); elementwise numpy
work on large arrays in blocks over a few threads (blocks.py); statistics (stats.py); the resource
limits and process groups of everything the grader starts (limits.py, processes.py); what a binutils
tool read from a file, kept beside it (objmemo.py).
It imports no other grader package.
"""
