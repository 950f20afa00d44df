"""``bench``: benchmarks, each printing ratios against a baseline measured in the same run.

* :mod:`.append` — append latency by tier, group commit (eq. 2), peers (DBOS, LangGraph);
* :mod:`.restore` — restore from a checkpoint against a fold from the start, the scrubber;
* :mod:`.replay` — serving a recording through the replay adapter against a plain fold;
* :mod:`.diverge` — locating the first divergence against a plain fold;
* :mod:`.quorum` — etcd acknowledgment latency and group commit against local fdatasync;
* :mod:`.growth` — bytes written and restore time of full snapshots against delta chains on a
  growing trajectory (notebook 11.4).

All of them time through :mod:`.harness`: interleaved rounds, summaries, ratios against a
baseline of the same run, machine info and which disk was measured.

May import: every layer below ``cli`` and ``course``.
"""
