"""The local cluster's parts, one concern a module (hack/cluster/README.md):

    config.py        versions, paths, addresses, the nodes' table
    procs.py         commands, processes (on the host or in a node's network namespace)
    pki.py           certificates and kubeconfigs
    network.py       the node network: the host's bridge, each node's namespace and routes
    controlplane.py  etcd, the API server, the controller manager, the scheduler, CoreDNS
    node.py          one node: containerd, the kubelet, kube-proxy
    teardown.py      stopping everything, and listing what is left
    faults.py        node faults: crash, partition, heal, start, drain, preempt
    hollow.py        hollow nodes: kubemark's kubelet with a fake runtime, beside the nodes

Standard library only: it runs with any Python 3.11.
"""
