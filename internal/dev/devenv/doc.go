// Package devenv runs kv-hint-operator on one machine: a local control plane
// (kube-apiserver and etcd on loopback, from internal/dev/controlplane), and
// kvhint's own processes (manager, sidecar; simulated workers from
// kvhint-dev) as real child processes. `kvhint-dev dev` and the end-to-end
// tests are built on it.
package devenv
