"""The quorum tier on a real replicated store: etcd members on loopback (§11.3.1 table 2 row 3, §11.5.1).

=====================  ==========================================================================
module                 what it holds
=====================  ==========================================================================
:mod:`.cluster`        :class:`EtcdCluster`: start N etcd members, kill / pause / resume /
                       destroy a member's volume / restart, stop every process by pid
:mod:`.client`         :class:`EtcdClient`: etcd's v3 JSON gateway over httpx, member failover,
                       :class:`QuorumUnavailableError` when no majority acknowledges
:mod:`.store`          :class:`EtcdStore`: the log store whose acknowledgment is a Raft commit
=====================  ==========================================================================
"""

from kernel_lib.quorum.client import EtcdClient, QuorumUnavailableError
from kernel_lib.quorum.cluster import EtcdCluster, Member, QuorumSetupError, etcd_binary, sweep_stale_clusters
from kernel_lib.quorum.store import EtcdStore

__all__ = ["EtcdClient", "QuorumUnavailableError", "EtcdCluster", "Member", "QuorumSetupError", "etcd_binary",
           "sweep_stale_clusters", "EtcdStore"]
