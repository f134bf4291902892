"""The course server (`grader serve`): students upload over HTTP, a grading worker grades each
upload through the batch's pipeline (lanes, walls, backend), and one SQLite file in the course's
folder keeps every upload, its result.json and its reports.

- store.py: the SQLite store (uploads, tokens, events, results) and the fair queue's choice;
  grades.py: a stored grade's states, word, rank and a student's best;
- worker.py: the grading worker, a process of its own (`python -m grader.serve.worker`);
- app.py: the ASGI app's handlers (the HTTP API, the pages) and the worker's keeper; course.py:
  what they share (who asks, the CSRF token, bounded forms, event streams and their fan-out);
- client.py: `grader submit --server` (standard library only);
- export.py: the batch's class files written from the store.

It sits above grader.batch (it grades through grade_entries and exports with its writers) and
below grader.cli. docs/serve.md says how to run it.
"""
