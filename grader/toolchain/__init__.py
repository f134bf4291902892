"""The tools on the machine and what they build: every tool lookup (tools.py), the GPU as the
parent sees it without a CUDA context (gpuinfo.py), nvcc through ninja into the build cache
(build.py, cache.py), within its limits (running.py), its result and its compiler's messages
(outcome.py), and the one Jinja environment for generated files and reports
(render.py). It imports core and exercises, nothing above.
"""
