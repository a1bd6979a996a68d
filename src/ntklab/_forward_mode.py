"""One lock for forward-mode automatic differentiation across threads.

torch keeps forward-mode AD's dual levels in one process-wide stack, not per thread: two
threads inside ``torch.func.jvp`` at once pop each other's level and fail with "Trying to
access a forward AD level with an invalid index" or "no level exists". Dask's threaded
scheduler, a ``distributed`` worker with several threads, or a user's thread pool all run
ntklab's functions that way, so every ``jvp`` in ntklab runs under :data:`FORWARD_MODE_LOCK`.
The work inside is itself multi-threaded by torch, so little parallelism is lost.
"""

from __future__ import annotations

import threading

__all__ = ["FORWARD_MODE_LOCK"]

#: Held around every forward-mode (``jvp``) computation in ntklab; re-entrant, so a
#: function that holds it may call another that takes it.
FORWARD_MODE_LOCK = threading.RLock()
