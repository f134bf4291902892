export PYTHONPYCACHEPREFIX=/tmp/grader-pycache PYTHONPATH=$PWD
python3 -c 'import compileall, os, sysconfig
paths = sysconfig.get_paths()
compileall.compile_dir(paths["stdlib"], quiet=2, workers=0)
compileall.compile_dir("grader", quiet=2, workers=0)
skip = ("torch", "functorch", "torchgen", "nvidia", "triton", "sympy", "networkx", "mpmath")
for name in sorted(os.listdir(paths["purelib"])):
    p = os.path.join(paths["purelib"], name)
    if not name.startswith(skip) and os.path.isdir(p): compileall.compile_dir(p, quiet=2, workers=0)' > /dev/null 2>&1
timeout 60 python3 scripts/warm-check.py --runs 4 --trace-exit 2>&1 | tail -9
export GRADER_CACHE_DIR=/tmp/diag-cache
python3 -m grader submit submissions/bias_gelu_fused/float4_launcher.cu --format json -q > /dev/null 2>&1
sleep 3
for i in 1 2; do python3 -m grader submit submissions/bias_gelu_fused/float4_launcher.cu --format json -q --no-report | python3 -c "import json,sys; d=json.load(sys.stdin); print({k: v for k, v in d['phases'].items() if k.endswith('_t') or k in ('cli_to_early_s','cli_to_grade_s')})"; sleep 3; done
