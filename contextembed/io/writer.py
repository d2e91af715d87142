"""An array streamed to ``.npy`` / ``.npz`` with bounded memory, under its name only once complete.

:func:`~contextembed.io.embed_file` writes through :class:`ArrayWriter`: the array goes to a hidden temporary file
beside the output (``.<name>.<random>.partial``) that is renamed to the output name only when every
row is written. An error, ``KeyboardInterrupt`` or (in the CLI) ``SIGTERM`` removes the temporary
and leaves whatever was at the output path before exactly as it was; only a hard kill (``SIGKILL``,
power loss) can leave a ``*.partial`` file behind, never a file under the output's name. An existing
output is refused unless ``overwrite=True`` (``--overwrite``); the output path, the input and every
option are checked before the model is loaded. A feature that is NaN or infinite, or too large for
``float16``, is an error naming the row, never written as such.

Part of :mod:`contextembed.io`, which imports :class:`ArrayWriter` from here.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from contextlib import ExitStack
from typing import Optional

import numpy as np

from .._runtime.files import atomic_file
from ..pooling._layers import as_output_dtype

OUTPUT_EXTENSIONS = (".npy", ".npz")
#: how error messages tell the user to allow replacing an existing output
OVERWRITE_FLAG = "--overwrite (overwrite=True)"


class ArrayWriter:
    """Write a ``(rows, dim)`` array block by block, never holding it all in memory, atomically.

    ``.npy`` is written through a memory map; ``.npz`` streams ``features.npy`` into the archive and
    adds ``extra`` arrays (e.g. ``lengths``) at the end. Everything goes to a temporary file beside
    ``path`` that replaces ``path`` only when the ``with`` block ends without an error and exactly
    ``n_rows`` rows were written; otherwise the temporary is removed and ``path`` is untouched::

        with ArrayWriter("out.npz", n_rows, dim) as writer:
            writer.write(block)              # (rows, dim), as many times as needed
            writer.close(lengths=lengths)    # optional: adds extra arrays (.npz)

    Parameters
    ----------
    path : str
        Output ``.npy`` or ``.npz``; its directory must exist.
    n_rows, dim : int
        Shape of the whole array.
    dtype : {"float32", "float16"}
    overwrite : bool
        Replace an existing ``path``; otherwise ``FileExistsError`` (checked on entering and again
        just before the rename).
    """

    def __init__(self, path: str, n_rows: int, dim: int, dtype: str = "float32", *, overwrite: bool = False) -> None:
        path = os.fspath(path)
        if not path.endswith(OUTPUT_EXTENSIONS):
            raise ValueError(f"output {path!r} must end in .npy or .npz")
        self.path, self.shape, self.dtype = path, (int(n_rows), int(dim)), np.dtype(dtype)
        self.overwrite, self.row, self.closed = overwrite, 0, False
        self._npy = path.endswith(".npy")
        self._digest = hashlib.blake2b(digest_size=16)
        self._stack: Optional[ExitStack] = None

    def __enter__(self) -> "ArrayWriter":
        with ExitStack() as stack:
            temporary = stack.enter_context(atomic_file(self.path, overwrite=self.overwrite, what="output",
                                                        flag=OVERWRITE_FLAG))
            stack.callback(self._release)  # runs before the rename or removal of the temporary
            self._open(temporary)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        stack, self._stack = self._stack, None
        if kind is not None:
            return stack.__exit__(kind, value, traceback)  # removes the temporary, re-raises
        with stack:
            self.close()
        return False

    def _open(self, temporary: str) -> None:
        if self._npy:
            self._memmap = np.lib.format.open_memmap(temporary, mode="w+", dtype=self.dtype, shape=self.shape)
            return
        self._zip = zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self._stream = self._zip.open("features.npy", "w", force_zip64=True)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_2_0(self._stream, header)

    def _release(self) -> None:
        """Close the memory map or archive handles (idempotent); deletes nothing."""
        if self._npy:
            self.__dict__.pop("_memmap", None)
            return
        for name in ("_stream", "_zip"):
            handle = self.__dict__.pop(name, None)
            if handle is not None:
                handle.close()

    def write(self, block: np.ndarray) -> None:
        """Append ``(rows, dim)``."""
        if self._stack is None or self.closed:
            raise RuntimeError("ArrayWriter.write outside its with block (or after close)")
        block = np.asarray(block)
        if block.ndim != 2 or block.shape[1] != self.shape[1] or self.row + len(block) > self.shape[0]:
            raise ValueError(f"block of shape {block.shape} does not fit at row {self.row} of {self.shape}")
        block = self._checked(block)
        self._digest.update(block)  # C-contiguous, in the output dtype: the bytes written
        if self._npy:
            self._memmap[self.row : self.row + len(block)] = block
        else:
            self._stream.write(block.tobytes())
        self.row += len(block)

    def features_hash(self) -> str:
        """``blake2b`` (128-bit, hex) of the rows written so far, as stored (the array's data bytes)."""
        return self._digest.hexdigest()

    def _checked(self, block: np.ndarray) -> np.ndarray:
        """``block`` in the output dtype; NaN, infinity or a float16 overflow is an error
        (:func:`~contextembed.pooling._layers.as_output_dtype`)."""
        try:
            return as_output_dtype(block, self.dtype, lambda row: f"row {self.row + row} of {self.path}",
                                   "write float32 instead")
        except ValueError as error:
            raise ValueError(f"{error}; nothing was written") from None

    def close(self, **extra: np.ndarray) -> None:
        """Check that every row was written and finish the file (``.npz``: add ``extra`` arrays).

        The file is renamed into place when the ``with`` block ends. Raises ``RuntimeError`` if rows
        are missing (then nothing is renamed).
        """
        if self.closed:
            if extra:
                raise RuntimeError("ArrayWriter.close(**extra) after the writer was closed")
            return
        if self.row != self.shape[0]:
            raise RuntimeError(f"wrote {self.row} rows, expected {self.shape[0]}; {self.path} was not written")
        if extra and self._npy:
            raise ValueError(f"a .npy output holds one array; extra arrays ({', '.join(extra)}) need .npz")
        if self._npy:
            self._memmap.flush()
        else:
            self._stream.close()
            for name, array in extra.items():
                with self._zip.open(f"{name}.npy", "w", force_zip64=True) as handle:
                    np.lib.format.write_array(handle, np.asarray(array))
        self._release()
        self.closed = True


__all__ = ["OUTPUT_EXTENSIONS", "OVERWRITE_FLAG", "ArrayWriter"]
