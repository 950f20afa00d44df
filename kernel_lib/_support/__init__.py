"""``_support``: stdlib-only helpers every layer may use (they import only :mod:`kernel_lib.errors`).

* :mod:`.checks` — value checks for user input (ids, seconds, times), each raising ConfigError;
* :mod:`.clock` — the ``Clock`` protocol, the wall clock and the manual clock;
* :mod:`.sqlite` — one way to open a SQLite file durably, check its layout version, run
  ``BEGIN IMMEDIATE`` transactions and turn "database is locked" into a typed retryable error;
* :mod:`.procs` — is a pid alive, process state, kill a process group, loopback ports;
* :mod:`.workdirs` — work directories marked with their owner's pid, the stale sweep;
* :mod:`.disks` — which filesystem and device a path is on (is it a RAM disk?);
* :mod:`.gc_pause` — the cyclic garbage collector paused around a bulk decode (the log's read path).

Private to kernel_lib (the leading underscore): its names may change between versions.
"""
