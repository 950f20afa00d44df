"""The quorum tier on a real replicated store: etcd members on loopback (§11.3.1 table 2 row 3, §11.5.1).

=====================  ==========================================================================
module                 what it holds
=====================  ==========================================================================
:mod:`.cluster`        :class:`EtcdCluster`: start N etcd members, kill / pause / resume /
                       destroy a member's volume / restart, stop every process by pid
:mod:`.client`         :class:`EtcdClient`: etcd's v3 JSON gateway over httpx, member failover,
                       :class:`~kernel_lib.errors.QuorumUnavailableError` when no majority acknowledges
:mod:`.store`          :class:`EtcdStore`: the log store whose acknowledgment is a Raft commit
:mod:`.session`        :class:`ReplicationSession`: a cluster broken and healed by hand, one step
                       at a time, appending to a quorum-acknowledged log (the replication panel's state)
=====================  ==========================================================================
"""

from kernel_lib.errors import QuorumSetupError, QuorumUnavailableError   # re-exported: defined in kernel_lib.errors
from kernel_lib.quorum.client import EtcdClient
from kernel_lib.quorum.cluster import EtcdCluster, Member, etcd_binary, sweep_stale_clusters
from kernel_lib.quorum.store import EtcdStore
from kernel_lib.quorum.session import ReplicationSession

__all__ = ["EtcdClient", "QuorumUnavailableError", "EtcdCluster", "Member", "QuorumSetupError", "etcd_binary",
           "sweep_stale_clusters", "EtcdStore", "ReplicationSession"]
