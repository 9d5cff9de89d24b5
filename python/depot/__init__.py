"""depot: the node's shared-memory object store, from Python.

Put buffers into the store and get them back, in any process of the node, as read-only
memoryviews over the very same pages (no copy)::

    import depot, numpy as np

    client = depot.Client()                 # $DEPOT_SOCKET, else the default socket
    guid = client.put(b"hello")             # any contiguous buffer, or a list of them
    obj = client.get(guid)                  # obj.frames: read-only memoryviews
    a = client.get_array(client.put_array(np.arange(10)))   # an ndarray over shared memory

Every failure raises a subclass of :class:`depot.Error` named like the status code:
:class:`depot.NotFound`, :class:`depot.Timeout`, :class:`depot.StoreFull`, ...
"""

import json

from depot import _core
from depot._core import DeviceFrame, Draft, Error, Object, Subscription

__all__ = ["Client", "DeviceFrame", "Draft", "Error", "Object", "Subscription",
           "ARRAY_METADATA_KEY"]

# One exception class per status code, made by the extension from the C++ table of codes, so
# that a code added there needs no change here.
globals().update(_core.errors)
__all__ += sorted(_core.errors)

#: The key, in an object's JSON metadata, of the description written by Client.put_array.
ARRAY_METADATA_KEY = "depot.ndarray"


class Client(_core.Client):
    """A connection to depotd: see :class:`depot._core.Client` for put, get and the rest.

    This class adds numpy helpers: :meth:`put_array` stores an array's bytes as one frame with
    its dtype and shape in the metadata, and :meth:`get_array` returns it as a read-only
    ``ndarray`` over the shared pages.
    """

    def put(self, data, **options):
        """As :meth:`depot._core.Client.put`, and more: frames that have
        ``__cuda_array_interface__`` (CuPy, PyTorch, Numba arrays on a GPU) are copied device to
        device into device frames (``places`` defaults to the first GPU for them); see
        depot.device_copy."""
        frames = data if isinstance(data, (list, tuple)) else [data]
        if any(device_copy.has_device_interface(f) for f in frames):
            return device_copy.put(self, frames, options.pop("places", None), **options)
        return super().put(data, **options)

    def put_array(self, array, *, name=None, guid=None, evictable=False):
        """Copies ``array`` into a new object and returns its GUID.

        The bytes are stored in C or Fortran order (whichever the array already has; other
        layouts are made C-contiguous first), with dtype, shape and order in the metadata.
        """
        import numpy as np

        array = np.asanyarray(array)
        if array.dtype.hasobject:
            raise TypeError("arrays of Python objects have no bytes to share; pickle them")
        order = "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            array = np.ascontiguousarray(array)
        description = {
            ARRAY_METADATA_KEY: {
                "descr": np.lib.format.dtype_to_descr(array.dtype),
                "shape": list(array.shape),
                "order": order,
            }
        }
        data = array.reshape(-1, order=order).view(np.uint8)
        return self.put(data, name=name, metadata=json.dumps(description).encode(), guid=guid,
                        evictable=evictable)

    def get_array(self, guid, timeout=None):
        """Gets an object written by :meth:`put_array` as a read-only ``ndarray``, zero-copy.

        The array holds the object (through its buffer) for as long as it, or any view of it,
        lives. ``timeout`` is as for :meth:`get`.
        """
        return array_of(self.get(guid, timeout))


def array_of(obj):
    """The ``ndarray`` that an :class:`Object` written by ``Client.put_array`` holds."""
    import numpy as np

    try:
        description = json.loads(obj.metadata)[ARRAY_METADATA_KEY]
    except (ValueError, KeyError, TypeError):
        raise _core.InvalidArgument(
            f"object {obj.guid} was not written by put_array (no array description in its "
            "metadata)") from None
    dtype = np.lib.format.descr_to_dtype(description["descr"])
    flat = np.frombuffer(obj.frames[0], dtype=dtype)
    return flat.reshape(description["shape"], order=description["order"])


# Last: these modules use the names above.
from depot import device_copy  # noqa: E402
from depot.node_cache import cache  # noqa: E402
__all__ += ["cache"]
