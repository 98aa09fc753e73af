"""How long a connection polls for a reply before it waits for one (sans-IO).

After a command is written on a plain socket, the reply is usually there within a few
passes through Trio's scheduler: the server answers in tens of microseconds on a local or
same-zone network, and each pass (other tasks' steps, one ``epoll_wait`` that does not
block) takes about ten. Waiting for readability instead registers the socket with epoll
and puts the thread to sleep in the kernel; on a virtual machine that sleep and the wakeup
after it cost more than the reply's own round trip. So a read that polls makes up to
:data:`SPIN_PASSES` passes through the scheduler, each followed by one non-blocking read,
and only then waits (the shell in :mod:`trio_maint._net.wire`). Other tasks run in every
pass; nothing blocks the event loop. The reads that poll: the first after a write (a
command's or a pipeline's), and every further read of a single command's reply.

Polling that keeps missing (a far server, slow commands) would be CPU spent for nothing,
so :class:`ReadSpin` backs off: after a miss the connection's next 2, 4, ..., up to
:data:`MAX_SKIP` polling reads wait at once, and one reply found by polling ends the
back-off. A far server costs one miss, about ``SPIN_PASSES`` passes, per ``MAX_SKIP``
polling reads.

:func:`read_now` decides the reads that try the socket before any pass: the rest of a
reply begun is usually there already.

docs/performance.md ("Polling for the reply") has the measurements.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_SKIP", "READS_NOW", "SPIN_PASSES", "ReadSpin", "read_now"]

#: Passes through the scheduler (``int``), each followed by one non-blocking read, before
#: a connection waits for its reply's readability.
SPIN_PASSES: Final = 8
#: The most polling reads (``int``) that wait at once after polling missed, in a row.
MAX_SKIP: Final = 64
#: Misses in a row past which the back-off stops growing (``2 ** 6 == MAX_SKIP``).
_MAX_MISSES: Final = MAX_SKIP.bit_length() - 1
#: Reads of one reply, or of one pipeline's replies (``int``), the first included, of
#: which all but the first try the socket before passing through the scheduler.
READS_NOW: Final = 4


def read_now(reads: int) -> bool:
    """Whether the next read, after ``reads`` (``int``) reads of the same reply (or of the
    same pipeline's replies), tries the socket at once, before any pass through the
    scheduler: the 2nd to :data:`READS_NOW`-th do (the rest of a reply begun is usually
    in the socket already); the first does not (right after the write nothing is there
    yet), nor do those after the :data:`READS_NOW`-th, so that a huge reply never holds
    the event loop for more than that many reads in a row."""
    return 0 < reads < READS_NOW


class ReadSpin:
    """One connection's polling state: how many passes its next polling read makes.

    ``skip``: polling reads still to wait at once (``int``); ``misses``: polls in a row
    that found nothing (``int``). Not thread-safe; one per connection.
    """

    __slots__ = ("misses", "skip")

    def __init__(self) -> None:
        self.skip = 0
        self.misses = 0

    def passes(self) -> int:
        """Passes to make before this polling read waits for readability:
        :data:`SPIN_PASSES`, or ``0`` (wait at once) while backing off."""
        if self.skip:
            self.skip -= 1
            return 0
        return SPIN_PASSES

    def found(self) -> None:
        """Polling found the reply: the back-off ends."""
        self.misses = 0

    def missed(self) -> None:
        """Polling found nothing: ``misses`` grows by one (up to 6), and the next
        ``2 ** misses`` polling reads (so 2, 4, ... at most :data:`MAX_SKIP`) wait at
        once."""
        misses = self.misses
        if misses < _MAX_MISSES:
            misses += 1
            self.misses = misses
        self.skip = 1 << misses
