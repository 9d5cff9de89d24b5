"""The depot frames this process maps for values passed between processes, found by address.

A value handed on (an array a process received through depot, sent on to another) lies in a
depot object already: :meth:`Holdings.find` names the object, its frame and the offset there, so
that the sender names it instead of copying it (depot.handoff, depot.dask_family). Each frame is
remembered until the last view of it in this process goes; then, when this process owns its
object, the object is deleted (views other processes hold keep its bytes).
"""

import bisect
import threading
import weakref

import depot
from depot import connection

__all__ = ["HOLDINGS", "Holdings", "address", "exists", "exporter", "part"]


def address(buffer):
    """The address of a buffer's first byte (0 for an empty one)."""
    import numpy as np

    return np.frombuffer(buffer, dtype=np.uint8).__array_interface__["data"][0] \
        if buffer.nbytes else 0


def exporter(view):
    """The object that owns the bytes of memoryview `view` (a numpy array that owns its data, a
    depot frame, bytes): the bytes live at least as long as it does. Views of a numpy array,
    which Dask's serializers make, lead to the array that owns the data."""
    import numpy as np

    while True:
        if isinstance(view, memoryview):
            view = view.obj
        elif isinstance(view, np.ndarray) and view.base is not None:
            view = view.base
        else:
            return view


def exists(c, guid):
    """Whether `guid` is still in depot. stat, not contains: contains answers from this
    process's own reference."""
    try:
        c.stat(guid)
        return True
    except depot.NotFound:
        return False


def part(views, guid, frame, offset, length):
    """Bytes [offset, offset + length) of frame `frame` of `views` (object `guid`'s frames), as
    a sender named them; ValueError when they are not all there: a short view would be the
    wrong value, silently."""
    if not (0 <= frame < len(views) and 0 <= offset and 0 <= length and
            offset + length <= views[frame].nbytes):
        raise ValueError(f"object {guid} has no bytes [{offset}, {offset + length}) in frame "
                         f"{frame}: not the value that was sent")
    return views[frame][offset:offset + length]


class Holdings:
    """Frames of depot objects by address. Thread-safe (one lock)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._starts = []  # sorted
        self._frames = {}  # start -> (end, guid, frame index, the uid that created the object)

    def add(self, view, guid, frame, owned, creator):
        """Records `view`, frame `frame` of object `guid` (created by uid `creator`), until its
        last view goes; then deletes the object when this process owns it (`owned`)."""
        start = address(view)
        with self._lock:
            if start not in self._frames:
                bisect.insort(self._starts, start)
            self._frames[start] = (start + view.nbytes, guid, frame, creator)
        # The exporter behind the view lives as long as any view of the frame does (numpy's
        # arrays hold views of views, which share the exporter but not the first view).
        weakref.finalize(exporter(view), self._drop, start, guid, owned)

    def find(self, buffer):
        """(guid, frame index, offset, creator uid) of a remembered frame that contains
        `buffer`, or None."""
        return self.find_at(address(buffer), buffer.nbytes)

    def find_at(self, start, size):
        """As find, for the `size` bytes from address `start`."""
        with self._lock:
            i = bisect.bisect_right(self._starts, start) - 1
            if i < 0:
                return None
            frame_start = self._starts[i]
            end, guid, frame, creator = self._frames[frame_start]
        if start + size <= end:
            return guid, frame, start - frame_start, creator
        return None

    def _drop(self, start, guid, owned):
        with self._lock:
            if self._frames.get(start, (None, None))[1] == guid:
                del self._frames[start]
                self._starts.remove(start)
        if owned:
            try:
                connection.client().delete(guid)
            except depot.Error:
                pass  # deleted already, or the daemon is gone: nothing left to free


#: This process's holdings.
HOLDINGS = Holdings()
