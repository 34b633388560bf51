"""The error of the run-folder reader (:mod:`sim.results.runfolder`), a layer below the
reader and its schemas (:mod:`sim.results.table_schema`, :mod:`sim.results.summary_model`)
so that each can raise it."""

from __future__ import annotations


class RunFolderError(ValueError):
    """A folder that is not a readable run; the message is one line naming the folder
    or file (and the field, column or row) and what is wrong."""


class RunFolderNote(UserWarning):
    """Something a user should know about a run folder that is still read: one line
    (the CLI prints it as ``note: ...``), e.g. a folder written before fragsim recorded
    its tables' digests."""
