"""Thread set-up shared by the PyTorch baselines (bert_stack.py, sentence_bench.py, decoder_bench.py).

Import it and call pin() before numpy or torch is imported: the pools it sizes are sized when those libraries
load, long before argparse has run. A baseline must run at its best (DESIGN.md "Performance"):

- The build machines set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE to force OpenBLAS's Haswell kernels, which halves
  its speed here; they are dropped.
- torch.set_num_threads sizes torch's OpenMP pool, but Debian's torch does its sgemm in OpenBLAS (pthreads
  build), whose pool is sized from the environment when it loads; both are pinned to --threads
  (OPENBLAS_NUM_THREADS and OMP_NUM_THREADS).
- With both pools on the same cores, libgomp's spinning workers steal the cores from OpenBLAS's threads:
  BERT-base on 2 threads measured ~440-600 ms with the default wait policy, ~170 ms with PASSIVE (1 thread:
  ~300 ms either way); OMP_WAIT_POLICY defaults to PASSIVE.

Standard library only.
"""

import os
import sys


def threads_from_argv(default=None):
    """The value of the first --threads N or --threads=N in sys.argv, else default (read before argparse)."""
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return default


def pin(default=None):
    """Set the thread environment as described above, from --threads. With a default (the script's --threads
    default), OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are always set; with none (bert_stack.py, whose default
    is torch's own thread count), only when --threads is given a non-empty value."""
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(name, None)
    threads = threads_from_argv(default)
    if default is not None or threads:
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = threads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
