"""Running code that is not the grader's: the sandboxed children (sandbox.py starts them and
reads what they send, with spawn.py (their environment and limits), folders.py (their own
folders) and groups.py (their process groups, killed and reaped); child/ is what runs inside;
replaying.py runs a GPU grade's recorder, then its measuring process), the authenticated result channel
(protocol.py), and the GPU's lanes (lanes.py: what is timed on a GPU runs alone). Below the
verdict, which judges what comes back; it imports core, exercises and toolchain only.
"""
