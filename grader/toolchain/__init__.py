"""The tools on the machine and what they build: every tool lookup (tools.py), the GPU as the
parent sees it without a CUDA context (gpuinfo.py), nvcc through ninja into the build cache
(build.py, with its flags in flags.py and the cache's keys, kept outputs and pruning in cache.py),
within its limits (running.py), whether the machine failed a build (faults.py), what the parent
reads from the device code (devicecode.py), the grader's own C libraries (hostlibs.py), a build's
result and its compiler's messages (outcome.py), and the one Jinja environment for generated files
and reports (render.py). It imports core and exercises, nothing above.
"""
