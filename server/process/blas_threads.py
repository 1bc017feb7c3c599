"""numpy's BLAS on one thread: a server's parallelism is its sessions, not its matrices.

numpy's OpenBLAS starts a worker per core, and after a product big enough to be split
(the end-of-turn model's log-mel features, ``[80, 201] @ [201, 801]``, at every pause)
its workers spin-wait for the next one. Measured here, one Smart Turn prediction took
165 ms of CPU for 84 ms of work: the idle worker spun through the whole onnxruntime
inference that followed the features. On two cores shared by twenty calls that is a
core's worth of nothing. With one thread the features take 4.5 ms instead of 5; nothing
else the server does with numpy is large enough to be split.

``threadpoolctl`` (maintained by the scikit-learn developers) finds the BLAS numpy loaded
and sets its threads at run time, so it works whoever imported numpy first; an
environment variable would have to be set before that import. OpenMP (CTranslate2's, for
the embedded whisper) is left alone: that model uses its threads.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def limit_blas_threads(threads: int = 1) -> None:
    """Make numpy's BLAS use ``threads`` threads from now on, in this process."""
    threadpool_limits(limits=threads, user_api="blas")
