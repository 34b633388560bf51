"""The bodies of the ``fragsim`` commands: the work each command does once its front
(``sim/cli/<command>.py``) has parsed and checked the command line. A body imports what
it needs at file level (pandas, the engine, ``traces``); it is loaded only when its
command runs, by name, through :func:`sim.cli.lazy.call` -- no front imports one."""
